"""FedRoD: the balanced softmax (its closed form; the cross-entropy with uniform counts), the
personalised logits are the generic plus the personal ones, the personal loss reaches only the
personal head, the class counts are the client's whole split (or the batch's), and the
personal head stays on its client."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import fedrod, losses, masking
from fedjax_sc.algorithms.base import Batch, ClientStart
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import TextClassifier, init_params

MODEL = fedrod.FedRoDClassifier(vocab_size=20, embed_dim=4, hidden=3, mlp_hidden=5,
                                num_classes=3)
PARAMS = init_params(MODEL, jax.random.key(0))
BATCH = Batch(jax.random.randint(jax.random.key(1), (5, 6), 1, 20),
              jnp.array([0, 2, 2, 0, 1]), jnp.array([True] * 4 + [False]))


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 6), st.integers(2, 5), st.integers(0, 2**31 - 1))
def test_balanced_softmax_closed_form_and_uniform_counts(batch, classes, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, classes)).astype(np.float32)
    labels = rng.integers(0, classes, batch)
    counts = rng.integers(0, 5, classes).astype(np.float32)
    counts[labels] += 1  # every label is present
    weighted = counts * np.exp(logits)
    expected = -np.log(weighted[np.arange(batch), labels] / weighted.sum(-1))
    balanced = jax.jit(losses.balanced_softmax)  # one program per shape, not op by op
    np.testing.assert_allclose(balanced(logits, labels, counts), expected,
                               rtol=1e-4, atol=1e-5)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    for uniform in (np.ones(classes), np.full(classes, 7.0)):
        np.testing.assert_allclose(balanced(logits, labels, uniform), ce,
                                   rtol=1e-5, atol=1e-6)


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 12), st.integers(2, 5), st.integers(0, 2**31 - 1))
def test_label_counts_count_the_real_rows(rows, classes, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, rows)
    mask = rng.random(rows) < 0.7
    np.testing.assert_array_equal(losses.label_counts(labels, mask, classes),
                                  np.bincount(labels[mask], minlength=classes))


def test_personalised_logits_are_generic_plus_personal():
    g, p = MODEL.apply({"params": PARAMS}, BATCH.tokens, method=MODEL.heads)
    chex.assert_trees_all_close(MODEL.apply({"params": PARAMS}, BATCH.tokens), g + p)
    algorithm = fedrod.fedrod(MODEL)
    chex.assert_trees_all_close(algorithm.predict(PARAMS, BATCH.tokens)["full"],
                                jax.nn.softmax(g + p), atol=1e-6)
    labels = masking.label_leaves(PARAMS, algorithm.leaf_rules)
    shared = masking.select(PARAMS, labels, masking.SHARED)
    assert set(shared) == {"embedding", "encoder", "classifier"}
    chex.assert_trees_all_close(algorithm.global_predict(shared, BATCH.tokens),
                                jax.nn.softmax(g), atol=1e-6)


# the client's whole split: labels 0 x 3, 1 x 5, 2 x 1 on its real rows (the last is padding)
SPLIT = Batch(jnp.zeros((10, 6), jnp.int32), jnp.array([0, 0, 0, 1, 1, 1, 1, 1, 2, 2]),
              jnp.array([True] * 9 + [False]))


@pytest.mark.parametrize("prior, counts", [("client", [3.0, 5.0, 1.0]),
                                           ("batch", [2.0, 0.0, 2.0])])  # batch: 0, 2, 2, 0
def test_the_personal_loss_trains_only_the_personal_head(prior, counts):
    """Body and generic head get BSM's gradient alone, on the client's (or the batch's) class
    counts; the personal head CE(sg(g) + p)'s."""
    loss = fedrod.fedrod(MODEL, label_prior=prior).client_loss
    grads = jax.jit(jax.grad(lambda q: loss(q, BATCH, jax.random.key(2),
                                            ClientStart(q, data=SPLIT))[0]))(PARAMS)

    def bsm(q):
        g, _ = MODEL.apply({"params": q}, BATCH.tokens, method=MODEL.heads)
        return jnp.mean(losses.balanced_softmax(g, BATCH.labels, jnp.array(counts))[:4])

    ref = jax.jit(jax.grad(bsm))(PARAMS)
    for name in ("embedding", "encoder", "classifier"):
        chex.assert_trees_all_close(grads[name], ref[name], atol=1e-6)
    assert float(jnp.max(jnp.abs(ref["personal"]["kernel"]))) == 0.0
    assert float(jnp.max(jnp.abs(grads["personal"]["kernel"]))) > 0.0


def test_the_client_prior_needs_the_split_and_a_known_prior():
    loss = fedrod.fedrod(MODEL).client_loss
    with pytest.raises(ValueError, match="ClientStart.data"):
        loss(PARAMS, BATCH, jax.random.key(2), ClientStart(PARAMS))
    with pytest.raises(ValueError, match="label_prior"):
        fedrod.fedrod(MODEL, label_prior="test")


def test_the_personal_head_is_never_uploaded(scene, rounds):
    model = fedrod.FedRoDClassifier(vocab_size=len(scene.vocab), embed_dim=8, hidden=4,
                                    mlp_hidden=6, num_classes=scene.num_classes)
    data = client_data(scene.train, local_vocab=True)
    state, clients, metrics = rounds(fedrod.fedrod(model, 0.1, 0.9), model, data, 1,
                                     scene.num_clients)
    assert "personal" not in state.params and set(clients.private) == {"personal"}
    kernels = clients.private["personal"]["kernel"]  # [clients, 2h, C], trained apart
    assert kernels.shape[0] == scene.num_clients
    assert float(jnp.max(jnp.abs(kernels[0] - kernels[1]))) > 0.0
    assert bool(jnp.all(metrics.finite)) and "bsm" in metrics.aux


def test_another_model_and_a_furl_vector_are_refused():
    with pytest.raises(TypeError, match="FedRoDClassifier"):
        fedrod.fedrod(TextClassifier(vocab_size=20))
    # the generic head would read the client's own vector in training, a zero one for Ag
    with pytest.raises(ValueError, match="FURL"):
        fedrod.fedrod(fedrod.FedRoDClassifier(vocab_size=20, furl_dim=2))
