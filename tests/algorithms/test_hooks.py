"""The hooks' contract as the compiled round keeps it: a client that ran no step sends zeros
(never a nan from its empty data into the server's sum), a hook that returns something other
than its pair is named in the error, and a state that turns nan marks its client not finite."""

import re

import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.algorithms.base import Hooks
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.data.client_data import client_data


def _ones_per_step(end):
    """The message 1 per client, computed as steps / steps: nan where no step ran."""
    steps = end.steps.astype(jnp.float32)
    return (), steps / steps


def test_a_client_that_ran_no_step_sends_zeros(model, scene, rounds):
    hooks = Hooks(server_init=lambda params: jnp.zeros((), jnp.float32),
                  client_end=_ones_per_step,
                  server_update=lambda s: (s.params, s.reduce(s.messages, s.weights)))
    algorithm = fedavg(model, 0.1, 0.0)._replace(hooks=hooks)
    data = client_data(scene.train, local_vocab=True)
    empty = data._replace(mask=data.mask.at[1].set(False), counts=data.counts.at[1].set(0))
    state, _, metrics = rounds(algorithm, model, empty, 1, scene.num_clients)
    assert int(metrics.steps[1]) == 0 and int(metrics.steps[0]) > 0
    # sum_k w_k * 1 over the clients that trained: exactly their weights' sum, 1
    np.testing.assert_allclose(float(state.algorithm), 1.0, rtol=1e-6)
    assert np.isfinite(np.asarray(state.params["classifier"]["output"]["kernel"])).all()


@pytest.mark.parametrize("hook", ["client_end", "server_update"])
def test_a_hook_that_returns_no_pair_is_named(model, scene, rounds, hook):
    bad = {"client_end": Hooks(client_end=lambda end: end.params),
           "server_update": Hooks(server_update=lambda s: s.params)}[hook]
    algorithm = fedavg(model, 0.1, 0.0)._replace(hooks=bad)
    what = "(state, message)" if hook == "client_end" else "(params, state)"
    with pytest.raises(ValueError, match=re.escape(f"fedavg: Hooks.{hook} must return {what}, "
                                                   f"got a dict")):
        rounds(algorithm, model, client_data(scene.train, local_vocab=True), 1,
               scene.num_clients)


@pytest.mark.parametrize("hook", ["client_end", "server_update"])
def test_a_hook_whose_state_changes_shape_is_named_with_the_leaf(model, scene, rounds, hook):
    """A state returned with another shape than the one given (a sum over clients forgotten)
    fails when the round is traced, naming the hook and the leaf, not a round later in a
    broadcasting error."""
    if hook == "client_end":
        bad = Hooks(client_init=lambda params: {"c": jnp.zeros((3,), jnp.float32)},
                    client_end=lambda end: ({"c": jnp.zeros((2, 3), jnp.float32)}, ()))
        shapes = "float32[2, 3] where it was given float32[3]"
    else:
        bad = Hooks(server_init=lambda params: {"c": jnp.zeros((3,), jnp.float32)},
                    client_end=lambda end: ((), jnp.ones((3,), jnp.float32)),
                    server_update=lambda s: (s.params, {"c": s.messages}))
        shapes = f"float32[{scene.num_clients}, 3] where it was given float32[3]"
    algorithm = fedavg(model, 0.1, 0.0)._replace(hooks=bad)
    with pytest.raises(ValueError, match=re.escape(
            f"fedavg: Hooks.{hook} returned a state whose leaf ['c'] is {shapes}")):
        rounds(algorithm, model, client_data(scene.train, local_vocab=True), 1,
               scene.num_clients)


def test_the_communication_figures_trace_client_end_with_the_clients_data(model, scene):
    """The communication figures trace ``client_end`` before any round, with the shapes a
    client has in the round (its whole split in ``start.data``), and name a hook that returns
    other than its pair there too."""
    import jax

    from fedjax_sc.core import communication
    from fedjax_sc.core.round import init_states
    from fedjax_sc.models.text_classifier import init_params

    def per_class_counts(end):  # reads the client's data, as FedRoD's or q-FFL's hooks do
        return (), jnp.zeros((2,)).at[end.start.data.labels].add(end.start.data.mask)

    data = client_data(scene.train, local_vocab=True)
    params = init_params(model, jax.random.key(0))
    for hook, ok in ((per_class_counts, True), (lambda end: ((), (), ()), False)):
        algorithm = fedavg(model, 0.1, 0.0)._replace(hooks=Hooks(client_end=hook))
        state, clients = init_states(algorithm, params, scene.num_clients)
        if ok:
            comm = communication.account(algorithm, state, data, client_states=clients)
            assert comm.upload_dense_floats[0] > comm.download_floats[0]  # + the 2 counts
        else:
            with pytest.raises(ValueError, match=re.escape(
                    "fedavg: Hooks.client_end must return (state, message), got a tuple of 3")):
                communication.account(algorithm, state, data, client_states=clients)


