"""Heterogeneous clients inside the compiled round: step budgets, dropout, stragglers, FedNova."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.core import fednova
from fedjax_sc.core import heterogeneity as het
from fedjax_sc.core import round as rnd
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

B, E = 4, 2


def _states(model, scene, algorithm):
    return rnd.init_states(algorithm, init_params(model, jax.random.key(0)), scene.num_clients)


def _round(model, work, lr=0.1):
    """The public jitted round with ``work`` (the steps asserted below need it to arrive)."""
    return rnd.make_round_step(fedavg(model, lr), batch_size=B, local_epochs=E, work=work)


def test_the_stream_of_epochs_trains_as_the_epoch_plan(scene, model):
    """A client's budget of E ceil(N^k / B) stream steps is its E epochs exactly: same batches,
    same keys; the padding batches of the plan are no-ops in both."""
    alg = fedavg(model, 0.1)
    plain = jax.jit(rnd.build_client_update(alg, batch_size=B, local_epochs=E))
    work = LocalWork(steps=E * math.ceil(scene.train.max_examples / B))
    stream = jax.jit(rnd.build_client_update(alg, batch_size=B, local_epochs=E, work=work))
    params = init_params(model, jax.random.key(0))
    data = client_data(scene.train)
    for k in range(scene.num_clients):
        args = (params, data.tokens[k], data.labels[k], data.mask[k], jax.random.key(k))
        want, m_want, _ = plain(*args)
        budget = E * math.ceil(int(scene.train.counts[k]) / B)
        got, m_got, _ = stream(*args, (), k, jnp.int32(budget))
        chex.assert_trees_all_close(got, want, atol=1e-6)
        assert int(m_got.steps) == int(m_want.steps) == budget
        np.testing.assert_allclose(m_got.train_loss, m_want.train_loss, rtol=1e-5)


def test_fixed_steps_and_fednova_with_equal_work_is_fedavg(scene, model):
    """Every client runs the same number of steps: FedNova's scales are all 1 (plain SGD)."""
    state, clients = _states(model, scene, fedavg(model))
    data = client_data(scene.train, local_vocab=True)
    mean = _round(model, LocalWork(steps=3))(state, clients, data, jax.random.key(1))
    nova = _round(model, LocalWork(steps=3, aggregation="fednova"))(state, clients, data,
                                                                    jax.random.key(1))
    np.testing.assert_array_equal(mean[2].steps, [3] * scene.num_clients)
    chex.assert_trees_all_close(nova[0].params, mean[0].params, atol=1e-6)


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_a_dropped_clients_update_has_no_effect(scene, model, seed):
    """Whatever a dropped client's data says, the aggregate is the same; the others' weights
    are renormalised (the aggregate is their N^k-weighted mean)."""
    work = LocalWork(dropout=0.5)
    step = _dropout_round(model)
    state, clients = _states(model, scene, fedavg(model))
    data = client_data(scene.train, local_vocab=False)
    key = jax.random.key(seed)
    new, _, metrics = step(state, clients, data, key)
    dropped = np.asarray(metrics.steps) == 0
    flipped = data._replace(labels=jnp.where(jnp.asarray(dropped)[:, None], 1 - data.labels,
                                             data.labels))
    again, _, metrics2 = step(state, clients, flipped, key)
    np.testing.assert_array_equal(metrics2.steps, metrics.steps)
    chex.assert_trees_all_equal(again.params, new.params)
    if dropped.all():  # nobody took part: the server keeps its model
        chex.assert_trees_all_equal(new.params, state.params)
        return
    parts = rnd.build_round_parts(fedavg(model, 0.1), batch_size=B, local_epochs=E, work=work)
    shared, _, m, _ = parts.local_training(state, clients, data, key)
    w = np.where(dropped, 0.0, np.asarray(scene.train.counts, np.float64))
    w = w / w.sum()
    want = jax.tree.map(lambda y: jnp.tensordot(jnp.asarray(w, y.dtype), y, axes=1), shared)
    chex.assert_trees_all_close(new.params, want, atol=1e-6)


_DROPOUT_ROUNDS = {}


def _dropout_round(model):
    """One compiled dropout round shared by the property test's examples."""
    if model not in _DROPOUT_ROUNDS:
        _DROPOUT_ROUNDS[model] = _round(model, LocalWork(dropout=0.5))
    return _DROPOUT_ROUNDS[model]


def test_every_client_dropped_keeps_the_model_and_compiles_once(scene, model):
    fn = chex.assert_max_traces(rnd.build_round(fedavg(model, 0.1), batch_size=B,
                                                local_epochs=E,
                                                work=LocalWork(dropout=1.0)), n=1)
    step = jax.jit(fn)
    state, clients = _states(model, scene, fedavg(model))
    start = state
    for _ in range(2):
        state, clients, metrics = step(state, clients, client_data(scene.train),
                                       jax.random.key(0))
    chex.assert_trees_all_equal(state.params, start.params)
    assert int(state.round) == 2 and int(metrics.steps.sum()) == 0


