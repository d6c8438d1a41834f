"""The client optimizer's state kept across rounds: round 1 is the plain run, a stateless
optimizer (SGD without momentum) keeps nothing, the step count runs on from one round to the
next, momentum kept by local-vocabulary rows equals the dense table's, private leaves are
covered, and it chains with a method that owns state."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sc.algorithms import scaffold
from fedjax_sc.algorithms.base import Hooks
from fedjax_sc.algorithms.compose import named_chain
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.kept_optimizer import kept_optimizer_state
from fedjax_sc.data.client_data import client_data

LR = 0.1


def _differ(a, b) -> float:
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in
               zip(jax.tree.leaves(a), jax.tree.leaves(b)))


def test_round_one_is_the_plain_run_and_momentum_moves_round_two(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    plain, kept = fedavg(model, LR, 0.9), kept_optimizer_state(fedavg(model, LR, 0.9))
    chex.assert_trees_all_close(rounds(kept, model, data, 1, n)[0].params,
                                rounds(plain, model, data, 1, n)[0].params, atol=1e-6)
    assert _differ(rounds(kept, model, data, 2, n)[0].params,
                   rounds(plain, model, data, 2, n)[0].params) > 1e-5


def test_sgd_without_momentum_keeps_nothing(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    kept = rounds(kept_optimizer_state(fedavg(model, LR, 0.0)), model, data, 3, n)
    assert not jax.tree.leaves(kept[1].algorithm)
    chex.assert_trees_all_close(kept[0].params,
                                rounds(fedavg(model, LR, 0.0), model, data, 3, n)[0].params,
                                atol=1e-6)


def test_the_step_count_runs_on_across_rounds(model, scene, rounds):
    """An optimizer that counts its steps (optax.scale_by_schedule) ends round 2 at the
    client's steps of both rounds."""
    counting = optax.chain(optax.sgd(LR), optax.scale_by_schedule(lambda count: 1.0))
    algorithm = kept_optimizer_state(fedavg(model)._replace(client_optimizer=counting))
    _, clients, metrics = rounds(algorithm, model, client_data(scene.train, local_vocab=True),
                                 2, scene.num_clients)
    count = clients.algorithm[1].count
    np.testing.assert_array_equal(np.asarray(count), 2 * np.asarray(metrics.steps))
    assert int(np.min(metrics.steps)) > 0


def test_momentum_kept_by_rows_equals_the_dense_table(model, scene, rounds):
    """The momentum's table leaves go by the client's rows, as the params do (a row the client
    never trains keeps a zero momentum either way), with the embeddings' own step size."""
    from fedjax_sc.algorithms.optimizers import client_sgd
    base = fedavg(model, LR, 0.9)._replace(client_optimizer=client_sgd(LR, 0.9, 0.3))
    algorithm = kept_optimizer_state(base)
    n = scene.num_clients
    dense = rounds(algorithm, model, client_data(scene.train, local_vocab=False), 3, n)
    rows = rounds(algorithm, model, client_data(scene.train, local_vocab=True), 3, n)
    chex.assert_trees_all_close(rows[0].params, dense[0].params, atol=2e-5)
    chex.assert_trees_all_close(rows[1].algorithm, dense[1].algorithm, atol=2e-5)


def test_private_leaves_are_covered_and_it_chains_with_scaffold(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    _, clients, _ = rounds(kept_optimizer_state(fedper(model, LR, 0.9)), model, data, 2, n)
    trace = clients.algorithm[0].trace
    assert "classifier" in trace and float(jnp.abs(trace["classifier"]["output"]["kernel"])
                                           .max()) > 0
    chained = named_chain(fedavg(model, LR, 0.9), ("optimizer", kept_optimizer_state),
                          ("scaffold", lambda a: scaffold.control_variates(a, LR, 0.9, n)))
    state, clients, _ = rounds(chained, model, data, 2, n)
    assert set(clients.algorithm) == {"optimizer", "scaffold"}
    chex.assert_trees_all_close(state.algorithm["scaffold"], jax.tree.map(
        lambda x: x.mean(0), clients.algorithm["scaffold"]), atol=1e-6)


def test_refusals_and_a_state_of_another_structure(model, scene, rounds):
    stateful = scaffold.control_variates(fedavg(model, LR, 0.9), LR, 0.9, 3)
    with pytest.raises(ValueError, match=re.escape("compose.named_chain")):
        kept_optimizer_state(stateful)
    with pytest.raises(ValueError, match="local copies"):
        kept_optimizer_state(fedavg(model)._replace(local_copies={"copy": "embedding"}))
    bad = fedavg(model, LR, 0.9)._replace(hooks=Hooks(optimizer_init=lambda start, fresh: ()))
    with pytest.raises(ValueError, match=re.escape(
            "fedavg: Hooks.optimizer_init returned an optimizer state of another structure")):
        rounds(bad, model, client_data(scene.train, local_vocab=True), 1, scene.num_clients)


def test_fedreps_head_steps_restart_every_round(model, scene, rounds):
    """FedRep counts its head steps in a RoundStep, which a kept state starts afresh: without
    momentum (nothing else to keep) kept is fresh exactly, the head training every round."""
    from fedjax_sc.algorithms.fedrep import fedrep
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    plain = fedrep(model, LR, 0.0, head_steps=2)
    kept = rounds(kept_optimizer_state(plain), model, data, 3, n)
    fresh = rounds(plain, model, data, 3, n)
    chex.assert_trees_all_close(kept[1].private, fresh[1].private, atol=1e-6)
    chex.assert_trees_all_close(kept[0].params, fresh[0].params, atol=1e-6)


def test_the_run_refuses_what_a_kept_state_would_break(model):
    from fedjax_sc.algorithms.kept_optimizer import client_optimizer_state
    from fedjax_sc.run import ranges
    from fedjax_sc.run.config import TrainConfig
    with pytest.raises(ValueError, match="fednova"):
        ranges.check(TrainConfig(scene="synthetic", aggregation="fednova",
                                 client_optimizer_state="kept"))
    own = fedavg(model)._replace(hooks=Hooks(optimizer_init=lambda start, fresh: fresh))
    with pytest.raises(ValueError, match="optimizer_init"):
        client_optimizer_state(own, "kept")
    with pytest.raises(ValueError, match="choose from fresh, kept"):
        client_optimizer_state(own, "warm")
    assert client_optimizer_state(own, "fresh") is own
