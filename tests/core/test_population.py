"""Populations: member i of one vmapped program trains exactly as the standalone run with
member i's key and hyperparameters, for every algorithm family."""

import chex
import jax
import numpy as np
import pytest

from fedjax_sc.algorithms import dp_sgd, fedmmd, fedopt, fedprox
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import private_upload
from fedjax_sc.core import population as pop
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

DIMS = dict(embed_dim=8, hidden=4, mlp_hidden=6)


def _models(scene):
    single = TextClassifier(vocab_size=len(scene.vocab), **DIMS)
    two = PrivateSharedClassifier(vocab_size=len(scene.vocab), **DIMS,
                                  private_from="classifier", projection=True)
    return single, two


def _builders(scene):
    single, two = _models(scene)
    return {
        "fedavg": (single, lambda h: fedavg(single, h["lr"], h["momentum"]),
                   {"lr": [0.1, 0.05, 0.2], "momentum": [0.9, 0.0, 0.5]}),
        "fedper": (single, lambda h: fedper(single, h["lr"]), {"lr": [0.1, 0.1, 0.1]}),
        "fedprox": (single, lambda h: fedprox.proximal(fedavg(single, 0.1), h["mu"]),
                    {"mu": [0.0, 0.5, 3.0]}),
        # the median kernel: the default multi kernel's variances down to 1e-6 turn float32
        # rounding of ||a - b||^2 (batched matmuls round differently) into 1e-4 differences
        "fedmmd": (single, lambda h: fedmmd.mmd_penalty(fedavg(single, 0.1), h["weight"],
                                                         kernel="median"),
                   {"weight": [0.0, 0.1, 1.0]}),
        "fedadam": (single, lambda h: fedopt.fedopt(fedavg(single, 0.1), "adam", h["server_lr"]),
                    {"server_lr": [0.01, 0.003, 0.03]}),
        "kteps": (two, lambda h: kteps(two, 0.1, lambda_kt=h["kt"], lambda_div=h["div"]),
                  {"kt": [0.0, 0.01, 0.5], "div": [0.01, 0.0, 0.5]}),
        "kteps_star": (two, lambda h: kteps(two, 0.1)._replace(
            upload=private_upload((2, 6), h["sigma"])), {"sigma": [0.0, 0.01, 0.1]}),
        "dp_sgd": (single, lambda h: dp_sgd.dp_sgd(fedavg(single, 0.1), 1.0, h["z"]),
                   {"z": [0.0, 0.5, 1.0]}),
    }


def _standalone(build, model, values, key, train, rounds):
    algorithm = build(values)
    state, clients = rnd.init_states(algorithm, init_params(model, key), train.num_clients)
    step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, metrics = step(state, clients, train, key)
    return state, clients, metrics


@pytest.fixture(scope="module")
def standalone_run(scene):
    """Per family, the standalone run (state, client states, metrics) of the member it is
    checked against, made once for both member axes (each run compiles a round of its own
    values)."""
    made = {}

    def run(family):
        if family not in made:
            model, build, values = _builders(scene)[family]
            hparams = {k: np.asarray(v, np.float32) for k, v in values.items()}
            train = client_data(scene.train, local_vocab=True)
            i = CHECKED[family]
            made[family] = _standalone(build, model, pop.as_values(hparams, i),
                                       _member_keys()[i], train, rounds=2)
        return made[family]
    return run


def _member_keys():
    return jax.random.split(jax.random.key(7), 3)  # a seed per member


FAMILIES = ("fedavg", "fedper", "fedprox", "fedmmd", "fedadam", "kteps", "kteps_star", "dp_sgd")
CHECKED = {"fedavg": 0, "fedper": 1, "fedprox": 2, "fedmmd": 2, "fedadam": 1, "kteps": 2,
           "kteps_star": 1, "dp_sgd": 1}
"""The member each family checks against its standalone run: one whose values switch the
family's own term on, and every index across families (a standalone run compiles a program of
its own, for its member's values, so one per family)."""
MAPPED = ("fedper", "fedadam", "kteps_star")
"""The families also run with ``member_axis="map"``: one of each kind of state the member axis
carries besides the params (private leaves, a server optimizer's state, an upload chain's
state with private leaves); ``lax.map`` treats every leaf alike, and compiling each family's
mapped program again costs the suite more than it finds."""


