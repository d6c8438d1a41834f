"""The two-branch private-shared model (KTEPS, PFL-DA, arch A/B/C) and FURL's user vector."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Batch
from fedjax_sc.algorithms.kteps import RULES, kteps_loss
from fedjax_sc.models.private_shared import (
    PRIVATE_FROM,
    PrivateSharedClassifier,
    mode_probabilities,
)
from fedjax_sc.models.text_classifier import TextClassifier, init_params

TOKENS = jnp.array([[3, 4, 5, 0], [6, 0, 0, 0], [7, 8, 9, 2]])


@pytest.mark.parametrize("private_from", PRIVATE_FROM)
@pytest.mark.parametrize("projection,gated,furl", [(True, False, 0), (False, True, 3)])
def test_global_model_reads_shared_leaves_only(private_from, projection, gated, furl):
    model = PrivateSharedClassifier(vocab_size=12, embed_dim=4, hidden=3, mlp_hidden=5,
                                    private_from=private_from, projection=projection,
                                    gated=gated, furl_dim=furl)
    params = init_params(model, jax.random.key(0), np.ones((12, 4), np.float32))
    labels = masking.label_leaves(params, RULES)  # the rules cover every variant exactly
    shared = masking.select(params, labels, masking.SHARED)
    private = masking.select(params, labels, masking.PRIVATE)
    assert all(not k.startswith(("private_", "gate", "user")) for k in shared)
    out = model.apply({"params": params}, TOKENS)
    f = 2 * 3 + furl
    assert out.shared_logits.shape == out.private_logits.shape == (3, 2)
    assert out.shared_features.shape == out.private_features.shape == (3, f)
    assert (out.gate is not None) == gated
    g = model.apply({"params": shared}, TOKENS, method=model.global_logits)
    if not furl:  # without FURL the global model is exactly the shared branch
        np.testing.assert_allclose(g, out.shared_logits, rtol=1e-6)
    if "private_embedding" in params:  # pretrained rows initialise both tables
        np.testing.assert_array_equal(params["private_embedding"]["embedding"], 1.0)
    probs = mode_probabilities(out)
    np.testing.assert_allclose(jnp.sum(probs["sp"], -1), 1.0, rtol=1e-6)
    if not gated:
        np.testing.assert_allclose(probs["sp"], (probs["s"] + probs["p"]) / 2, rtol=1e-6)
    assert set(private) >= {"private_classifier"}


def test_furl_user_vector_is_used_by_the_client_and_zero_in_the_global_model():
    model = TextClassifier(vocab_size=12, embed_dim=4, hidden=3, mlp_hidden=5, furl_dim=2)
    params = init_params(model, jax.random.key(0))
    np.testing.assert_array_equal(params["user"]["vector"], 0.0)
    assert params["classifier"]["hidden"]["kernel"].shape == (2 * 3 + 2, 5)
    moved = {**params, "user": {"vector": jnp.array([3.0, -2.0])}}
    personal = model.apply({"params": moved}, TOKENS)
    glob = model.apply({"params": moved}, TOKENS, method=model.global_logits)
    np.testing.assert_allclose(glob, model.apply({"params": params}, TOKENS), rtol=1e-6)
    assert not np.allclose(personal, glob)


def test_unknown_private_from_is_refused():
    with pytest.raises(ValueError, match="private_from"):
        init_params(PrivateSharedClassifier(vocab_size=5, embed_dim=2, hidden=2,
                                            private_from="everything"), jax.random.key(0))


@pytest.mark.parametrize("private_from,moved", [("classifier", {"embedding", "encoder"}),
                                                ("encoder", {"embedding"}),
                                                ("embedding", set())])
def test_knowledge_transfer_reaches_the_shared_leaves_the_private_branch_reads(private_from,
                                                                               moved):
    """lambda1 changes the shared gradient only below where the private branch starts.

    The teacher of Eq. 8 is the shared head's output behind ``stop_gradient``, so the term
    reaches the shared branch only through the leaves the private branch reads: the word table
    and BiGRU (A), the word table (B), none (C: the global model does not depend on lambda1).
    """
    model = PrivateSharedClassifier(vocab_size=12, embed_dim=4, hidden=3, mlp_hidden=5,
                                    private_from=private_from, projection=False)
    params = init_params(model, jax.random.key(1))
    batch = Batch(TOKENS, jnp.array([0, 1, 1]), jnp.array([True, True, True]))

    def shared_grad(lambda_kt):
        loss = kteps_loss(model, lambda_kt, 0.0, temperature=2.0, bandwidth=None)
        g = jax.grad(lambda p: loss(p, batch, None, None)[0])(params)
        return masking.select(g, masking.label_leaves(g, RULES), masking.SHARED)

    without, with_kt = shared_grad(0.0), shared_grad(0.5)
    assert set(without) == {"embedding", "encoder", "shared_classifier"}
    for name in without:
        same = jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.allclose(a, b, atol=1e-7)),
                                         without[name], with_kt[name]))
        assert same == (name not in moved), name
