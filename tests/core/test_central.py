"""Centralised trainers (FS: pooled data through the round; ASP: multi-task steps): they are
the federated round where they must be, and padded steps change nothing."""

import functools

import chex
import jax
import numpy as np
import pytest

from fedjax_sc.algorithms.asp import asp
from fedjax_sc.algorithms.base import CentralTrainer
from fedjax_sc.core import central
from fedjax_sc.core import round as rnd
from fedjax_sc.core.multitask import build_multitask_round
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.asp import ASPClassifier
from fedjax_sc.models.text_classifier import init_params

DIMS = dict(embed_dim=8, hidden=4, mlp_hidden=6)


def _run(algorithm, params, data, rounds=1, builder=rnd.build_round):
    state, clients = rnd.init_states(algorithm, params, data.num_clients)
    step = jax.jit(builder(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, metrics = step(state, clients, data, jax.random.key(3))
    return state, clients, metrics


def test_algorithms_provide_their_trainer():
    model = ASPClassifier(vocab_size=10, num_domains=2, **DIMS)
    assert asp(model).central.name == "multitask"
    assert central.builder(asp(model).central).func is build_multitask_round
    assert central.builder(asp(model).central).keywords == {"schedule": "alternate"}
    assert central.builder(asp(model, schedule="sum").central).keywords == {"schedule": "sum"}
    with pytest.raises(ValueError, match="schedule"):
        asp(model, schedule="sequential")
    assert central.builder(CentralTrainer("pooled")) is rnd.build_round
    with pytest.raises(ValueError, match="central trainer"):
        central.builder(CentralTrainer("sharded"))


def test_fs_equals_fedavg_with_one_client_holding_all_data(tmp_path):
    import dataclasses

    from fedjax_sc.run.train import TrainConfig, build_setup, load_scene, train
    c = TrainConfig(algorithm="fs", rounds=2, synthetic_clients=3, synthetic_train=12,
                    synthetic_test=4, max_len=8, embed_dim=8, hidden=4, mlp_hidden=6, ap=False,
                    batch_size=4, local_epochs=1, out=str(tmp_path / "fs"))
    report = train(c, log=lambda s: None)
    c = dataclasses.replace(c, algorithm="fedavg", upload_noise=0.0).resolved()
    scene = load_scene(c)
    setup = build_setup(c, scene, log=lambda s: None)
    pooled = client_data(scene.train.pooled(), local_vocab=True)
    assert pooled.num_clients == 1 and int(pooled.counts[0]) == int(scene.train.counts.sum())
    step = jax.jit(rnd.build_round(setup.algorithm, batch_size=4, local_epochs=1))
    state, clients = setup.state, rnd.ClientStates({})
    for _ in range(2):
        state, clients, _ = step(state, clients, pooled, setup.train_key)
    chex.assert_trees_all_close(report["params"], state.params, atol=1e-6)


@pytest.mark.parametrize("schedule", ["alternate", "sum"])
def test_multitask_round_with_one_client_equals_the_federated_round(scene, schedule):
    model = ASPClassifier(vocab_size=len(scene.vocab), num_domains=1, **DIMS)
    alg = asp(model, 0.1)
    params = init_params(model, jax.random.key(0))
    one = type(scene.train)(*(np.asarray(getattr(scene.train, f))[1:2] for f in
                              ("tokens", "labels", "mask", "counts")))
    data = client_data(one)
    central, c_clients, c_metrics = _run(
        alg, params, data, rounds=2,
        builder=functools.partial(build_multitask_round, schedule=schedule))
    federated, f_clients, _ = _run(alg._replace(central=None), params, data, rounds=2)
    chex.assert_trees_all_close(central.params, federated.params, atol=1e-5)
    chex.assert_trees_all_close(c_clients.private, f_clients.private, atol=1e-5)
    assert {"adversarial", "domain_accuracy", "orthogonality"} <= set(c_metrics.aux)


@pytest.mark.parametrize("schedule", ["alternate", "sum"])
def test_multitask_round_leaves_a_client_without_data_unchanged(scene, schedule):
    model = ASPClassifier(vocab_size=len(scene.vocab), num_domains=3, **DIMS)
    alg = asp(model, 0.1)
    arrays = scene.train
    mask = np.asarray(arrays.mask).copy()
    mask[2] = False
    counts = np.asarray(arrays.counts).copy()
    counts[2] = 0
    data = client_data(type(arrays)(arrays.tokens, arrays.labels, mask, counts))
    params = init_params(model, jax.random.key(0))
    state, clients, metrics = _run(
        alg, params, data, builder=functools.partial(build_multitask_round, schedule=schedule))
    start = rnd.init_states(alg, params, 3)[1]
    chex.assert_trees_all_equal(jax.tree.map(lambda a: a[2], clients.private),
                                jax.tree.map(lambda a: a[2], start.private))
    assert int(metrics.steps[2]) == 0 and int(metrics.steps[0]) > 0
    # every real batch of a client is one of its steps, under either schedule
    batches = -(-np.asarray(counts) // 4)
    np.testing.assert_array_equal(np.asarray(metrics.steps), batches)
    with pytest.raises(ValueError, match="global vocabulary ids"):
        build_multitask_round(alg, batch_size=4, local_epochs=1)(
            state, clients, client_data(arrays, local_vocab=True), jax.random.key(0))


def test_alternate_schedule_keeps_each_domains_momentum_to_its_own_steps():
    """The alternate schedule's optimizer (the shared leaves' state once, each domain's
    private leaves' state its own) under its per-step masks: with momentum 0.9, a domain's
    private leaves and momentum move on its own steps only (a domain whose one step comes
    first is not carried on by its momentum in the others' steps), the shared leaves on
    every step; as a plain loop over the single-domain steps."""
    import jax.numpy as jnp
    import optax

    from fedjax_sc.core.local import local_steps
    from fedjax_sc.core.multitask import _shared_and_per_client
    opt = optax.sgd(0.1, momentum=0.9)
    domains = jnp.asarray([0, 1, 1, 1])  # the step sequence: domain 0 once, then domain 1
    targets = jnp.arange(12, dtype=jnp.float32).reshape(4, 3)

    def step(both, inputs):  # loss 0.5 ||shared + private_k - target||^2 of the step's domain
        shared, private = both
        k, target = inputs
        g = shared + private[k] - target
        return (0.5 * jnp.sum(g ** 2), {}), (g, jnp.zeros_like(private).at[k].set(g))

    init = (jnp.zeros(3), jnp.zeros((2, 3)))
    real = (jnp.ones(4, bool), domains[:, None] == jnp.arange(2)[None, :])
    pair = _shared_and_per_client(opt)
    (got, _), _ = jax.jit(lambda: local_steps(step, pair, init, pair.init(init),
                                              (domains, targets), real))()
    shared, rows = init[0], [init[1][0], init[1][1]]
    s_state, p_states = opt.init(shared), [opt.init(r) for r in rows]
    for k, target in zip(domains.tolist(), targets):
        g = shared + rows[k] - target
        u, s_state = opt.update(g, s_state, shared)
        v, p_states[k] = opt.update(g, p_states[k], rows[k])
        shared, rows[k] = shared + u, rows[k] + v
    chex.assert_trees_all_close(got, (shared, jnp.stack(rows)), atol=1e-6)
    np.testing.assert_allclose(got[1][0], 0.1 * targets[0], atol=1e-6)  # one step: -lr * g


def test_alternate_schedule_steps_one_domain_at_a_time(scene):
    """Alternate: two domains' steps form one sequence of single-domain SGD steps: the shared
    leaves move by the single-domain steps one after another (not by one summed step), and
    each domain's private leaves move (their momentum kept to their own steps:
    :func:`test_alternate_schedule_keeps_each_domains_momentum_to_its_own_steps`)."""
    model = ASPClassifier(vocab_size=len(scene.vocab), num_domains=2, **DIMS)
    alg = asp(model, 0.1, momentum=0.0)
    two = type(scene.train)(*(np.asarray(getattr(scene.train, f))[:2] for f in
                              ("tokens", "labels", "mask", "counts")))
    data = client_data(two)
    params = init_params(model, jax.random.key(0))
    alt, alt_clients, alt_metrics = _run(
        alg, params, data, builder=functools.partial(build_multitask_round, schedule="alternate"))
    summed, _, sum_metrics = _run(
        alg, params, data, builder=functools.partial(build_multitask_round, schedule="sum"))
    np.testing.assert_array_equal(alt_metrics.steps, sum_metrics.steps)
    assert np.all(np.isfinite(alt_metrics.train_loss))
    moved = lambda a, b: max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
                             for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert moved(alt.params, summed.params) > 1e-6  # two different step sequences
    start = rnd.init_states(alg, params, 2)
    assert moved(alt.params, start[0].params) > 1e-6
    for k in range(2):
        assert moved(jax.tree.map(lambda a: a[k], alt_clients.private),
                     jax.tree.map(lambda a: a[k], start[1].private)) > 1e-6
