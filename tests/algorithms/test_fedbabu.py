"""FedBABU: the global head is its initialisation after any number of rounds, the body trains as
FedAvg's with the head's gradient stopped, the global model is complete (Ag), and the loss the
Ap phase fine-tunes with reaches the head."""

import chex
import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import fedbabu, masking
from fedjax_sc.algorithms.base import Batch, ClientStart
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedopt import fedopt
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

LR = 0.1


def head(params):
    return params["classifier"]["output"]


def frozen(loss):
    """``loss`` with the head behind ``stop_gradient`` (an independent freeze)."""
    def wrapped(params, batch, rng, start):
        mask = masking.matching(params, fedbabu.HEAD)
        params = jax.tree.map(lambda p, h: jax.lax.stop_gradient(p) if h else p, params, mask)
        return loss(params, batch, rng, start)
    return wrapped


def test_the_head_is_its_initialisation_and_the_body_is_fedavgs(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    init = init_params(model, jax.random.key(0))
    state = rounds(fedbabu.fedbabu(model, LR, 0.9), model, data, 2, n)[0]
    chex.assert_trees_all_equal(head(state.params), head(init))
    plain = fedavg(model, LR, 0.9)
    reference = rounds(plain._replace(client_loss=frozen(plain.client_loss)), model, data, 2,
                       n)[0]
    chex.assert_trees_all_close(state.params, reference.params, atol=1e-6)
    moved = state.params["encoder"]["recurrent_kernel"] - init["encoder"]["recurrent_kernel"]
    assert float(jnp.max(jnp.abs(moved))) > 1e-4
    # a server optimizer moves the body, never the head
    adam = fedopt(fedbabu.fedbabu(model, LR), "adam", learning_rate=0.1)
    chex.assert_trees_all_equal(head(rounds(adam, model, data, 1, n)[0].params), head(init))


def test_the_global_model_is_complete_and_ap_fine_tunes_the_head(model):
    algorithm = fedbabu.fedbabu(model, LR)
    params = init_params(model, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (5, 7), 2, model.vocab_size)
    chex.assert_trees_all_close(algorithm.global_predict(params, tokens),
                                algorithm.predict(params, tokens)["full"], atol=1e-6)
    batch = Batch(tokens, jnp.array([0, 1, 0, 1, 1]), jnp.ones(5, bool))
    grads = jax.grad(lambda p: algorithm.client_loss(p, batch, jax.random.key(2),
                                                     ClientStart(params))[0])(params)
    assert float(jnp.max(jnp.abs(head(grads)["kernel"]))) > 0  # the loss reaches the head
    for optimizer, moves in ((algorithm.client_optimizer, False), (client_sgd(0.01), True)):
        updates, _ = optimizer.update(grads, optimizer.init(params), params)
        assert (float(jnp.max(jnp.abs(head(updates)["kernel"]))) > 0) == moves
        assert float(jnp.max(jnp.abs(updates["encoder"]["input_kernel"]))) > 0
    assert isinstance(algorithm.client_optimizer, optax.GradientTransformation)
