"""DP-SGD on the shared leaves: per-example clipping, noise scale, private leaves untouched."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Batch, ClientStart, bind
from fedjax_sc.algorithms.dp_sgd import dp_gradient, dp_sgd, epsilon
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedper import RULES as FEDPER_RULES
from fedjax_sc.models.text_classifier import TextClassifier, init_params

MODEL = TextClassifier(vocab_size=20, embed_dim=4, hidden=3, mlp_hidden=5)
PARAMS = init_params(MODEL, jax.random.key(0))
BATCH = Batch(jax.random.randint(jax.random.key(1), (4, 6), 1, 20),
              jnp.array([0, 1, 1, 0]), jnp.array([True, True, True, False]))
LOSS = bind(fedavg(MODEL).client_loss, ClientStart(None))
BATCH_GRAD = jax.jit(jax.value_and_grad(LOSS, has_aux=True))  # the plain batch gradient


def _norm(tree):
    return float(jnp.sqrt(sum(jnp.sum(x ** 2) for x in jax.tree.leaves(tree))))


def test_every_per_example_gradient_is_clipped_to_c():
    clip = 1e-3  # far below every example's gradient norm
    grad_fn = jax.jit(dp_gradient(None, clip, 0.0)(LOSS))
    for i in range(3):  # one real example at a time: the step's gradient is its clipped one
        one = Batch(BATCH.tokens, BATCH.labels, jnp.arange(4) == i)
        (_, aux), grads = grad_fn(PARAMS, one, jax.random.key(2))
        assert _norm(grads) * 4 == pytest.approx(clip, rel=1e-4)  # divided by B = 4
        assert float(aux["dp_clipped_fraction"]) == 1.0
    (_, aux), grads = grad_fn(PARAMS, BATCH, jax.random.key(2))
    assert _norm(grads) * 4 <= 3 * clip * (1 + 1e-5)


def test_without_clipping_or_noise_it_is_the_sum_of_per_example_gradients_over_b():
    grad_fn = jax.jit(dp_gradient(None, 1e9, 0.0)(LOSS))
    (loss, aux), grads = grad_fn(PARAMS, BATCH, jax.random.key(2))
    (loss_ref, _), batch_grads = BATCH_GRAD(PARAMS, BATCH, jax.random.key(2))
    # CE is a mean over the 3 real rows: per-example sum / B = batch gradient * 3 / 4
    chex.assert_trees_all_close(grads, jax.tree.map(lambda g: g * 3 / 4, batch_grads),
                                atol=1e-6)
    assert float(loss) == pytest.approx(float(loss_ref))
    assert float(aux["dp_clipped_fraction"]) == 0.0


def test_a_term_that_reads_no_example_is_added_once_unclipped():
    """FedProx's mu/2 ||w - w0||^2 reads no data: the step's gradient is the clipped
    per-example cross-entropy gradients' sum over B plus mu (w - w0), not clipped with them."""
    from fedjax_sc.algorithms.fedprox import proximal
    clip, mu = 1e-3, 0.5
    anchor = jax.tree.map(lambda x: x + 1.0, PARAMS)  # the term's gradient: -mu, far above C
    prox = bind(proximal(fedavg(MODEL), mu).client_loss, ClientStart(anchor))
    (_, _), got = jax.jit(dp_gradient(None, clip, 0.0)(prox))(PARAMS, BATCH, jax.random.key(2))
    (_, _), plain = jax.jit(dp_gradient(None, clip, 0.0)(LOSS))(PARAMS, BATCH,
                                                                jax.random.key(2))
    chex.assert_trees_all_close(got, jax.tree.map(lambda g: g - mu, plain), atol=1e-6)


def test_noise_std_is_z_c_over_b_on_shared_leaves_only():
    clip, z = 0.5, 2.0
    grad_fn = jax.jit(dp_gradient(FEDPER_RULES, clip, z)(LOSS))
    zero_mask = Batch(BATCH.tokens, BATCH.labels, jnp.zeros(4, bool))  # no signal: pure noise
    _, grads = grad_fn(PARAMS, zero_mask, jax.random.key(3))
    labels = masking.label_leaves(PARAMS, FEDPER_RULES)
    shared = np.concatenate([np.ravel(x) for x in jax.tree.leaves(
        masking.select(grads, labels, masking.SHARED))])
    private = masking.select(grads, labels, masking.PRIVATE)
    assert np.std(shared) == pytest.approx(z * clip / 4, rel=0.05)
    assert all(float(jnp.max(jnp.abs(x))) == 0 for x in jax.tree.leaves(private))
    # the private classifier gets the plain batch gradient
    _, grads = grad_fn(PARAMS, BATCH, jax.random.key(3))
    _, ref = BATCH_GRAD(PARAMS, BATCH, jax.random.key(3))
    chex.assert_trees_all_close(masking.select(grads, labels, masking.PRIVATE),
                                masking.select(ref, labels, masking.PRIVATE), atol=1e-6)
    with pytest.raises(ValueError):
        dp_gradient(None, 0.0, 1.0)


def test_epsilon_from_the_rdp_accountant():
    pytest.importorskip("dp_accounting")
    e1 = epsilon(1.0, 0.01, 1000, 1e-5)
    e2 = epsilon(2.0, 0.01, 1000, 1e-5)
    assert 0 < e2 < e1 < 100  # more noise, less privacy loss
    # the steps compose: ten times the steps, well above the one tenth's figure (about
    # sqrt(10) times for a subsampled Gaussian)
    assert e1 > 1.5 * epsilon(1.0, 0.01, 100, 1e-5)
    # one step of the Gaussian mechanism at z = 1 without subsampling, delta = 1e-5: at least
    # its exact epsilon (4.38, from Balle and Wang 2018's analytic formula) and at most the
    # classic conversion of its Renyi DP alpha / 2 (5.30, min over alpha of alpha / 2 +
    # log(1 / delta) / (alpha - 1), Mironov 2017)
    assert 4.38 < epsilon(1.0, 1.0, 1, 1e-5) < 5.30
    assert epsilon(0.0, 0.01, 10, 1e-5) == float("inf")


def test_dp_sgd_refuses_an_algorithm_with_its_own_client_gradient():
    """DP-SGD replaces the client gradient: Per-FedAvg's meta-gradient would be lost."""
    from fedjax_sc.algorithms.per_fedavg import per_fedavg
    with pytest.raises(ValueError, match="per_fedavg computes its own"):
        dp_sgd(per_fedavg(TextClassifier(vocab_size=12, embed_dim=4)), 1.0, 0.5)
