"""Ditto as a model pair: both copies start alike, the global copy trains as FedAvg and the
personal copy never leaves its client, lambda = 0 is Indiv, one SGD step is Eq. 2's, and Ap /
Ag read the personal / global copy."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import ditto
from fedjax_sc.algorithms.base import Batch, ClientStart
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.losses import cross_entropy
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.personal_copy import PersonalCopy, parts
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import init_params

LR = 0.1


def _run(algorithm, params, data, rounds, n):
    state, clients = rnd.init_states(algorithm, params, n)
    step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, _ = step(state, clients, data, jax.random.key(1))
    return state, clients


@pytest.fixture(scope="module")
def pair_params(model):
    return init_params(PersonalCopy(model), jax.random.key(0))


def test_both_copies_start_alike_with_a_pretrained_table(model):
    table = np.random.default_rng(0).normal(size=(model.vocab_size, model.embed_dim))
    w, v, _ = parts(init_params(PersonalCopy(model), jax.random.key(0), table))
    chex.assert_trees_all_equal(w, v)
    np.testing.assert_array_equal(v["embedding"]["embedding"], table.astype(np.float32))


def test_the_global_copy_is_fedavg_and_the_personal_copy_stays(model, scene, pair_params):
    data = client_data(scene.train, local_vocab=True)
    n, w0 = scene.num_clients, parts(pair_params)[0]
    state, clients = _run(ditto.ditto(model, LR, 0.9, lam=0.5), pair_params, data, 2, n)
    chex.assert_trees_all_close(state.params, _run(fedavg(model, LR, 0.9), w0, data, 2,
                                                   n)[0].params, atol=1e-6)
    assert all(k.startswith("private_") for k in clients.private)
    w, v, _ = parts(clients.private)
    assert not w and set(v) == set(state.params)
    table = np.asarray(v["classifier"]["output"]["kernel"])
    assert np.abs(table[0] - table[1]).max() > 1e-6  # each client's own model


def test_lambda_zero_is_each_client_alone(model, scene, pair_params):
    data, n = client_data(scene.train, local_vocab=True), scene.num_clients
    personal = parts(_run(ditto.ditto(model, LR, 0.9, lam=0.0), pair_params, data, 2,
                                n)[1].private)[1]
    alone = _run(indiv(model, LR, 0.9), parts(pair_params)[1], data, 2, n)[1].private
    chex.assert_trees_all_close(personal, alone, atol=1e-6)


@settings(deadline=None, max_examples=15)
@given(st.floats(0.0, 3.0), st.integers(0, 2**31 - 1))
def test_one_sgd_step_is_eq_2(model, pair_params, lam, seed):
    """From v != w^t: v <- v - eta (grad F_k(v) + lambda (v - w^t)), w <- w - eta grad F_k(w)."""
    rng = np.random.default_rng(seed)
    batch = Batch(jnp.asarray(rng.integers(1, model.vocab_size, (3, 5)), jnp.int32),
                  jnp.asarray(rng.integers(0, 2, 3), jnp.int32), jnp.ones(3, bool))
    noise = lambda x: x + 0.1 * rng.normal(size=x.shape).astype(np.float32)
    params = {**pair_params, **{k: jax.tree.map(noise, x) for k, x in pair_params.items()
                                if k.startswith("private_")}}
    got = _step(model, jnp.float32(lam), params, pair_params, batch)
    ce = lambda p: _ce_grad(model, p, batch)
    (w, v, _), (w0, _, _) = parts(params), parts(pair_params)
    want_v = jax.tree.map(lambda p, g, a: p - LR * (g + lam * (p - a)), v, ce(v), w0)
    want_w = jax.tree.map(lambda p, g: p - LR * g, w, ce(w))
    chex.assert_trees_all_close(parts(got)[:2], (want_w, want_v), atol=1e-5, rtol=1e-5)


@functools.partial(jax.jit, static_argnums=0)
def _ce_grad(model, params, batch):
    return jax.grad(lambda p: cross_entropy(model)(p, batch, None, None)[0])(params)


@functools.partial(jax.jit, static_argnums=0)
def _step(model, lam, params, start, batch):
    """One client SGD step of Ditto's loss, lambda traced (as in a population)."""
    algorithm = ditto.ditto(model, LR, 0.0, lam=lam)
    grads, _ = jax.grad(algorithm.client_loss, has_aux=True)(
        params, batch, jax.random.key(0), ClientStart(start))
    updates, _ = algorithm.client_optimizer.update(
        grads, algorithm.client_optimizer.init(params), params)
    return optax.apply_updates(params, updates)


def test_ap_reads_the_personal_copy_and_ag_the_global_one(model, pair_params):
    params = dict(pair_params, private_classifier=jax.tree.map(
        lambda x: x + 1.0, pair_params["private_classifier"]))
    algorithm, plain = ditto.ditto(model), fedavg(model)
    tokens = jnp.asarray([[3, 4, 5, 0], [6, 7, 0, 0]], jnp.int32)
    w, v, _ = parts(params)
    chex.assert_trees_all_close(algorithm.predict(params, tokens), plain.predict(v, tokens))
    chex.assert_trees_all_close(algorithm.global_predict(w, tokens),
                                plain.global_predict(w, tokens))
    chex.assert_trees_all_close(algorithm.model.apply({"params": params}, tokens),
                                model.apply({"params": v}, tokens))


def test_checks_its_settings(model):
    with pytest.raises(ValueError, match="lambda"):
        ditto.ditto(model, lam=-0.1)
    two = PrivateSharedClassifier(vocab_size=20, embed_dim=4, hidden=2, mlp_hidden=3)
    with pytest.raises(ValueError, match="one-branch"):
        init_params(ditto.ditto(two).model, jax.random.key(0))
