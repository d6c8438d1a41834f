"""The client feed: a one-run ClientFeed is a PopulationFeed's member without the member axis."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from fedjax_sc.core import sharding
from fedjax_sc.core.feed import ClientFeed, PopulationFeed
from fedjax_sc.data.client_data import host_client_data
from fedjax_sc.data.scenes import synthetic_scene


def _host(n: int = 5):
    scene = synthetic_scene(num_clients=n, train_per_client=6, test_per_client=2, max_len=6,
                            seed=3)
    return host_client_data(scene.train, local_vocab=True)


def _private(n: int, offset: float = 0.0):
    return {"head": {"w": np.arange(n * 3, dtype=np.float32).reshape(n, 3) + offset}}


@pytest.mark.parametrize("sampled", [None, 2])
def test_client_feed_is_one_member_of_a_population_feed(sampled):
    data, n = _host(), 5
    one = ClientFeed(data, _private(n), sharding.client_mesh(jax.devices()[:1]), sampled,
                     seed=4)
    pop = PopulationFeed(data, jax.tree.map(lambda x: np.stack([x, -x]), _private(n)),
                         sharding.population_mesh(2, (1, 1), jax.devices()[:1]), [4, 7],
                         sampled)
    assert one.round_size == pop.round_size == (sampled or n)
    for r in (1, 2, 3):
        idx, idxs = one.sample(r), pop.sample(r)
        np.testing.assert_array_equal(idx, idxs[0])
        d1, p1 = one.inputs(idx)
        d2, p2 = pop.inputs(idxs)
        lead = (lambda x: x[0]) if sampled else (lambda x: x)  # sampled: data per member
        for x, y in zip(jax.tree.leaves(d1), jax.tree.leaves(d2)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(lead(y)))
        np.testing.assert_array_equal(np.asarray(p1["head"]["w"]),
                                      np.asarray(p2["head"]["w"][0]))
        one.update(idx, jax.tree.map(lambda x: x + r, p1))
        pop.update(idxs, jax.tree.map(lambda x: x + r, p2), [True, False])
    np.testing.assert_array_equal(np.asarray(one.private["head"]["w"]),
                                  np.asarray(pop.member_private(0)["head"]["w"]))
    if sampled:  # on the host, a member that is not kept holds its start leaves (resident:
        # its rows are overwritten, a diverged member is never read again)
        np.testing.assert_array_equal(np.asarray(pop.member_private(1)["head"]["w"]),
                                      -_private(n)["head"]["w"])


def test_sampled_feed_changes_only_the_sampled_clients_rows():
    data, n = _host(), 5
    given = _private(n)
    feed = ClientFeed(data, given, sharding.client_mesh(jax.devices()[:1]), 2, seed=1)
    start = _private(n)["head"]["w"]
    idx = feed.sample(1)
    _, private = feed.inputs(idx)
    feed.update(idx, jax.tree.map(lambda x: x + 100, private))
    after = np.asarray(feed.private["head"]["w"])
    np.testing.assert_array_equal(after[idx], start[idx] + 100)
    rest = np.setdiff1d(np.arange(n), idx)
    np.testing.assert_array_equal(after[rest], start[rest])
    np.testing.assert_array_equal(given["head"]["w"], start)  # the input is not written
    # later rounds write the feed's own copy in place: the host holds the states once
    idx2 = feed.sample(2)
    _, private = feed.inputs(idx2)
    feed.update(idx2, jax.tree.map(lambda x: x + 1000, private))
    expected = start.copy()
    expected[idx] += 100
    expected[idx2] += 1000
    assert feed.private["head"]["w"] is after
    np.testing.assert_array_equal(after, expected)
    np.testing.assert_array_equal(given["head"]["w"], start)


def test_feed_errors():
    data = _host()
    mesh = sharding.client_mesh(jax.devices()[:1])
    with pytest.raises(ValueError, match="cannot sample 6 of 5"):
        ClientFeed(data, _private(5), mesh, 6)
    with pytest.raises(ValueError, match="unknown sampling"):
        ClientFeed(data, _private(5), mesh, 2, sampling="nearest")
    with pytest.raises(ValueError, match="2 members need a member axis"):
        PopulationFeed(data, _private(5), mesh, [0, 1], member_axis=False)


def test_bucket_ladder_bounds_the_padded_shapes():
    from fedjax_sc.core import participation as pt
    assert pt.example_ladder(100) == [1, 2, 4, 8, 16, 32, 64, 100]
    assert pt.example_ladder(1) == [1]
    assert [pt.example_bucket(n, 100) for n in (0, 1, 2, 3, 64, 65, 100)] == [
        1, 1, 2, 4, 64, 100, 100]
    assert {pt.example_bucket(n, 100) for n in range(101)} == set(pt.example_ladder(100))
    counts = np.asarray([1, 3, 0])
    assert [pt.padded_examples(counts, 100, p) for p in pt.PADDINGS] == [4, 3, 100]
    with pytest.raises(ValueError, match="unknown padding"):
        pt.padded_examples(counts, 100, "tight")


@pytest.mark.parametrize("algorithm", ["fedper", "scaffold"])
def test_padding_to_the_sampled_clients_gives_the_global_padding_params(algorithm):
    """Private leaves (FedPer) and the algorithm's client state (SCAFFOLD) gathered and
    scattered, clients of 1..12 examples: every padding trains the same model (the padded
    steps are masked no-ops), up to float32 rounding: XLA may fuse the programs of other
    shapes differently (1 ulp of the parameters; SCAFFOLD's c_i, a difference of nearly equal
    parameters over K eta, moves by that ulp over K eta: 2e-9 to 2.2e-8 absolute seen, so its
    state is held to 1e-6, far below the 0.1-0.4 of the entries a wrong mask would move)."""
    from fedjax_sc.core import round as rnd
    from fedjax_sc.core.feed import CompiledRounds
    from fedjax_sc.data.scenes import build_scene
    from fedjax_sc.data.synthetic import synthetic_corpora
    from fedjax_sc.models.text_classifier import init_params
    from fedjax_sc.run.registry import build_algorithm

    sizes = [1, 1, 2, 1, 12, 1, 3, 1]
    scene = build_scene("synthetic", synthetic_corpora(
        num_clients=8, test_per_client=1, max_len=6, seed=1, train_sizes=sizes), 2, 6, 60)
    host = host_client_data(scene.train)
    alg = build_algorithm(algorithm, vocab_size=len(scene.vocab), num_classes=2, embed_dim=4,
                          num_clients=8, hidden=3, mlp_hidden=4)
    model = alg.model
    step = CompiledRounds(jax.jit(rnd.build_round(alg, batch_size=2, local_epochs=2)))
    out, widths = {}, {}
    for padding in ("global", "sampled", "bucket"):
        state, clients = rnd.init_states(alg, init_params(model, jax.random.key(0)), 8)
        feed = ClientFeed(host, clients, sharding.client_mesh(jax.devices()[:1]), 3, seed=5,
                          padding=padding)
        widths[padding] = []
        for r in range(1, 5):
            idx = feed.sample(r)
            data, states = feed.inputs(idx)
            widths[padding].append(int(data.mask.shape[1]))
            state, new, _ = step(state, states, data, jax.random.key(r))
            feed.update(idx, new)
        out[padding] = jax.device_get((state.params, feed.private))
    assert set(widths["global"]) == {12} and min(widths["bucket"]) < 12
    assert all(b >= s for b, s in zip(widths["bucket"], widths["sampled"]))
    for padding in ("sampled", "bucket"):
        state_atol = 1e-6 if algorithm == "scaffold" else 1e-8  # c_i, or private leaves
        for part, atol in ((0, 1e-8), (1, state_atol)):  # the parameters, the clients' part
            for x, y in zip(jax.tree.leaves(out["global"][part]),
                            jax.tree.leaves(out[padding][part])):
                np.testing.assert_allclose(x, y, rtol=1e-6, atol=atol)
    assert len(step.programs) == len(set(widths["global"] + widths["sampled"]
                                         + widths["bucket"]))


def test_round_0_views_become_c_contiguous_states_on_the_first_update():
    # np.array of a stride-0 view keeps its memory order ("K"): the client axis would be the
    # innermost one, every client's rows scattered and every checkpoint digest a copy
    from fedjax_sc.core import participation
    data, n = _host(), 5
    one = {"head": {"w": np.arange(2 * 3, dtype=np.float32).reshape(2, 3)}}
    views = participation.broadcast_clients(jax.tree.map(lambda x: x[None], one), n, axis=1,
                                            host=True)  # [P = 1, N, 2, 3]
    feed = PopulationFeed(data, views, sharding.population_mesh(1, (1, 1), jax.devices()[:1]),
                          [1], 2)
    idxs = feed.sample(1)
    _, private = feed.inputs(idxs)
    feed.update(idxs, private, [True])
    w = feed.private["head"]["w"]
    assert w.flags.c_contiguous and feed.member_private(0)["head"]["w"].flags.c_contiguous
    np.testing.assert_array_equal(w[0], np.broadcast_to(one["head"]["w"], (n, 2, 3)))


def test_a_feed_given_its_states_writes_them_in_place():
    data, n = _host(), 5
    given = _private(n)
    feed = PopulationFeed(data, given, sharding.client_mesh(jax.devices()[:1]), [1], 2,
                          member_axis=False, own=True)  # as the training loop's
    idx = feed.sample(1)[0]
    _, private = feed.inputs([idx])
    feed.update([idx], jax.tree.map(lambda x: x + 100, private), [True])
    assert feed.private["head"]["w"] is given["head"]["w"]
    np.testing.assert_array_equal(given["head"]["w"][idx], _private(n)["head"]["w"][idx] + 100)


def test_size_sampling_weighs_the_sampled_clients_by_their_draws_and_others_by_one():
    """inputs() of the clients sample() gave weighs each by its draws (a client drawn twice
    trains once, weight 2), padded to M slots; other clients get one draw each."""
    from fedjax_sc.core import participation
    data, n = _host(), 5
    feed = ClientFeed(data, _private(n), sharding.client_mesh(jax.devices()[:1]), 4,
                      sampling="size", seed=0)
    for r in range(1, 20):  # a round that draws a client more than once
        idx = feed.sample(r)
        _, draws = participation.distinct(participation.sample_clients(
            0, r, data.counts, 4, "size"))
        if len(idx) < 4:
            break
    got, _ = feed.inputs(idx)
    weights = np.asarray(got.weights)
    assert weights.shape == (4,) and weights[:len(idx)].tolist() == draws.tolist()
    assert weights.sum() == 4 and (weights[len(idx):] == 0).all()  # padding slots
    other = np.setdiff1d(np.arange(n), idx)[:2]
    got, _ = feed.inputs(other)
    assert np.asarray(got.weights)[:len(other)].tolist() == [1.0] * len(other)
