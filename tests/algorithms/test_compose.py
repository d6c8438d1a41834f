"""named_chain: several plug-ins that own state on one algorithm. A chain of one plug-in is
that plug-in; a chained plug-in that does nothing (MOON at mu = 0) leaves the other exactly as
it is alone; each part's loss term reads its own state; the server updates run in order."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import feddyn, moon, scaffold
from fedjax_sc.algorithms.base import Batch, ClientStart, Hooks, ServerInputs
from fedjax_sc.algorithms.compose import named_chain, part_state
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedprox import proximal
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

LR = 0.1


def _variates(n):
    return "scaffold", lambda a: scaffold.control_variates(a, LR, 0.9, n)


def test_a_chain_of_one_plugin_is_that_plugin(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    alone = rounds(_variates(scene.num_clients)[1](fedavg(model, LR, 0.9)), model, data, 2,
                   scene.num_clients)
    algorithm = named_chain(fedavg(model, LR, 0.9), _variates(scene.num_clients))
    assert algorithm.name == "fedavg+scaffold"
    chained = rounds(algorithm, model, data, 2, scene.num_clients)
    chex.assert_trees_all_close(chained[0].params, alone[0].params, atol=1e-6)
    chex.assert_trees_all_close(part_state(chained[0].algorithm, "scaffold"),
                                alone[0].algorithm, atol=1e-6)
    chex.assert_trees_all_close(part_state(chained[1].algorithm, "scaffold"),
                                alone[1].algorithm, atol=1e-6)


def test_moon_at_mu_zero_leaves_scaffold_as_it_is_alone(model, scene, rounds):
    """MOON's part keeps its state (each client's trained model), SCAFFOLD's its own: c is
    the mean of the c_i, and the run is SCAFFOLD's."""
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    algorithm = named_chain(moon.model_contrastive(fedavg(model, LR, 0.9), mu=0.0),
                            _variates(n), base_name="moon")
    state, clients, _ = rounds(algorithm, model, data, 2, n)
    alone = rounds(_variates(n)[1](fedavg(model, LR, 0.9)), model, data, 2, n)
    chex.assert_trees_all_close(state.params, alone[0].params, atol=1e-6)
    chex.assert_trees_all_close(state.algorithm["scaffold"], alone[0].algorithm, atol=1e-6)
    assert set(state.algorithm) == {"moon", "scaffold"}
    chex.assert_trees_all_close(state.algorithm["scaffold"], jax.tree.map(
        lambda x: x.mean(0), clients.algorithm["scaffold"]), atol=1e-6)
    _, has_previous = clients.algorithm["moon"]
    np.testing.assert_array_equal(np.asarray(has_previous), np.ones(n, np.float32))


@settings(deadline=None, max_examples=5)
@given(st.integers(0, 2**31 - 1), st.floats(0.1, 3.0))
def test_each_part_reads_its_own_state(model, seed, mu):
    """The chained loss is MOON's on MOON's state, its gradient MOON's plus SCAFFOLD's
    correction c - c_i on SCAFFOLD's (Karimireddy et al. 2020, Alg. 1 line 10)."""
    rng = np.random.default_rng(seed)
    params = init_params(model, jax.random.key(seed % 1000))
    noise = lambda: jax.tree.map(lambda x: jnp.asarray(rng.normal(size=x.shape) * 0.1,
                                                       x.dtype), params)
    c, ci, previous = noise(), noise(), jax.tree.map(jnp.add, params, noise())
    batch = Batch(jnp.asarray(rng.integers(1, model.vocab_size, (3, 5)), jnp.int32),
                  jnp.asarray([0, 1, 1], jnp.int32), jnp.ones(3, bool))
    moon_alone = moon.model_contrastive(fedavg(model, LR, 0.9), mu=mu)
    chained = named_chain(moon_alone, _variates(3), ("prox", lambda a: proximal(a, 0.0)),
                          base_name="moon")
    own = (previous, jnp.ones((), jnp.float32))
    grad = lambda loss, start: jax.value_and_grad(loss, has_aux=True)(
        params, batch, jax.random.key(0), start)
    (value, aux), got = grad(chained.client_loss, ClientStart(
        params, state={"moon": own, "scaffold": ci}, server={"moon": (), "scaffold": c}))
    (want_value, want_aux), want = grad(moon_alone.client_loss,
                                        ClientStart(params, state=own))
    assert float(value) == pytest.approx(float(want_value), rel=1e-5)
    assert float(aux["contrastive"]) == pytest.approx(float(want_aux["contrastive"]), rel=1e-5)
    chex.assert_trees_all_close(got, jax.tree.map(lambda g, a, b: g + a - b, want, c, ci),
                                atol=1e-5)


