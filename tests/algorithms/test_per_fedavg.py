"""Per-FedAvg's meta-gradient: alpha = 0 is FedAvg's gradient on D', the FO and HF closed
forms on least squares, HF = FO - alpha times the paper's finite-difference Hessian-vector
product on the text model, and one compiled round."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import per_fedavg
from fedjax_sc.algorithms.base import Batch, ClientStart, bind
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import masked_mean
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import TextClassifier, init_params

MODEL = TextClassifier(vocab_size=20, embed_dim=4, hidden=3, mlp_hidden=5)
PARAMS = init_params(MODEL, jax.random.key(0))
BATCH = Batch(jax.random.randint(jax.random.key(1), (6, 5), 1, 20),
              jnp.array([0, 1, 1, 0, 1, 0]), jnp.array([True] * 5 + [False]))
LOSS = bind(fedavg(MODEL).client_loss, ClientStart(None))
RNG = jax.random.key(2)


def squares(params, batch, rng):
    """0.5 (x.w - y)^2 over the real rows: grad X^T r / n, Hessian X^T X / n."""
    del rng
    r = batch.tokens @ params["w"] - batch.labels
    return masked_mean(0.5 * r * r, batch.mask), {"accuracy": jnp.float32(0)}


@pytest.mark.parametrize("variant", per_fedavg.VARIANTS)
def test_alpha_zero_is_the_plain_gradient_on_d_prime(variant):
    grad_fn = jax.jit(per_fedavg.meta_gradient(0.0, variant)(LOSS))
    (loss, aux), grads = grad_fn(PARAMS, BATCH, RNG)
    parts = 2 if variant == "fo" else 3
    d_prime = per_fedavg.part(BATCH, 1, parts)
    (ref_loss, _), ref = jax.jit(jax.value_and_grad(LOSS, has_aux=True))(
        PARAMS, d_prime, jax.random.fold_in(RNG, 1))
    chex.assert_trees_all_close(grads, ref, atol=1e-6)
    assert float(loss) == pytest.approx(float(ref_loss), rel=1e-6)
    inner = jax.jit(LOSS)(PARAMS, per_fedavg.part(BATCH, 0, parts), RNG)[0]
    assert float(aux["inner_loss"]) == pytest.approx(float(inner), rel=1e-6)


@settings(deadline=None, max_examples=15)
@given(st.integers(3, 9), st.integers(1, 4), st.floats(0.0, 1.0), st.integers(0, 2**31 - 1))
def test_fo_and_hf_closed_forms_on_least_squares(rows, dim, alpha, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, dim)).astype(np.float32)
    y = rng.normal(size=rows).astype(np.float32)
    mask = np.arange(rows) < rng.integers(1, rows + 1)  # real rows first
    w = rng.normal(size=dim).astype(np.float32)
    batch = Batch(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask))

    def grad(v, i, parts):
        xs, ys, ms = x[i::parts], y[i::parts], mask[i::parts]
        return xs.T @ (ms * (xs @ v - ys)) / max(ms.sum(), 1)

    for variant, parts in (("fo", 2), ("hf", 3)):
        _, got = jax.jit(per_fedavg.meta_gradient(alpha, variant)(squares))({"w": w}, batch,
                                                                            RNG)
        expected = grad(w - alpha * grad(w, 0, parts), 1, parts)
        if variant == "hf":
            x2, m2 = x[2::3], mask[2::3]
            hessian = x2.T @ (m2[:, None] * x2) / max(m2.sum(), 1)
            expected = expected - alpha * hessian @ expected
        np.testing.assert_allclose(got["w"], expected, rtol=1e-4, atol=1e-5)


def test_hf_is_fo_minus_alpha_times_the_finite_difference_hessian_product():
    alpha, delta = 0.5, 1e-2
    parts = [per_fedavg.part(BATCH, i, 3) for i in range(3)]
    keys = [jax.random.fold_in(RNG, i) for i in range(3)]
    grad = jax.jit(lambda p, i: jax.grad(lambda q: LOSS(q, parts[i], keys[i])[0])(p),
                   static_argnums=1)  # one program per part, not op by op
    adapted = jax.tree.map(lambda w, g: w - alpha * g, PARAMS, grad(PARAMS, 0))
    outer = grad(adapted, 1)
    shift = lambda s: jax.tree.map(lambda w, g: w + s * delta * g, PARAMS, outer)
    hvp = jax.tree.map(lambda a, b: (a - b) / (2 * delta), grad(shift(1), 2), grad(shift(-1), 2))
    _, got = jax.jit(per_fedavg.meta_gradient(alpha, "hf")(LOSS))(PARAMS, BATCH, RNG)
    chex.assert_trees_all_close(got, jax.tree.map(lambda g, h: g - alpha * h, outer, hvp),
                                atol=2e-4, rtol=1e-2)
    assert max(float(jnp.max(jnp.abs(h))) for h in jax.tree.leaves(hvp)) > 1e-3


def test_a_round_trains_and_reports_the_inner_loss(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    algorithm = per_fedavg.per_fedavg(model, 0.1, 0.9, alpha=0.05, variant="hf")
    state, _, metrics = rounds(algorithm, model, data, 1, scene.num_clients)
    assert algorithm.name == "per_fedavg" and bool(jnp.all(metrics.finite))
    assert bool(jnp.all(metrics.aux["inner_loss"] > 0))
    start = init_params(model, jax.random.key(0))
    assert any(float(jnp.max(jnp.abs(a - b))) > 0 for a, b in
               zip(jax.tree.leaves(state.params), jax.tree.leaves(start)))


def test_bad_settings_are_refused(model):
    with pytest.raises(ValueError, match="alpha"):
        per_fedavg.per_fedavg(model, alpha=-0.1)
    with pytest.raises(ValueError, match="variant"):
        per_fedavg.per_fedavg(model, variant="so")
