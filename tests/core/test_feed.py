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
    feed = ClientFeed(data, _private(n), sharding.client_mesh(jax.devices()[:1]), 2, seed=1)
    start = _private(n)["head"]["w"]
    idx = feed.sample(1)
    _, private = feed.inputs(idx)
    feed.update(idx, jax.tree.map(lambda x: x + 100, private))
    after = np.asarray(feed.private["head"]["w"])
    np.testing.assert_array_equal(after[idx], start[idx] + 100)
    rest = np.setdiff1d(np.arange(n), idx)
    np.testing.assert_array_equal(after[rest], start[rest])
    np.testing.assert_array_equal(start, _private(n)["head"]["w"])  # the input is not written


def test_feed_errors():
    data = _host()
    mesh = sharding.client_mesh(jax.devices()[:1])
    with pytest.raises(ValueError, match="cannot sample 6 of 5"):
        ClientFeed(data, _private(5), mesh, 6)
    with pytest.raises(ValueError, match="unknown sampling"):
        ClientFeed(data, _private(5), mesh, 2, sampling="nearest")
    with pytest.raises(ValueError, match="2 members need a member axis"):
        PopulationFeed(data, _private(5), mesh, [0, 1], member_axis=False)
