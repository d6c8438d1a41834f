"""APFL: the global model trains as FedAvg whatever alpha does, the local copy and alpha stay on
the client, the mixture and the three gradients have their closed forms, alpha is clipped to
[0, 1] (and fixed by a zero step size), and alpha = 0 predicts with the global model."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.algorithms import apfl
from fedjax_sc.algorithms.base import Batch, ClientStart
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import cross_entropy
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.personal_copy import ALPHA, PREFIX, PersonalCopy, parts
from fedjax_sc.models.text_classifier import TextClassifier, init_params

LR = 0.1
BASE = TextClassifier(vocab_size=20, embed_dim=4, hidden=3, mlp_hidden=5)
BATCH = Batch(jax.random.randint(jax.random.key(1), (4, 6), 1, 20),
              jnp.array([0, 1, 1, 0]), jnp.array([True, True, True, False]))


def _params(alpha, seed=0):
    """PersonalCopy params with the copy v moved away from w and the given alpha."""
    params = init_params(PersonalCopy(BASE, alpha), jax.random.key(seed))
    noise = lambda x: x + 0.1 * jax.random.normal(jax.random.key(seed + 1), x.shape)
    return {k: (jax.tree.map(noise, x) if k.startswith(PREFIX) else x)
            for k, x in params.items()}


def _run(algorithm, params, data, rounds, num_clients):
    state, clients = rnd.init_states(algorithm, params, num_clients)
    step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, _ = step(state, clients, data, jax.random.key(1))
    return state, clients


def test_w_is_fedavg_and_the_copy_and_alpha_stay_on_the_client(model, scene):
    data = client_data(scene.train, local_vocab=True)
    algorithm = apfl.apfl(model, LR, 0.9)
    params = init_params(algorithm.model, jax.random.key(0))
    w0, v0, alpha0 = parts(params)
    chex.assert_trees_all_equal(v0, w0)  # the copy starts as w
    assert float(alpha0) == apfl.DEFAULT_ALPHA
    shared, private = rnd.split_private(algorithm, params)
    assert set(shared) == {"embedding", "encoder", "classifier"}  # all that is ever sent
    state, clients = _run(algorithm, params, data, 2, scene.num_clients)
    assert set(state.params) == set(shared)
    reference, _ = _run(fedavg(model, LR, 0.9), w0, data, 2, scene.num_clients)
    chex.assert_trees_all_close(state.params, reference.params, atol=1e-6)
    alpha = np.asarray(clients.private[ALPHA])
    assert alpha.shape == (scene.num_clients,) and np.all((alpha >= 0) & (alpha <= 1))
    assert np.any(np.abs(alpha - apfl.DEFAULT_ALPHA) > 1e-5)  # adapted, per client
    table = np.asarray(clients.private["private_classifier"]["output"]["kernel"])
    assert np.abs(table[0] - table[1]).max() > 1e-6  # every client its own v
    # no gradient reaches a row outside V^k: training by rows is exact
    dense = _run(algorithm, params, client_data(scene.train, local_vocab=False), 2,
                 scene.num_clients)
    chex.assert_trees_all_close(dense, (state, clients), atol=2e-5)


def test_the_mixture_and_its_gradients_are_closed_form():
    alpha = 0.3
    params = _params(alpha)
    w, v, a = parts(params)
    mixed = jax.tree.map(lambda x, y: alpha * x + (1 - alpha) * y, v, w)
    tokens = BATCH.tokens
    expected = jax.jit(BASE.apply)({"params": mixed}, tokens)  # compiled: one program each
    np.testing.assert_allclose(jax.jit(PersonalCopy(BASE, alpha).apply)({"params": params},
                                                                          tokens),
                               expected, atol=1e-6)
    algorithm = apfl.apfl(BASE, alpha=alpha)
    np.testing.assert_allclose(jax.jit(algorithm.predict)(params, tokens)["full"],
                               jax.nn.softmax(expected, -1), atol=1e-6)
    grads = jax.jit(jax.grad(lambda p: algorithm.client_loss(p, BATCH, jax.random.key(2),
                                                             ClientStart(p))[0]))(params)
    ce = jax.jit(jax.grad(lambda p: cross_entropy(BASE)(p, BATCH, jax.random.key(2),
                                                        ClientStart(p))[0]))
    at_mixture = ce(mixed)
    gw, gv, ga = parts(grads)
    chex.assert_trees_all_close(gw, ce(w), atol=1e-6)  # w: its own loss only
    chex.assert_trees_all_close(gv, jax.tree.map(lambda g: alpha * g, at_mixture), atol=1e-6)
    inner = sum(jnp.vdot(x - y, g) for x, y, g in zip(
        jax.tree.leaves(v), jax.tree.leaves(w), jax.tree.leaves(at_mixture)))
    np.testing.assert_allclose(ga, inner, rtol=1e-4, atol=1e-7)


def test_alpha_zero_predicts_with_w_and_alpha_is_clipped():
    params = _params(0.0)
    algorithm = apfl.apfl(BASE, alpha=0.0, alpha_learning_rate=0.0)
    w, _, _ = parts(params)
    chex.assert_trees_all_equal(algorithm.predict(params, BATCH.tokens)["full"],
                                algorithm.global_predict(w, BATCH.tokens))
    grads = jax.tree.map(jnp.ones_like, params)
    # eta_a = 0 holds alpha where a step would move it (a gradient of -5 from 0)
    for eta_a, g, expected in ((0.0, -5.0, 0.0), (1.0, 5.0, 0.0), (1.0, -5.0, 1.0)):
        optimizer = apfl.apfl(BASE, LR, 0.0, alpha=0.0, alpha_learning_rate=eta_a
                              ).client_optimizer
        step = {**grads, ALPHA: jnp.float32(g)}
        updates, _ = optimizer.update(step, optimizer.init(params), params)
        assert float(params[ALPHA] + updates[ALPHA]) == expected
        np.testing.assert_allclose(updates["private_embedding"]["embedding"], -LR)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="alpha"):
        apfl.apfl(BASE, alpha=1.5)
    with pytest.raises(ValueError, match="alpha learning rate"):
        apfl.apfl(BASE, alpha_learning_rate=-1.0)
    with pytest.raises(ValueError, match="FURL"):
        apfl.apfl(TextClassifier(vocab_size=20, embed_dim=4, hidden=3, furl_dim=2))
