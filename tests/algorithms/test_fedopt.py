"""FedOpt server updates (Reddi et al. 2021): SGD(1.0) is FedAvg, state lives in ServerState."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from fedjax_sc.algorithms import fedopt
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import synthetic_scene
from fedjax_sc.models.text_classifier import TextClassifier, init_params


@pytest.fixture(scope="module")
def setup():
    scene = synthetic_scene(num_clients=3, train_per_client=12, test_per_client=2, max_len=8,
                            seed=1)
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=6, hidden=4, mlp_hidden=4)
    return scene, model, init_params(model, jax.random.key(0))


def _aggregate(algorithm, params, uploads, data):
    state, _ = rnd.init_states(algorithm, params, data.num_clients)
    parts = rnd.build_round_parts(algorithm, batch_size=4, local_epochs=1)
    return jax.jit(parts.aggregate)(state, uploads, data)


@pytest.mark.parametrize("name", fedopt.SERVER_OPTIMIZERS)
def test_zero_pseudo_gradient_leaves_the_model_unchanged(setup, name):
    scene, model, params = setup
    data = client_data(scene.train)
    uploads = jax.tree.map(lambda x: jnp.stack([x] * 3), params)
    new = _aggregate(fedopt.fedopt(fedavg(model), name), params, uploads, data)
    # optax's yogi starts its first moment at 1e-6 (not 0): a step of ~1e-5 on a zero gradient;
    # adam divides the average's rounding (~1e-7) by its tau (1e-3): steps of up to ~1e-6
    atol = {"yogi": 1e-4, "adam": 1e-5}.get(name, 1e-7)
    chex.assert_trees_all_close(new.params, params, atol=atol)
    if name != "sgd":  # plain SGD has no state; the others keep theirs in ServerState
        assert jax.tree.leaves(new.opt_state)


def test_sgd_one_aggregate_is_the_fedavg_aggregate(setup):
    scene, model, params = setup
    data = client_data(scene.train)
    keys = jax.random.split(jax.random.key(3), 3)
    uploads = jax.tree.map(lambda x: jnp.stack([x + jax.random.normal(k, x.shape)
                                                for k in keys]), params)
    plain = _aggregate(fedavg(model), params, uploads, data)
    sgd = _aggregate(fedopt.fedopt(fedavg(model), "sgd", 1.0), params, uploads, data)
    chex.assert_trees_all_close(sgd.params, plain.params, atol=1e-6)
    half = _aggregate(fedopt.fedopt(fedavg(model), "sgd", 0.5), params, uploads, data)
    chex.assert_trees_all_close(half.params, jax.tree.map(lambda a, b: (a + b) / 2, params,
                                                          plain.params), atol=1e-6)


def test_sgd_one_round_equals_fedavg_round_and_adam_differs(setup):
    scene, model, params = setup
    data = client_data(scene.train, local_vocab=True)
    out = {}
    for name, alg in (("fedavg", fedavg(model, 0.1)),
                      ("sgd", fedopt.fedopt(fedavg(model, 0.1), "sgd")),
                      ("adam", fedopt.fedopt(fedavg(model, 0.1), "adam"))):
        state, clients = rnd.init_states(alg, params, scene.num_clients)
        step = rnd.make_round_step(alg, batch_size=4, local_epochs=1)
        for _ in range(2):
            state, clients, _ = step(state, clients, data, jax.random.key(1))
        out[name] = state
    chex.assert_trees_all_close(out["sgd"].params, out["fedavg"].params, atol=1e-6)
    assert int(optax.tree_utils.tree_get(out["adam"].opt_state, "count")) == 2
    diff = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), out["adam"].params,
                        out["fedavg"].params)
    assert max(jax.tree.leaves(diff)) > 1e-4


def test_errors():
    with pytest.raises(ValueError, match="unknown server optimizer"):
        fedopt.server_optimizer("lamb")
    with pytest.raises(ValueError, match="> 0"):
        fedopt.server_optimizer("adam", 0.0)
    assert np.isclose(fedopt.DEFAULT_LR["sgd"], 1.0)
