"""pFedMe: the K inner steps and w's gradient have their closed forms on a quadratic, an exact
inner solve gives the Moreau envelope's gradient (FedAvg's as lambda grows), the optimizer sets
theta to the new value, theta stays on the client, and beta moves the server off the mean."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import pfedme
from fedjax_sc.algorithms.base import Batch, ClientStart, bind
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.personal_copy import PREFIX, parts
from fedjax_sc.models.text_classifier import TextClassifier, init_params

BASE = TextClassifier(vocab_size=20, embed_dim=4, hidden=3, mlp_hidden=5)
BATCH = Batch(jax.random.randint(jax.random.key(1), (4, 6), 1, 20),
              jnp.array([0, 1, 1, 0]), jnp.array([True, True, True, False]))


def _quadratic(a, c):
    """f(theta) = a/2 ||theta - c||^2 as a bound loss of {x: w, private_x: theta} params."""
    return lambda params, batch, rng: (0.5 * a * jnp.sum((params[PREFIX + "x"] - c) ** 2),
                                       {"accuracy": jnp.float32(0)})


@settings(deadline=None, max_examples=15)
@given(st.floats(0.1, 3.0), st.floats(0.5, 20.0), st.floats(0.01, 0.05), st.integers(1, 6),
       st.integers(0, 2**31 - 1))
def test_the_inner_steps_are_closed_form_on_a_quadratic(a, lam, p, k, seed):
    """theta_K = theta* + (1 - p (a + lambda))^K (theta_0 - theta*), theta* = (a c + lambda w)
    / (a + lambda) the exact minimiser; w's gradient lambda (w - theta_K)."""
    w, theta0, c = np.random.default_rng(seed).normal(size=(3, 5)).astype(np.float32)
    grad_fn = pfedme.moreau_gradient(lam, k, p)(_quadratic(a, c))
    (value, _), grads = grad_fn({"x": w, PREFIX + "x": theta0}, BATCH, jax.random.key(0))
    star = (a * c + lam * w) / (a + lam)
    theta = star + (1 - p * (a + lam)) ** k * (theta0 - star)
    np.testing.assert_allclose(grads["x"], lam * (w - theta), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads[PREFIX + "x"], theta0 - theta, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(value, 0.5 * a * np.sum((theta0 - c) ** 2), rtol=1e-5)


@pytest.mark.parametrize("lam", [1.0, 10.0, 1e3])
def test_an_exact_solve_gives_the_envelope_gradient_which_tends_to_fedavgs(lam):
    """p = 1 / (a + lambda) solves the inner problem in one step: w's gradient is the Moreau
    envelope's, a lambda / (a + lambda) (w - c), which tends to grad f(w) = a (w - c)."""
    a, w, c = 2.0, np.float32([1.0, -2.0]), np.float32([0.5, 0.5])
    grad_fn = pfedme.moreau_gradient(lam, 1, 1 / (a + lam))(_quadratic(a, c))
    _, grads = grad_fn({"x": w, PREFIX + "x": w + 3.0}, BATCH, jax.random.key(0))
    # lambda (w - theta) loses float32 digits as lambda grows: theta - w ~ 1 / lambda
    np.testing.assert_allclose(grads["x"], a * lam / (a + lam) * (w - c),
                               rtol=1e-4 if lam < 100 else 1e-3)
    if lam >= 1e3:
        np.testing.assert_allclose(grads["x"], a * (w - c), rtol=5e-3)


def test_one_step_from_theta_equal_w_is_a_gradient_step_and_theta_is_set():
    """K = 1, p = 1 / lambda, theta = w: theta' = w - p grad f(w), w's gradient grad f(w)
    (FedAvg's); the client optimizer sets theta to theta' and steps w by -eta grad f(w)."""
    lam, eta = 8.0, 0.1
    algorithm = pfedme.pfedme(BASE, eta, 0.9, lam=lam, steps=1, personal_learning_rate=1 / lam)
    params = init_params(algorithm.model, jax.random.key(0))
    w, theta, _ = parts(params)
    chex.assert_trees_all_equal(theta, w)
    loss = bind(algorithm.client_loss, ClientStart(params))
    (_, aux), grads = algorithm.client_gradient(loss)(params, BATCH, jax.random.key(2))
    assert "accuracy" in aux
    plain = jax.grad(lambda p: fedavg(BASE).client_loss(p, BATCH, None, ClientStart(p))[0])(w)
    gw, _, _ = parts(grads)
    chex.assert_trees_all_close(gw, plain, atol=1e-5)
    optimizer = algorithm.client_optimizer
    updates, _ = optimizer.update(grads, optimizer.init(params), params)
    new_w, new_theta, _ = parts(jax.tree.map(jnp.add, params, updates))
    chex.assert_trees_all_close(new_theta, jax.tree.map(lambda x, g: x - g / lam, w, plain),
                                atol=1e-5)
    chex.assert_trees_all_close(new_w, jax.tree.map(lambda x, g: x - eta * g, w, plain),
                                atol=1e-5)


def test_theta_stays_on_the_client_and_beta_scales_the_servers_step(model, scene):
    """w <- (1 - beta) w + beta mean: beta = 2 lands at 2 mean - w from the same clients."""
    data = client_data(scene.train, local_vocab=True)
    runs = {}
    for beta in (1.0, 2.0):
        algorithm = pfedme.pfedme(model, 0.1, 0.9, beta=beta)
        params = init_params(algorithm.model, jax.random.key(0))
        state, clients = rnd.init_states(algorithm, params, scene.num_clients)
        step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
        runs[beta] = step(state, clients, data, jax.random.key(1))[:2]
    assert algorithm.server_optimizer is not None
    assert pfedme.pfedme(model).server_optimizer is None  # beta = 1: the mean itself
    start = state.params
    assert set(start) == {"embedding", "encoder", "classifier"}  # theta is never sent
    assert all(k.startswith(PREFIX) for k in runs[1.0][1].private)
    chex.assert_trees_all_close(runs[2.0][0].params, jax.tree.map(
        lambda m, w: 2 * m - w, runs[1.0][0].params, start), atol=1e-5)
    chex.assert_trees_all_close(runs[2.0][1].private, runs[1.0][1].private)
    moved = jax.tree.map(lambda t, w: float(jnp.abs(t[0] - w).max()),
                         parts(runs[1.0][1].private)[1], start)
    assert max(jax.tree.leaves(moved)) > 1e-4  # theta is the client's own
    # in a client's first round theta = w on every row: the dense table trains the same
    dense = client_data(scene.train, local_vocab=False)
    algorithm = pfedme.pfedme(model, 0.1, 0.9)
    state, clients = rnd.init_states(algorithm, params, scene.num_clients)
    step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
    chex.assert_trees_all_close(step(state, clients, dense, jax.random.key(1))[:2], runs[1.0],
                                atol=2e-5)


def test_bad_settings_are_refused():
    for kwargs, match in (({"lam": 0.0}, "lambda"), ({"steps": 0}, "K"),
                          ({"personal_learning_rate": -1.0}, "personal"), ({"beta": 0.0},
                                                                            "beta")):
        with pytest.raises(ValueError, match=match):
            pfedme.pfedme(BASE, **kwargs)


def test_a_fedopt_server_is_refused_beside_pfedme_beta():
    """pFedMe's beta is its own server update (optax.sgd(beta)); --server-opt would replace
    it silently."""
    from fedjax_sc.run.registry import build_algorithm
    with pytest.raises(ValueError, match="server-opt"):
        build_algorithm("pfedme", vocab_size=12, num_classes=2, embed_dim=4, num_clients=2,
                        server_opt="adam", pfedme_beta=2.0)
    alg = build_algorithm("pfedme", vocab_size=12, num_classes=2, embed_dim=4, num_clients=2,
                          server_opt="adam")  # beta 1: the server step is the optimizer's alone
    assert alg.server_optimizer is not None
