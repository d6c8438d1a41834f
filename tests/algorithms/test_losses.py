import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import losses
from fedjax_sc.algorithms.base import Batch, ClientStart, bind
from fedjax_sc.algorithms.losses import cross_entropy, masked_mean
from fedjax_sc.models.text_classifier import TextClassifier, init_params


def test_masked_mean_ignores_masked_rows_and_is_zero_when_all_masked():
    v = jnp.array([1.0, 2.0, 100.0])
    assert float(masked_mean(v, jnp.array([True, True, False]))) == 1.5
    assert float(masked_mean(v, jnp.zeros(3, bool))) == 0.0


def test_cross_entropy_matches_numpy_and_padded_rows_get_no_gradient():
    model = TextClassifier(vocab_size=12, embed_dim=4, hidden=2, mlp_hidden=3)
    params = init_params(model, jax.random.key(0))
    tokens = jnp.array([[2, 3, 0], [4, 5, 6], [7, 0, 0]], jnp.int32)
    labels = jnp.array([0, 1, 1])
    mask = jnp.array([True, True, False])
    loss = bind(cross_entropy(model), ClientStart(params))
    value, aux = jax.jit(loss)(params, Batch(tokens, labels, mask), jax.random.key(0))
    logits = np.asarray(jax.jit(model.apply)({"params": params}, tokens), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(value, -(logp[0, 0] + logp[1, 1]) / 2, rtol=1e-5)
    right = (logits[:2].argmax(-1) == np.asarray(labels[:2])).mean()  # the real rows only
    assert float(aux["accuracy"]) == pytest.approx(right)
    grads = jax.jit(jax.grad(lambda p: loss(p, Batch(tokens, labels, mask), None)[0]))(params)
    emb_grad = np.asarray(grads["embedding"]["embedding"])
    assert not emb_grad[7].any()  # token 7 occurs only in the masked row


HSIC = jax.jit(losses.hsic)  # one compiled program per shape, not one per operation


def _numpy_hsic(x, y, bandwidth=None):
    """Reference Eq. 7 (the median heuristic, or a fixed width), straight from the definition."""
    def gram(a):
        d2 = ((a[:, None, :] - a[None, :, :]) ** 2).sum(-1)
        off = np.sqrt(d2[~np.eye(len(a), dtype=bool)])
        sigma = np.median(off) if bandwidth is None else bandwidth
        return np.exp(-d2 / (2 * sigma ** 2))
    b = len(x)
    h = np.eye(b) - np.ones((b, b)) / b
    return np.trace(gram(x) @ h @ gram(y) @ h) / (b - 1) ** 2


@settings(max_examples=5, deadline=None)
@given(b=st.integers(2, 12), f=st.integers(1, 6), g=st.integers(1, 6), seed=st.integers(0, 999))
def test_hsic_is_nonnegative_and_matches_numpy(b, f, g, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(b, f)), rng.normal(size=(b, g))
    value = float(HSIC(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)))
    assert value >= -1e-6
    np.testing.assert_allclose(value, _numpy_hsic(x, y), rtol=2e-4, atol=1e-6)


def test_hsic_is_small_for_independent_and_large_for_identical_features():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(256, 4)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(256, 4)), jnp.float32)
    independent = float(HSIC(x, y))
    identical = float(HSIC(x, x))
    assert independent < 0.1 * identical  # biased estimator: O(1/n) for independent data
    assert independent < 2e-3


def test_hsic_leaves_out_masked_rows_and_fixed_bandwidth():
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.normal(size=(7, 3)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(7, 2)), jnp.float32)
    mask = jnp.array([True] * 5 + [False] * 2)
    junk_x = x.at[5:].set(100.0)
    np.testing.assert_allclose(HSIC(junk_x, y, mask), HSIC(x[:5], y[:5]), rtol=1e-5)
    assert float(HSIC(x, y, jnp.array([True] + [False] * 6))) == 0.0
    fixed = jax.jit(lambda a, b: losses.hsic(a, b, bandwidth=0.7))(x, y)
    np.testing.assert_allclose(fixed, _numpy_hsic(np.asarray(x, np.float64),
                                                  np.asarray(y, np.float64), 0.7), rtol=2e-4)
    assert abs(float(fixed) - float(HSIC(x, y))) > 1e-4  # the width is used, not the median
    grads = jax.jit(jax.grad(lambda a: losses.hsic(a, y, mask)))(x)
    assert np.all(np.isfinite(grads)) and np.all(np.asarray(grads[5:]) == 0)


def test_hsic_without_normalization_is_the_trace_over_the_real_rows():
    """``normalization="none"``: the biased estimator times (n - 1)^2, n the real rows."""
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(8, 3)), jnp.float32)
    y = jnp.asarray(rng.normal(size=(8, 2)), jnp.float32)
    mask = jnp.array([True] * 6 + [False] * 2)
    trace = jax.jit(lambda a, b, m: losses.hsic(a, b, m, normalization="none"))
    np.testing.assert_allclose(trace(x, y, mask), 25.0 * HSIC(x, y, mask), rtol=1e-5)
    np.testing.assert_allclose(trace(x, y, jnp.ones(8, bool)), _numpy_hsic(x, y) * 49.0,
                               rtol=2e-4)
    with pytest.raises(ValueError, match="normalization"):
        losses.hsic(x, y, normalization="unbiased")


def test_knowledge_transfer_matches_eq8_and_gives_no_gradient_to_the_shared_branch():
    rng = np.random.default_rng(2)
    gp = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
    gs = jnp.asarray(rng.normal(size=(4, 3)), jnp.float32)
    t = 0.25
    p = np.exp(gp) / np.exp(gp).sum(-1, keepdims=True)
    logq = np.asarray(gs) / t - np.log(np.exp(np.asarray(gs) / t).sum(-1, keepdims=True))
    np.testing.assert_allclose(losses.knowledge_transfer(gp, gs, t), -(p * logq).sum(-1),
                               rtol=1e-5)
    d_shared = jax.grad(lambda s: losses.knowledge_transfer(gp, s, t).sum())(gs)
    d_private = jax.grad(lambda q: losses.knowledge_transfer(q, gs, t).sum())(gp)
    assert np.all(np.asarray(d_shared) == 0)
    assert np.any(np.asarray(d_private) != 0)