def _adding(amount, metric=None, sent=False):
    """A plug-in whose server adds ``amount`` to every param and counts its rounds."""
    def plugin(algorithm):
        def update(s: ServerInputs):
            return jax.tree.map(lambda p: p + amount, s.params), s.state + 1.0
        return algorithm._replace(hooks=Hooks(
            server_init=lambda params: jnp.zeros((), jnp.float32), server_update=update,
            server_metrics=None if metric is None else (lambda st: {metric: st * 2.0}),
            server_state_sent=sent))
    return plugin


def test_the_server_updates_run_in_order_each_on_its_own_state(model):
    doubling = lambda a: a._replace(hooks=Hooks(server_update=lambda s: (
        jax.tree.map(lambda p: p * 2.0, s.params), s.state)))
    algorithm = named_chain(fedavg(model), ("add", _adding(1.0, "rounds", sent=True)),
                            ("double", doubling), ("add_more", _adding(3.0)))
    params = {"w": jnp.ones((2,), jnp.float32)}
    hooks = algorithm.hooks
    state = hooks.server_init(params)
    assert state == {"add": 0.0, "double": (), "add_more": 0.0}
    inputs = ServerInputs(params, params, state, {"add": (), "double": (), "add_more": ()},
                          jnp.ones(1), jnp.ones(1, bool), lambda t, w: t)
    new, new_state = hooks.server_update(inputs)
    np.testing.assert_allclose(new["w"], (1.0 + 1.0) * 2.0 + 3.0)
    assert new_state == {"add": 1.0, "double": (), "add_more": 1.0}
    assert hooks.server_metrics(new_state) == {"add_rounds": 2.0}
    assert hooks.server_state_sent(new_state) == {"add": 1.0}  # the others stay on the server
    assert hooks.client_end is None and hooks.upload_sent


def test_a_stateless_plugin_adds_no_part(model):
    algorithm = named_chain(fedavg(model), ("prox", lambda a: proximal(a, 0.1)))
    assert algorithm.hooks == Hooks()


def test_refusals():
    model = None
    with pytest.raises(ValueError, match="at least one"):
        named_chain(fedavg(model))
    with pytest.raises(ValueError, match="two parts named 'a'"):
        named_chain(fedavg(model), ("a", _adding(1.0)), ("a", _adding(2.0)))
    with pytest.raises(ValueError, match="non-empty string"):
        named_chain(fedavg(model), ("", _adding(1.0)))
    with pytest.raises(KeyError, match=re.escape("no part 'b' in the chained state; parts: "
                                                 "['a']")):
        part_state({"a": 1}, "b")


@pytest.mark.parametrize("plugin", [
    lambda a: scaffold.control_variates(a, LR, 0.9, 3),
    lambda a: feddyn.dynamic_regularizer(a, 3, 0.01),
    lambda a: moon.model_contrastive(a, 1.0)])
def test_a_stateful_plugin_on_a_stateful_algorithm_points_to_the_chain(model, plugin):
    stateful = scaffold.control_variates(fedavg(model, LR, 0.9), LR, 0.9, 3)
    with pytest.raises(ValueError, match=re.escape("compose.named_chain")):
        plugin(stateful)


def test_a_chain_whose_parts_send_no_messages_runs(model, scene, rounds):
    """FedBABU's hooks are a server update alone: the round hands the server no messages."""
    from fedjax_sc.algorithms.fedbabu import fedbabu
    data = client_data(scene.train, local_vocab=True)
    chained = rounds(named_chain(fedbabu(model, LR, 0.9), ("prox", lambda a: proximal(a, 0.1))),
                     model, data, 1, scene.num_clients)
    alone = rounds(proximal(fedbabu(model, LR, 0.9), 0.1), model, data, 1, scene.num_clients)
    chex.assert_trees_all_close(chained[0].params, alone[0].params, atol=1e-6)


