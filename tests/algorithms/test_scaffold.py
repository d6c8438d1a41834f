"""SCAFFOLD on the algorithm hooks: round 1 and one client are FedAvg, the server's c is the
mean of the clients' c_i, option II's closed form, momentum's step count and eta_g."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import optimizers, scaffold
from fedjax_sc.algorithms.base import Batch, ClientStart
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

LR = 0.1


def _scaffold(model, n, momentum=0.9, **kw):
    return scaffold.control_variates(fedavg(model, LR, momentum, kw.get(
        "embedding_learning_rate")), LR, momentum, n, **kw)


def test_round_one_is_fedavg_and_one_client_always(model, scene, rounds):
    """c = c_i = 0 in round 1; with one client c = c_1 after every round: no correction."""
    data = client_data(scene.train, local_vocab=True)
    first = rounds(_scaffold(model, scene.num_clients), model, data, 1, scene.num_clients)
    plain = rounds(fedavg(model, LR, 0.9), model, data, 1, scene.num_clients)
    chex.assert_trees_all_close(first[0].params, plain[0].params, atol=1e-6)
    one = jax.tree.map(lambda x: x[:1], data)
    state, clients, _ = rounds(_scaffold(model, 1), model, one, 3, 1)
    chex.assert_trees_all_close(state.params,
                                rounds(fedavg(model, LR, 0.9), model, one, 3, 1)[0].params,
                                atol=1e-5)
    chex.assert_trees_all_close(state.algorithm, jax.tree.map(lambda x: x[0],
                                                              clients.algorithm), atol=1e-6)


def test_the_server_variate_is_the_mean_of_the_clients(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    state, clients, _ = rounds(_scaffold(model, scene.num_clients), model, data, 2,
                               scene.num_clients)
    chex.assert_trees_all_close(state.algorithm,
                                jax.tree.map(lambda x: x.mean(0), clients.algorithm), atol=1e-6)
    assert all(np.any(np.asarray(x)) for x in jax.tree.leaves(state.algorithm))


def test_option_two_is_the_closed_form(model, scene, rounds, momentum=0.9, embedding_lr=0.03):
    """Round 1 from c = c_i = 0: c_i+ = (x - y_i) / (eta K) per leaf (the tables' eta their
    own), K the client's steps (heavy-ball: momentum_steps(K))."""
    data = client_data(scene.train, local_vocab=False)
    algorithm = _scaffold(model, scene.num_clients, momentum,
                          embedding_learning_rate=embedding_lr)
    _, clients, metrics = rounds(algorithm, model, data, 1, scene.num_clients)
    x = init_params(model, jax.random.key(0))
    parts = rnd.build_round_parts(fedavg(model, LR, momentum, embedding_lr), batch_size=4,
                                  local_epochs=1)
    y, _, _, _ = parts.local_training(*rnd.init_states(fedavg(model), x, scene.num_clients),
                                      data, jax.random.key(1))
    k = jax.vmap(lambda s: optimizers.momentum_steps(s, momentum))(metrics.steps)
    for path, ci in (("embedding", clients.algorithm["embedding"]),
                     ("classifier", clients.algorithm["classifier"])):
        lr = embedding_lr if path == "embedding" and embedding_lr else LR
        expected = jax.tree.map(lambda a, b: (a[None] - b) / (lr * k.reshape(
            (-1,) + (1,) * (b.ndim - 1))), x[path], y[path])
        chex.assert_trees_all_close(ci, expected, atol=2e-5, rtol=1e-4)


def test_the_variates_follow_the_update_as_sent(model, rounds):
    """Under upload noise c_i+ and its message come from the update the client sent (the
    server's decoded upload minus x), so the message tells the server nothing the upload does
    not: with one client, round 1 gives c = c_1 = -(x^1 - x) / (eta K), x^1 the noisy model."""
    from fedjax_sc.algorithms.noise import gaussian_noise
    from fedjax_sc.algorithms.upload import chain
    from fedjax_sc.data.scenes import synthetic_scene
    one = synthetic_scene(num_clients=1, train_per_client=14, test_per_client=6, max_len=10,
                          seed=3)
    data, x = client_data(one.train, local_vocab=False), init_params(model, jax.random.key(0))
    alg = _scaffold(model, 1)
    alg = alg._replace(upload=chain(alg.upload, gaussian_noise(0.05)))
    state, clients, metrics = rounds(alg, model, data, 1, 1)
    # from the exact update instead, c would differ by the noise / (eta K), about 0.06 here
    k = LR * optimizers.momentum_steps(metrics.steps[0], 0.9)
    chex.assert_trees_all_close(state.algorithm, jax.tree.map(
        lambda new, old: (old - new) / k, state.params, x), atol=1e-5, rtol=1e-4)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[0], clients.algorithm),
                                state.algorithm, atol=1e-6)


def test_a_local_step_follows_the_corrected_gradient(model):
    """grad = grad F_i(w) + c - c_i (line 10), and the loss's value is F_i's."""
    rng = np.random.default_rng(0)
    params = init_params(model, jax.random.key(0))
    c, ci = (jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), params)
             for _ in range(2))
    batch = Batch(jnp.asarray(rng.integers(1, model.vocab_size, (3, 5)), jnp.int32),
                  jnp.asarray([0, 1, 1], jnp.int32), jnp.ones(3, bool))
    grad = lambda loss, start: jax.jit(jax.value_and_grad(loss, has_aux=True))(
        params, batch, jax.random.key(0), start)
    (value, _), got = grad(_scaffold(model, 3).client_loss, ClientStart(params, state=ci,
                                                                       server=c))
    (plain, _), want = grad(fedavg(model).client_loss, ClientStart(params))
    assert float(value) == pytest.approx(float(plain), rel=1e-6)
    chex.assert_trees_all_close(got, jax.tree.map(lambda g, a, b: g + a - b, want, c, ci),
                                atol=1e-5)


@settings(deadline=None, max_examples=25)
@given(st.integers(1, 40), st.floats(0.0, 0.95))
def test_momentum_steps_is_the_distance_of_a_constant_gradient(steps, rho):
    v = x = 0.0
    for _ in range(steps):  # optax's heavy ball: v <- g + rho v, x <- x + eta v (g = eta = 1)
        v = 1.0 + rho * v
        x += v
    assert float(optimizers.momentum_steps(np.int32(steps), rho)) == pytest.approx(x, rel=1e-4)


def test_the_global_step_size_scales_the_aggregate_move(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    state = rounds(_scaffold(model, scene.num_clients, global_lr=0.5), model, data, 1,
                   scene.num_clients)[0]
    plain = rounds(fedavg(model, LR, 0.9), model, data, 1, scene.num_clients)[0]
    x = init_params(model, jax.random.key(0))
    chex.assert_trees_all_close(state.params, jax.tree.map(lambda a, b: a + 0.5 * (b - a), x,
                                                           plain.params), atol=1e-6)


def test_checks_its_settings(model):
    with pytest.raises(ValueError, match="global_lr"):
        scaffold.scaffold(model, 3, global_lr=0.0)
    with pytest.raises(ValueError, match="learning_rate"):
        scaffold.scaffold(model, 3, learning_rate=0.0)
    with pytest.raises(ValueError, match="num_clients"):
        scaffold.scaffold(model, 0)
    with pytest.raises(ValueError, match="already owns state"):
        scaffold.control_variates(scaffold.scaffold(model, 3), LR, 0.9, 3)
