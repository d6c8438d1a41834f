"""FedDyn on the algorithm hooks: its closed form on one client, the local step's gradient and
both hooks with a state that is not zero (the linear term, h_k's sum, the server's H), exact
local-vocabulary training, and a client that sits a round out keeping its state."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import feddyn
from fedjax_sc.algorithms.base import Batch, ClientEnd, ClientStart, ServerInputs
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

ALPHA = 0.1


@pytest.fixture(scope="module")
def dyn(model, scene):
    return feddyn.dynamic_regularizer(fedavg(model, 0.1, 0.0), scene.num_clients, ALPHA)


def test_one_round_is_the_closed_form(dyn, model, scene, rounds):
    """Round 1 from h = H = 0: the loss's extra term is alpha/2 ||theta - theta^0||^2 alone,
    every client's h_k is its update, H their sum over N, the model the aggregate plus H."""
    data = client_data(scene.train, local_vocab=False)
    state, clients, _ = rounds(dyn, model, data, 1, scene.num_clients)
    x = init_params(model, jax.random.key(0))
    # the same round with the term as a plain proximal loss and no hooks gives the uploads
    from fedjax_sc.algorithms.fedprox import proximal
    parts = rnd.build_round_parts(proximal(fedavg(model, 0.1, 0.0), ALPHA), batch_size=4,
                                  local_epochs=1)
    s0, c0 = rnd.init_states(fedavg(model), x, scene.num_clients)
    shared, _, m, _ = parts.local_training(s0, c0, data, jax.random.key(1))
    updates = jax.tree.map(lambda y, a: y - a[None], shared, x)
    chex.assert_trees_all_close(clients.algorithm, updates, atol=1e-6)
    mean_h = jax.tree.map(lambda u: u.sum(0) / scene.num_clients, updates)
    chex.assert_trees_all_close(state.algorithm, mean_h, atol=1e-6)
    weights = np.asarray(data.counts, np.float32) / np.sum(data.counts)
    aggregate = jax.tree.map(lambda y: jnp.tensordot(weights, y, axes=1), shared)
    chex.assert_trees_all_close(state.params, jax.tree.map(jnp.add, aggregate, mean_h),
                                atol=1e-6)


def _random_like(tree, seed):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape), x.dtype), tree)


@settings(deadline=None, max_examples=10)
@given(st.floats(0.01, 1.0), st.integers(0, 2**31 - 1))
def test_a_local_step_follows_the_dynamic_gradient(model, alpha, seed):
    """grad = grad L_k(theta) + alpha h_k + alpha (theta - theta^{t-1}) for any h_k (Algorithm
    1, line 7: -grad L_k(theta_k^{t-1}) = alpha h_k), and the aux's term is the added value."""
    params = init_params(model, jax.random.key(0))
    h, anchor = _random_like(params, seed), _random_like(params, seed + 1)
    rng = np.random.default_rng(seed)
    batch = Batch(jnp.asarray(rng.integers(1, model.vocab_size, (3, 5)), jnp.int32),
                  jnp.asarray([0, 1, 1], jnp.int32), jnp.ones(3, bool))
    grad = lambda loss, start: jax.jit(jax.value_and_grad(loss, has_aux=True))(
        params, batch, jax.random.key(0), start)
    dyn = feddyn.dynamic_regularizer(fedavg(model), 3, alpha)
    (value, aux), got = grad(dyn.client_loss, ClientStart(anchor, state=h))
    (plain, _), want = grad(fedavg(model).client_loss, ClientStart(anchor))
    term = alpha * sum(jnp.vdot(a, p) + 0.5 * jnp.sum((p - b) ** 2) for a, p, b in zip(
        jax.tree.leaves(h), jax.tree.leaves(params), jax.tree.leaves(anchor)))
    assert float(aux["dynamic"]) == pytest.approx(float(term), rel=1e-4)
    assert float(value) == pytest.approx(float(plain + term), rel=1e-4)
    chex.assert_trees_all_close(got, jax.tree.map(
        lambda g, hk, p, a: g + alpha * hk + alpha * (p - a), want, h, params, anchor),
        atol=1e-4, rtol=1e-4)


def test_the_hooks_accumulate_a_state_that_is_not_zero(model):
    """client_end: h_k <- h_k + (theta_k - theta^{t-1}), nothing sent; server_update:
    H <- H + (1/N) sum over the participants of the decoded updates, theta^t = aggregate + H
    (Algorithm 1, lines 8-11 with H = -h / alpha)."""
    dyn = feddyn.dynamic_regularizer(fedavg(model), 4, 0.1)
    params = init_params(model, jax.random.key(0))
    x, y, h = (_random_like(params, s) for s in (1, 2, 3))
    state, sent = dyn.hooks.client_end(ClientEnd(ClientStart(x, state=h), y, jnp.int32(3)))
    assert sent == ()  # the server takes the update from the upload
    chex.assert_trees_all_close(state, jax.tree.map(lambda a, b, c: a + b - c, h, y, x),
                                atol=1e-6)
    big_h, aggregate = _random_like(params, 4), _random_like(params, 5)
    updates = jax.tree.map(lambda u: jnp.stack([u, 2 * u, 3 * u]), _random_like(params, 6))
    taking_part = jnp.asarray([True, False, True])
    reduce = lambda tree, w: jax.tree.map(lambda t: jnp.tensordot(w, t, axes=1), tree)
    new_params, new_h = dyn.hooks.server_update(ServerInputs(
        aggregate, x, big_h, (), jnp.asarray([0.5, 0.0, 0.5]), taking_part, reduce, updates))
    want_h = jax.tree.map(lambda a, u: a + (u[0] + u[2]) / 4, big_h, updates)
    chex.assert_trees_all_close(new_h, want_h, atol=1e-6)
    chex.assert_trees_all_close(new_params, jax.tree.map(jnp.add, aggregate, want_h),
                                atol=1e-6)


