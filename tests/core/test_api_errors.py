"""The public API names the problem where it is called, not in a deep JAX traceback."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sc as fsc
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

DIMS = dict(embed_dim=8, hidden=4, mlp_hidden=6)


@pytest.fixture(scope="module")
def setup(scene):
    model = PrivateSharedClassifier(vocab_size=len(scene.vocab), **DIMS,
                                    private_from="classifier", projection=True)
    algorithm = fsc.kteps(model, 0.1)
    return scene, model, algorithm, init_params(model, jax.random.key(0))


def test_init_states_needs_clients(setup):
    _, _, algorithm, params = setup
    for bad in (-1, 0, 2.0):
        with pytest.raises(ValueError, match="num_clients must be an int >= 1"):
            rnd.init_states(algorithm, params, bad)
    _, clients = rnd.init_states(algorithm, params, np.int64(2))  # a NumPy int is an int
    assert {leaf.shape[0] for leaf in jax.tree.leaves(tuple(clients))} <= {2}


def test_the_round_names_bad_client_data(setup):
    scene, _, algorithm, params = setup
    step = rnd.build_round(algorithm, batch_size=4, local_epochs=1)
    data = client_data(scene.train)
    state, clients = rnd.init_states(algorithm, params, data.num_clients + 1)
    with pytest.raises(ValueError, match=rf"client states for {data.num_clients + 1} clients "
                                         rf"but client data for {data.num_clients}"):
        step(state, clients, data, jax.random.key(0))
    # an algorithm's own state (FedDyn on a model without private leaves) is checked too
    plain = fsc.TextClassifier(vocab_size=len(scene.vocab), embed_dim=4, hidden=3,
                               mlp_hidden=4)
    dyn = fsc.methods.feddyn(plain, data.num_clients)
    state, clients = rnd.init_states(dyn, init_params(plain, jax.random.key(0)),
                                     data.num_clients + 1)
    assert not jax.tree.leaves(clients.private)
    with pytest.raises(ValueError, match=rf"client states for {data.num_clients + 1} clients"):
        rnd.build_round(dyn, batch_size=4, local_epochs=1)(state, clients, data,
                                                           jax.random.key(0))
    state, clients = rnd.init_states(algorithm, params, data.num_clients)
    with pytest.raises(TypeError, match="token ids must be integers, got float32"):
        step(state, clients, data._replace(tokens=data.tokens.astype(jnp.float32)),
             jax.random.key(0))


def test_builders_name_their_mistakes(setup):
    scene, model, _, _ = setup
    single = TextClassifier(vocab_size=len(scene.vocab), **DIMS)
    with pytest.raises(TypeError, match="kteps needs a two-branch model .* got TextClassifier"):
        fsc.kteps(single)
    with pytest.raises(TypeError, match="the round needs an Algorithm .* got 'fedavg'"):
        rnd.make_round_step("fedavg", batch_size=4, local_epochs=1)
    for bad, msg in ((float("nan"), "a finite"), (float("inf"), "a finite"), ("0.1", "a number"),
                     (True, "a number"), (np.ones(2), "a number")):
        with pytest.raises(ValueError, match=f"learning_rate must be {msg}"):
            fsc.fedavg(single, bad)
    with pytest.raises(ValueError, match="lambda_kt must be a finite number"):
        fsc.kteps(model, lambda_kt=float("nan"))


def test_client_data_names_what_is_missing():
    with pytest.raises(TypeError, match="list lacks tokens, labels, mask, counts"):
        client_data([])
    import dataclasses
    empty = dataclasses.replace(fsc.synthetic_scene(num_clients=2).train,
                                tokens=np.zeros((0, 4, 8), np.int32))
    with pytest.raises(ValueError, match=r"\[K >= 1 clients, n, L\], got shape \(0, 4, 8\)"):
        client_data(empty)
