"""MOON on the algorithm hooks: the term is zero in a client's first round and with mu = 0
(FedAvg exactly), the client's state is the model it trained, the contrastive loss's closed
form, and training by local-vocabulary rows equals the dense table."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import losses, moon
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.data.client_data import client_data

LR = 0.1


def test_the_first_round_and_mu_zero_are_fedavg(model, scene, rounds):
    """No previous model in round 1: the term is 0 for any mu; mu = 0 is FedAvg every round."""
    data = client_data(scene.train, local_vocab=True)
    plain = fedavg(model, LR, 0.9)
    first = rounds(moon.model_contrastive(plain, mu=5.0), model, data, 1, scene.num_clients)
    chex.assert_trees_all_close(first[0].params,
                                rounds(plain, model, data, 1, scene.num_clients)[0].params,
                                atol=1e-6)
    zero = rounds(moon.model_contrastive(plain, mu=0.0), model, data, 3, scene.num_clients)
    chex.assert_trees_all_close(zero[0].params,
                                rounds(plain, model, data, 3, scene.num_clients)[0].params,
                                atol=1e-6)


def test_the_state_is_the_model_the_client_trained_and_the_term_acts(model, scene, rounds):
    """After a round each client's previous model is its trained model (one client: the new
    global model), and from round 2 on the term moves the training."""
    data = client_data(scene.train, local_vocab=True)
    one = jax.tree.map(lambda x: x[:1], data)
    algorithm = moon.model_contrastive(fedavg(model, LR, 0.9), mu=5.0)
    state, clients, metrics = rounds(algorithm, model, one, 1, 1)
    previous, has_previous = jax.tree.map(lambda x: x[0], clients.algorithm)
    chex.assert_trees_all_close(previous, state.params, atol=1e-6)
    assert float(has_previous) == 1.0
    moved = rounds(algorithm, model, data, 2, scene.num_clients)[0].params
    plain = rounds(fedavg(model, LR, 0.9), model, data, 2, scene.num_clients)[0].params
    assert max(float(jnp.max(jnp.abs(a - b))) for a, b in
               zip(jax.tree.leaves(moved), jax.tree.leaves(plain))) > 1e-6


def test_local_vocabulary_training_is_exact(model, scene, rounds):
    algorithm = moon.model_contrastive(fedavg(model, LR, 0.0), mu=1.0)
    dense = rounds(algorithm, model, client_data(scene.train, local_vocab=False), 3,
                 scene.num_clients)
    rows = rounds(algorithm, model, client_data(scene.train, local_vocab=True), 3,
                scene.num_clients)
    chex.assert_trees_all_close(rows[0].params, dense[0].params, atol=2e-5)


@settings(deadline=None, max_examples=20)
@given(st.integers(1, 6), st.integers(2, 5), st.floats(0.1, 2.0), st.integers(0, 2**31 - 1))
def test_the_contrastive_loss_is_eq_1(batch, dim, temperature, seed):
    """l_con = -log softmax([cos(z, z_glob), cos(z, z_prev)] / tau)[0], over real examples;
    z = z_glob and z_prev = -z gives log(1 + exp(-2 / tau)); no previous model gives 0."""
    rng = np.random.default_rng(seed)
    z, g, p = rng.normal(size=(3, batch, dim)).astype(np.float32)
    mask = rng.random(batch) < 0.7
    mask[0] = True  # at least one real example; the padding rows must not count
    cos = lambda a, b: np.sum(a * b, -1) / (np.linalg.norm(a, axis=-1) *
                                            np.linalg.norm(b, axis=-1))
    logits = np.stack([cos(z, g), cos(z, p)], -1) / temperature
    expected = np.mean((np.log(np.exp(logits).sum(-1)) - logits[:, 0])[mask])
    got = losses.contrastive_loss(z, g, p, mask, temperature, jnp.float32(1))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(losses.contrastive_loss(z, z, -z, np.ones(batch, bool),
                                                     temperature, 1.0),
                               np.log1p(np.exp(-2 / temperature)), rtol=1e-4, atol=2e-6)
    assert float(losses.contrastive_loss(z, g, p, mask, temperature, jnp.float32(0))) == 0.0


def test_the_loss_adds_mu_times_the_term_on_its_three_models(model):
    """The loss wires Eq. 1 to the right models: the local model's features against the
    downloaded global model's (positive) and the client's previous model's (negative), both
    frozen; value, aux and gradient are CE + mu l_con, on a batch with a padding row."""
    from fedjax_sc.algorithms.base import Batch, ClientStart
    from fedjax_sc.models.text_classifier import init_params
    mu, tau = 0.7, 0.5
    local, start, previous = (init_params(model, jax.random.key(s)) for s in (1, 2, 3))
    rng = np.random.default_rng(0)
    batch = Batch(jnp.asarray(rng.integers(1, model.vocab_size, (4, 6)), jnp.int32),
                  jnp.asarray([0, 1, 1, 0], jnp.int32), jnp.asarray([True, True, True, False]))
    features = lambda p: model.apply({"params": p}, batch.tokens, method=model.features)
    algorithm = moon.model_contrastive(fedavg(model, LR, 0.9), mu=mu, temperature=tau)
    state = (previous, jnp.float32(1))
    # compiled: one program each, not the BiGRU's operations one by one
    (value, aux), grad = jax.jit(jax.value_and_grad(algorithm.client_loss, has_aux=True))(
        local, batch, jax.random.key(0), ClientStart(start, state=state))
    base = fedavg(model, LR, 0.9).client_loss
    (plain, _), plain_grad = jax.jit(jax.value_and_grad(base, has_aux=True))(
        local, batch, jax.random.key(0), ClientStart(start))
    term = jax.jit(lambda p: losses.contrastive_loss(features(p), features(start),
                                                     features(previous), batch.mask, tau,
                                                     jnp.float32(1)))
    assert float(aux["contrastive"]) == pytest.approx(float(term(local)), rel=1e-5)
    assert float(value) == pytest.approx(float(plain + mu * term(local)), rel=1e-5)
    chex.assert_trees_all_close(grad, jax.tree.map(lambda a, b: a + mu * b, plain_grad,
                                                   jax.jit(jax.grad(term))(local)), atol=1e-5)
    # the previous model equal to the global one: both cosines equal, l_con = log 2
    same = jax.jit(algorithm.client_loss)(local, batch, jax.random.key(0),
                                          ClientStart(start, state=(start, jnp.float32(1))))[1]
    assert float(same["contrastive"]) == pytest.approx(np.log(2.0), rel=1e-5)


def test_bad_settings_are_refused(model):
    with pytest.raises(ValueError, match="mu"):
        moon.moon(model, mu=-1.0)
    with pytest.raises(ValueError, match="temperature"):
        moon.moon(model, temperature=0.0)


def test_the_local_model_runs_once_a_step(model):
    """The term reads the cross-entropy's features: a step's gradient holds FedAvg's
    recurrences plus one forward pass for each frozen model (the global and the previous)."""
    from fedjax_sc.algorithms.base import Batch, ClientStart
    from fedjax_sc.models.text_classifier import init_params
    params = init_params(model, jax.random.key(0))
    batch = Batch(jnp.ones((2, 5), jnp.int32), jnp.array([0, 1]), jnp.ones(2, bool))

    def scans(algorithm, state=()):
        start = ClientStart(params, state=state)
        grad = jax.grad(lambda p: algorithm.client_loss(p, batch, jax.random.key(0), start)[0])
        return str(jax.make_jaxpr(grad)(params)).count("scan[")

    contrastive = moon.moon(model)
    plain = scans(fedavg(model))  # the forward pass's recurrence and its backward one
    forward = plain // 2
    assert scans(contrastive, contrastive.hooks.client_init(params)) == plain + 2 * forward
