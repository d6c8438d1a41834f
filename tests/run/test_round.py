"""The compiled round: one trace, masking invariants, exactness of local-vocabulary training."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.data.scenes import synthetic_scene
from fedjax_sc.models.text_classifier import TextClassifier, init_params
from fedjax_sc.run import round as rnd


@pytest.fixture(scope="module")
def scene():
    return synthetic_scene(num_clients=3, train_per_client=14, test_per_client=6, max_len=10,
                           seed=3)


@pytest.fixture(scope="module")
def model(scene):
    return TextClassifier(vocab_size=len(scene.vocab), embed_dim=8, hidden=4, mlp_hidden=6)


def _state(model):
    return rnd.init_server_state(init_params(model, jax.random.key(0)))


def test_round_compiles_once_and_counts_rounds(scene, model):
    fn = chex.assert_max_traces(rnd.build_round(fedavg(model, 0.05), batch_size=4,
                                                local_epochs=2), n=1)
    step = jax.jit(fn)
    data = rnd.client_data(scene.train, local_vocab=True)
    state = _state(model)
    for r in range(3):
        state, metrics = step(state, data, jax.random.key(1))
    assert int(state.round) == 3
    assert step._cache_size() == 1
    chex.assert_tree_all_finite(state.params)
    chex.assert_trees_all_equal_shapes(state.params, _state(model).params)
    expected_steps = [2 * math.ceil(int(n) / 4) for n in scene.train.counts]
    np.testing.assert_array_equal(metrics.steps, expected_steps)
    assert bool(metrics.finite.all())


@pytest.mark.parametrize("local_vocab", [False, True])
def test_zero_learning_rate_leaves_params_unchanged(scene, model, local_vocab):
    step = rnd.make_round_step(fedavg(model, 0.0), batch_size=4, local_epochs=1)
    state = _state(model)
    new, _ = step(state, rnd.client_data(scene.train, local_vocab), jax.random.key(1))
    chex.assert_trees_all_close(new.params, state.params, atol=1e-7)


def test_local_vocabulary_training_equals_dense_training(scene, model):
    step = rnd.make_round_step(fedavg(model, 0.1), batch_size=4, local_epochs=2)
    dense = sparse = _state(model)
    for _ in range(2):
        dense, _ = step(dense, rnd.client_data(scene.train, False), jax.random.key(2))
        sparse, _ = step(sparse, rnd.client_data(scene.train, True), jax.random.key(2))
    chex.assert_trees_all_close(dense.params, sparse.params, atol=2e-6)


def test_padded_client_trains_exactly_as_alone(scene, model):
    update = jax.jit(rnd.build_client_update(fedavg(model, 0.1), batch_size=4, local_epochs=2))
    k = 2  # the smallest client: padded to the largest one in the scene
    n = int(scene.train.counts[k])
    assert n < scene.train.max_examples
    t, y, m = (jnp.asarray(a[k]) for a in (scene.train.tokens, scene.train.labels,
                                           scene.train.mask))
    params = _state(model).params
    key = jax.random.key(5)
    padded, pm = update(params, t, y, m, key)
    alone, am = update(params, t[:n], y[:n], m[:n], key)
    chex.assert_trees_all_close(padded, alone, atol=1e-6)
    assert int(pm.steps) == int(am.steps) == 2 * math.ceil(n / 4)
    np.testing.assert_allclose(pm.train_loss, am.train_loss, rtol=1e-6)


def test_identical_clients_aggregate_to_their_common_update(scene, model):
    one = jax.tree.map(lambda a: a[:1], rnd.client_data(scene.train))
    same = jax.tree.map(lambda a: jnp.concatenate([a, a, a]), one)
    alg = fedavg(model, 0.1)
    state = _state(model)
    update = rnd.build_client_update(alg, batch_size=4, local_epochs=1)
    round_key = jax.random.fold_in(jax.random.key(3), 0)
    # all three clients get different shuffles; use client 0's key for all by one client alone
    solo, _ = rnd.make_round_step(alg, batch_size=4, local_epochs=1)(state, one,
                                                                     jax.random.key(3))
    expected, _ = update(state.params, one.tokens[0], one.labels[0], one.mask[0],
                         jax.random.fold_in(round_key, 0))
    chex.assert_trees_all_close(solo.params, expected, atol=1e-6)
    # with identical data and params the weighted mean of equal updates is that update
    stacked = jax.tree.map(lambda x: jnp.stack([x, x, x]), expected)
    from fedjax_sc.algorithms.aggregate import example_weights, weighted_mean
    chex.assert_trees_all_close(weighted_mean(stacked, example_weights(same.counts)), expected,
                                rtol=1e-6)


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 23), real=st.integers(0, 23), batch=st.integers(1, 7),
       epochs=st.integers(1, 3), seed=st.integers(0, 1000))
def test_each_epoch_visits_every_real_example_once(n, real, batch, epochs, seed):
    real = min(real, n)
    mask = jnp.arange(n) < real
    idx, bmask = rnd.epoch_schedule(jax.random.key(seed), mask, batch, epochs)
    assert idx.shape == bmask.shape == (epochs, math.ceil(n / batch), batch)
    for e in range(epochs):
        visited = np.asarray(idx[e])[np.asarray(bmask[e])]
        np.testing.assert_array_equal(np.sort(visited), np.arange(real))