@pytest.mark.parametrize("family, member_axis", [(f, "vmap") for f in FAMILIES]
                         + [(f, "map") for f in MAPPED])
def test_member_equals_its_standalone_run(scene, family, member_axis, standalone_run):
    model, build, values = _builders(scene)[family]
    hparams = {k: np.asarray(v, np.float32) for k, v in values.items()}
    keys = _member_keys()
    train = client_data(scene.train, local_vocab=True)
    states, clients = pop.init_population(build, lambda k: init_params(model, k), hparams,
                                          keys, train.num_clients)
    step = jax.jit(pop.build_population_round(build, batch_size=4, local_epochs=1,
                                              member_axis=member_axis))
    for _ in range(2):
        states, clients, metrics = step(states, clients, train, keys, hparams)
    chex.assert_tree_all_finite(states.params)
    # KTEPS*'s batched eigendecompositions round differently from one matrix's (~4e-6)
    atol = 1e-5 if family == "kteps_star" else 1e-6
    i, (state, own, alone) = CHECKED[family], standalone_run(family)
    chex.assert_trees_all_close(pop.member(states.params, i), state.params, rtol=1e-5,
                                atol=atol)
    chex.assert_trees_all_close(pop.member(clients.private, i), own.private, rtol=1e-5,
                                atol=atol)
    np.testing.assert_allclose(metrics.train_loss[i], alone.train_loss, rtol=1e-5)
    # the members differ: different seeds and values give different models
    first, second = pop.member(states.params, 0), pop.member(states.params, 1)
    assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(first),
                                                    jax.tree.leaves(second)))


def test_grid_and_sizes():
    g = pop.grid(lr=[0.01, 0.1], mu=[0.0, 1.0, 2.0])
    np.testing.assert_allclose(g["lr"], [0.01] * 3 + [0.1] * 3)
    np.testing.assert_allclose(g["mu"], [0.0, 1.0, 2.0] * 2)
    keys = jax.random.split(jax.random.key(0), 6)
    assert pop.population_size(g, keys) == 6
    with pytest.raises(ValueError, match="disagree in number: keys 2, lr 6"):
        pop.population_size(g, keys[:2])
    with pytest.raises(ValueError, match="shape"):
        pop.population_size({"lr": np.zeros((2, 2))}, keys[:2])
    with pytest.raises(ValueError, match="no value for mu"):
        pop.grid(lr=[0.1], mu=[])


def test_concrete_values_are_still_checked(scene):
    single, two = _models(scene)
    with pytest.raises(ValueError, match="learning_rate must be >= 0"):
        fedavg(single, -1.0)
    with pytest.raises(ValueError, match="momentum must be in"):
        fedavg(single, 0.1, momentum=1.0)
    with pytest.raises(ValueError, match="lambda_div must be >= 0"):
        kteps(two, lambda_div=-0.1)


def test_an_unknown_member_axis_is_refused():
    with pytest.raises(ValueError, match="member_axis 'pmap'"):
        pop.build_population_round(lambda h: None, batch_size=4, local_epochs=1,
                                   member_axis="pmap")


def test_host_client_states_equal_the_device_ones(scene):
    """``init_from_params(host=True)``: every member's client states ``[P, N, ...]`` as
    read-only NumPy views (stride 0 on the client axis), equal to the device ones."""
    single, _ = _models(scene)
    keys = jax.random.split(jax.random.key(0), 2)
    params = jax.vmap(lambda k: init_params(single, k))(keys)
    build = lambda h: fedper(single, h["lr"])  # noqa: E731
    hp = {"lr": np.asarray([0.1, 0.2], np.float32)}
    dev_state, dev = pop.init_from_params(build, params, hp, scene.num_clients)
    host_state, host = pop.init_from_params(build, params, hp, scene.num_clients, host=True)
    chex.assert_trees_all_equal(dev_state, host_state)
    chex.assert_trees_all_equal(jax.device_get(dev), host)
    for leaf in jax.tree.leaves(host):
        assert isinstance(leaf, np.ndarray) and leaf.shape[:2] == (2, scene.num_clients)
        assert leaf.strides[1] == 0 and not leaf.flags.writeable
    for leaf in jax.tree.leaves(pop.stack([pop.member(host, 0), pop.member(host, 1)])):
        assert isinstance(leaf, np.ndarray)  # host states stay on the host when stacked