def test_a_plugin_without_an_ap_loss_keeps_the_one_below(model):
    """Alone, SCAFFOLD keeps its base's personal_loss (the Ap phase without the correction);
    chained, it does too."""
    rng = np.random.default_rng(0)
    params = init_params(model, jax.random.key(0))
    c = jax.tree.map(lambda x: jnp.ones(x.shape, x.dtype), params)
    zero = jax.tree.map(jnp.zeros_like, params)
    batch = Batch(jnp.asarray(rng.integers(1, model.vocab_size, (3, 5)), jnp.int32),
                  jnp.asarray([0, 1, 1], jnp.int32), jnp.ones(3, bool))
    base = fedavg(model, LR, 0.9)
    base = base._replace(personal_loss=base.client_loss)
    alone = _variates(3)[1](base)
    chained = named_chain(base, _variates(3))
    grad = lambda loss, start: jax.grad(lambda p: loss(p, batch, jax.random.key(0), start)[0])(
        params)
    want = grad(alone.personal_loss, ClientStart(params, state=zero, server=c))
    got = grad(chained.personal_loss, ClientStart(params, state={"scaffold": zero},
                                                  server={"scaffold": c}))
    chex.assert_trees_all_close(got, want, atol=1e-6)
    chex.assert_trees_all_close(got, grad(base.client_loss, ClientStart(params)), atol=1e-6)


def test_the_first_stateful_plugin_keeps_the_shared_forward_pass(model):
    """MOON over FedAvg's cross-entropy computes the features once for both terms; chained as
    the first part with state it still does (the same number of scans in the program)."""
    params = init_params(model, jax.random.key(0))
    batch = Batch(jnp.ones((2, 4), jnp.int32), jnp.asarray([0, 1], jnp.int32),
                  jnp.ones(2, bool))
    own = (params, jnp.ones((), jnp.float32))
    plugin = lambda a: moon.model_contrastive(a, 1.0)
    scans = lambda loss, start: str(jax.make_jaxpr(jax.grad(
        lambda p: loss(p, batch, jax.random.key(0), start)[0]))(params)).count("scan[")
    alone = scans(plugin(fedavg(model)).client_loss, ClientStart(params, state=own))
    chained = scans(named_chain(fedavg(model), ("moon", plugin)).client_loss,
                    ClientStart(params, state={"moon": own}, server={"moon": ()}))
    assert chained == alone


def test_server_metrics_of_two_parts_that_would_share_a_name_are_refused(model):
    algorithm = named_chain(fedavg(model), ("a_b", _adding(1.0, "c")), ("a", _adding(1.0, "b_c")))
    with pytest.raises(ValueError, match="two server metrics named a_b_c"):
        algorithm.hooks.server_metrics({"a_b": 1.0, "a": 1.0})


def test_the_example_builds_moon_beside_scaffold(model):
    """examples/moon_scaffold.py, the guide's snippet: its states by part, from the CLI's
    build context."""
    from pathlib import Path

    from fedjax_sc.algorithms import context
    from fedjax_sc.core.round import init_states
    example = Path(__file__).resolve().parents[2] / "examples" / "moon_scaffold.py"
    build = context.load(f"{example}:moon_scaffold")
    algorithm = build(context.BuildContext(
        vocab_size=model.vocab_size, num_classes=2, embed_dim=model.embed_dim,
        hidden=model.hidden, mlp_hidden=model.mlp_hidden, furl_dim=0, dtype="float32",
        num_clients=3, learning_rate=LR, momentum=0.9, options=context.ReadOptions({})))
    state, clients = init_states(algorithm, init_params(algorithm.model, jax.random.key(0)), 3)
    assert set(state.algorithm) == set(clients.algorithm) == {"moon", "scaffold"}
    assert algorithm.name == "moon+scaffold"