@settings(max_examples=30, deadline=None)
@given(counts=st.lists(st.integers(0, 30), min_size=1, max_size=12),
       fraction=st.sampled_from([0.0, 0.25, 0.5, 1.0]),
       policy=st.sampled_from(het.STRAGGLER_POLICIES), seed=st.integers(0, 1000))
def test_stragglers_do_part_of_their_work(counts, fraction, policy, seed):
    counts = np.asarray(counts, np.int32)
    full = E * -(-counts // B)
    work = LocalWork(stragglers=fraction, straggler_policy=policy)
    tau = np.asarray(het.budgets(work, jax.random.key(seed), jnp.asarray(counts), B, E))
    assert tau.dtype == np.int32 and np.all(tau[counts == 0] == 0)
    slow = tau < full
    n_slow = round(fraction * np.count_nonzero(counts))
    # a client of one step cannot do less than one: it counts as a straggler doing it all
    assert np.count_nonzero(slow) <= n_slow
    assert np.count_nonzero(slow) >= n_slow - np.count_nonzero(full == 1)
    if policy == "drop":
        assert np.all(tau[slow] == 0)
    else:
        assert np.all((tau[slow] >= 1) & (tau[slow] <= full[slow] - 1))


@settings(max_examples=20, deadline=None)
@given(counts=st.lists(st.integers(0, 30), min_size=1, max_size=12),
       lo=st.integers(1, 5), extra=st.integers(0, 5), seed=st.integers(0, 1000))
def test_drawn_and_fixed_local_steps(counts, lo, extra, seed):
    counts = jnp.asarray(counts, jnp.int32)
    drawn = np.asarray(het.budgets(LocalWork(steps_range=(lo, lo + extra)),
                                   jax.random.key(seed), counts, B, E))
    fixed = np.asarray(het.budgets(LocalWork(steps=lo), jax.random.key(seed), counts, B, E))
    data = np.asarray(counts) > 0
    assert np.all((drawn[data] >= lo) & (drawn[data] <= lo + extra)) and np.all(drawn[~data] == 0)
    np.testing.assert_array_equal(fixed, np.where(data, lo, 0))


def test_fednova_normalizers_match_their_closed_forms():
    tau = jnp.arange(0, 9)
    np.testing.assert_allclose(fednova.normalizers(tau, 8), np.arange(9), rtol=1e-6)
    rho = 0.9
    t = np.arange(9.0)
    want = (t - rho * (1 - rho**t) / (1 - rho)) / (1 - rho)
    np.testing.assert_allclose(fednova.normalizers(tau, 8, momentum=rho), want, rtol=1e-5)
    em = 0.05
    np.testing.assert_allclose(fednova.normalizers(tau, 8, prox=em), (1 - (1 - em)**t) / em,
                               rtol=1e-5)


def test_fednova_aggregate_is_the_normalised_update(scene, model):
    """x_new = x - tau_eff sum_k p_k (x - y_k) / ||a_k|| (Wang et al. 2020, Eq. 6-7), with
    momentum and unequal local steps."""
    work = LocalWork(steps_range=(1, 6), aggregation="fednova", momentum=0.9)
    alg = fedavg(model, 0.05, momentum=0.9)
    parts = rnd.build_round_parts(alg, batch_size=B, local_epochs=E, work=work)
    state, clients = _states(model, scene, alg)
    data = client_data(scene.train)
    shared, _, m, _ = parts.local_training(state, clients, data, jax.random.key(4))
    steps = np.asarray(m.steps)
    assert len(set(steps.tolist())) > 1, "the draw should give unequal work"
    p = np.asarray(scene.train.counts, np.float64) / scene.train.counts.sum()
    t = steps.astype(np.float64)
    a = (t - 0.9 * (1 - 0.9**t) / 0.1) / 0.1
    tau_eff = float(np.sum(p * a))
    want = jax.tree.map(lambda x, y: x - tau_eff * jnp.tensordot(
        jnp.asarray(p / a, jnp.float32), x[None] - y, axes=1), state.params, shared)
    got = parts.aggregate(state, shared, data, m.steps).params
    chex.assert_trees_all_close(got, want, atol=2e-5)


def test_fednova_on_local_vocabulary_rows_equals_dense(scene, model):
    work = LocalWork(steps_range=(1, 6), aggregation="fednova")
    step = _round(model, work)
    state, clients = _states(model, scene, fedavg(model))
    dense = step(state, clients, client_data(scene.train, False), jax.random.key(5))[0]
    rows = step(state, clients, client_data(scene.train, True), jax.random.key(5))[0]
    chex.assert_trees_all_close(rows.params, dense.params, atol=2e-6)


@pytest.mark.parametrize("bad, flag", [
    (LocalWork(steps=0), "--local-steps"), (LocalWork(steps_range=(3, 2)), "--local-steps"),
    (LocalWork(dropout=1.5), "--client-dropout"), (LocalWork(stragglers=-0.1),
                                                   "--straggler-fraction"),
    (LocalWork(straggler_policy="wait"), "--straggler-policy"),
    (LocalWork(aggregation="median"), "--aggregation")])
def test_bad_settings_name_their_flag(bad, flag):
    with pytest.raises(ValueError, match=flag):
        bad.check()