def test_a_state_that_turns_nan_marks_the_client_not_finite(model, scene, rounds):
    """A client whose hook state goes nan is reported as the run's divergence check reads it
    (RoundMetrics.finite), as a nan in its params is; the others stay finite."""
    def client_end(end):
        poison = jnp.where(end.start.client == 0, jnp.nan, 0.0)
        return end.start.state + poison, ()

    hooks = Hooks(client_init=lambda params: jnp.zeros((), jnp.float32),
                  client_end=client_end)
    algorithm = fedavg(model, 0.1, 0.0)._replace(hooks=hooks)
    _, clients, metrics = rounds(algorithm, model, client_data(scene.train), 1,
                                 scene.num_clients)
    assert np.asarray(metrics.finite).tolist() == [False] + [True] * (scene.num_clients - 1)
    assert np.isnan(np.asarray(clients.algorithm)[0])


@pytest.mark.parametrize("local_vocab", [True, False])
def test_sent_is_the_upload_as_the_server_decodes_it(model, rounds, local_vocab):
    """``ClientEnd.sent`` is the client's update as decoded, upload noise included: with one
    client the server's new model is its upload, so the state that stores ``sent`` equals the
    model's change (on a table, zero on the rows the client does not upload)."""
    import chex
    import jax

    from fedjax_sc.algorithms.base import sent_update
    from fedjax_sc.algorithms.noise import gaussian_noise
    from fedjax_sc.algorithms.upload import chain
    from fedjax_sc.data.scenes import synthetic_scene
    from fedjax_sc.models.text_classifier import init_params
    one = synthetic_scene(num_clients=1, train_per_client=14, test_per_client=6, max_len=10,
                          seed=3)
    zeros = lambda params: jax.tree.map(jnp.zeros_like, params)
    hooks = Hooks(client_init=zeros, client_end=lambda end: (
        sent_update(end, end.start.state), ()))
    algorithm = fedavg(model, 0.1, 0.0)._replace(hooks=hooks)
    algorithm = algorithm._replace(upload=chain(algorithm.upload, gaussian_noise(0.05)))
    state, clients, _ = rounds(algorithm, model, client_data(one.train, local_vocab), 1, 1)
    change = jax.tree.map(jnp.subtract, state.params, init_params(model, jax.random.key(0)))
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[0], clients.algorithm), change,
                                atol=1e-6)
    table = np.asarray(change["embedding"]["embedding"])
    assert np.any(table == 0) == local_vocab  # rows the client does not hold stay unsent


def test_sent_update_picks_the_paths_of_like_and_falls_back_to_the_exact_update():
    """``sent_update``: ``sent``'s leaves at ``like``'s paths; without ``sent`` (the
    communication probe) the trained minus the start params at those paths."""
    from fedjax_sc.algorithms.base import ClientEnd, ClientStart, sent_update
    start = {"shared": {"w": jnp.ones(3)}, "private": {"v": jnp.zeros(2)}}
    trained = {"shared": {"w": jnp.full(3, 4.0)}, "private": {"v": jnp.ones(2)}}
    like = {"shared": {"w": jnp.zeros(3)}}
    end = ClientEnd(ClientStart(start), trained, jnp.int32(2))
    np.testing.assert_array_equal(sent_update(end, like)["shared"]["w"], np.full(3, 3.0))
    assert set(sent_update(end, like)) == {"shared"}
    sent = {"shared": {"w": jnp.full(3, 2.5)}}
    np.testing.assert_array_equal(sent_update(end._replace(sent=sent), like)["shared"]["w"],
                                  np.full(3, 2.5))


def test_the_download_counts_the_part_of_the_server_state_that_is_sent(model, scene):
    """Hooks.server_state_sent: False counts none of the server's state, True all of it, a
    function the part it returns (FedDC sends c and keeps H)."""
    import jax

    from fedjax_sc.core import communication
    from fedjax_sc.core.round import init_states
    from fedjax_sc.models.text_classifier import init_params

    data = client_data(scene.train, local_vocab=True)
    params = init_params(model, jax.random.key(0))
    server_init = lambda p: {"c": jnp.zeros(7), "H": jnp.zeros(100)}  # noqa: E731
    down = {}
    for name, sent in (("none", False), ("all", True), ("c", lambda s: s["c"])):
        algorithm = fedavg(model, 0.1, 0.0)._replace(
            hooks=Hooks(server_init=server_init, server_state_sent=sent))
        state, clients = init_states(algorithm, params, scene.num_clients)
        down[name] = communication.account(algorithm, state, data,
                                           client_states=clients).download_floats[0]
    assert (down["all"] - down["none"], down["c"] - down["none"]) == (107, 7)