def test_client_and_server_state_follow_the_update_as_sent(model, rounds):
    """With upload noise the server's H is built from the upload it receives (one client:
    theta^1 = u + H, H = u - theta^0, so H = (theta^1 - theta^0) / 2) and h_k from the update
    the client sent, noise included: H stays the mean of the h_k (here the one), and differs
    from the noiseless run's by the noise."""
    from fedjax_sc.algorithms.noise import gaussian_noise
    from fedjax_sc.algorithms.upload import chain
    from fedjax_sc.data.scenes import synthetic_scene
    one = synthetic_scene(num_clients=1, train_per_client=14, test_per_client=6, max_len=10,
                          seed=3)
    data, x = client_data(one.train, local_vocab=True), init_params(model, jax.random.key(0))
    flat = lambda tree: np.concatenate([np.ravel(a) for a in jax.tree.leaves(tree)])
    server = {}
    for sigma in (0.0, 0.05):
        dyn = feddyn.dynamic_regularizer(fedavg(model, 0.1, 0.0), 1, ALPHA)
        dyn = dyn._replace(upload=chain(dyn.upload, gaussian_noise(sigma)))
        state, clients, _ = rounds(dyn, model, data, 1, 1)
        half = jax.tree.map(lambda t, a: (t - a) / 2, state.params, x)
        chex.assert_trees_all_close(state.algorithm, half, atol=1e-6)
        chex.assert_trees_all_close(jax.tree.map(lambda a: a[0], clients.algorithm),
                                    state.algorithm, atol=1e-6)
        server[sigma] = flat(state.algorithm)
    rows = np.abs(server[0.0]) > 0  # the noise, where the client's update is not zero
    assert np.std((server[0.05] - server[0.0])[rows]) == pytest.approx(0.05, rel=0.1)


def test_local_vocabulary_training_is_exact(dyn, model, scene, rounds):
    """A client's update is zero outside its words: training by rows equals the dense table."""
    dense = rounds(dyn, model, client_data(scene.train, local_vocab=False), 3, scene.num_clients)
    rows = rounds(dyn, model, client_data(scene.train, local_vocab=True), 3, scene.num_clients)
    chex.assert_trees_all_close(rows[0].params, dense[0].params, atol=2e-5)
    chex.assert_trees_all_close(rows[0].algorithm, dense[0].algorithm, atol=2e-5)
    chex.assert_trees_all_close(rows[1].algorithm, dense[1].algorithm, atol=2e-5)


def test_a_client_without_examples_keeps_its_state_and_has_no_say(dyn, model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    empty = data._replace(mask=data.mask.at[1].set(False), counts=data.counts.at[1].set(0))
    state, clients, metrics = rounds(dyn, model, empty, 2, scene.num_clients)
    assert int(metrics.steps[1]) == 0
    for leaf in jax.tree.leaves(clients.algorithm):
        assert not np.any(np.asarray(leaf[1]))  # still its round-0 zeros
        assert np.any(np.asarray(leaf[0]))


def test_checks_its_settings(model):
    with pytest.raises(ValueError, match="alpha"):
        feddyn.feddyn(model, 3, alpha=0.0)
    with pytest.raises(ValueError, match="num_clients"):
        feddyn.feddyn(model, 0)
    with pytest.raises(ValueError, match="already owns state"):
        feddyn.dynamic_regularizer(feddyn.feddyn(model, 3), 3)


def test_a_vmapped_population_keeps_each_members_state(model, scene):
    """Two members with traced alphas under ``vmap``: each member's params and states are
    its standalone run's."""
    from fedjax_sc.core import population
    build = lambda v: feddyn.dynamic_regularizer(fedavg(model, 0.1, 0.0), scene.num_clients,
                                                 v["alpha"])
    values = population.grid(alpha=[0.05, 0.5])
    keys = jax.random.split(jax.random.key(7), 2)
    params = init_params(model, jax.random.key(0))
    states, clients = population.init_from_params(
        build, jax.tree.map(lambda x: jnp.stack([x, x]), params), values, scene.num_clients)
    step = jax.jit(population.build_population_round(build, batch_size=4, local_epochs=1,
                                                     member_axis="vmap"))
    data = client_data(scene.train, local_vocab=True)
    for _ in range(2):
        states, clients, _ = step(states, clients, data, keys, values)
    for i, alpha in enumerate((0.05, 0.5)):
        alone = feddyn.dynamic_regularizer(fedavg(model, 0.1, 0.0), scene.num_clients, alpha)
        s, c = rnd.init_states(alone, params, scene.num_clients)
        one = jax.jit(rnd.build_round(alone, batch_size=4, local_epochs=1))
        for _ in range(2):
            s, c, _ = one(s, c, data, keys[i])
        member = lambda t: jax.tree.map(lambda x: x[i], t)
        chex.assert_trees_all_close((member(states).params, member(states).algorithm,
                                     member(clients).algorithm),
                                    (s.params, s.algorithm, c.algorithm), atol=2e-5)
