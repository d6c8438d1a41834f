"""Partial participation: sampling, gather/scatter of private state, sampled training runs."""

from __future__ import annotations

import json

import chex
import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.core import participation as pt
from fedjax_sc.run.train import TrainConfig, train


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 50), seed=st.integers(0, 5), r=st.integers(0, 100),
       size=st.booleans(), data=st.data())
def test_sampling_without_replacement(n, seed, r, size, data):
    m = data.draw(st.integers(1, n))
    counts = np.arange(1, n + 1)
    idx = pt.sample_clients(seed, r, counts, m, "size" if size else "uniform")
    assert len(idx) == m == len(set(idx.tolist()))
    assert np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < n
    again = pt.sample_clients(seed, r, counts, m, "size" if size else "uniform")
    np.testing.assert_array_equal(idx, again)  # a pure function of (seed, round)


def test_rounds_differ_and_size_sampling_prefers_large_clients():
    counts = np.asarray([1] * 10 + [100] * 10)
    picks = np.concatenate([pt.sample_clients(0, r, counts, 5, "size") for r in range(200)])
    big = np.isin(picks, np.arange(10, 20)).mean()
    assert big > 0.9
    uniform = np.concatenate([pt.sample_clients(0, r, counts, 5) for r in range(200)])
    assert 0.4 < np.isin(uniform, np.arange(10, 20)).mean() < 0.6
    assert not np.array_equal(pt.sample_clients(0, 1, counts, 5),
                              pt.sample_clients(0, 2, counts, 5))
    with pytest.raises(ValueError, match="cannot sample"):
        pt.sample_clients(0, 1, counts, 21)
    with pytest.raises(ValueError, match="have data"):
        pt.sample_clients(0, 1, np.asarray([0, 0, 3]), 2, "size")
    np.testing.assert_array_equal(pt.aggregation_weights(np.asarray([3, 0]), "size"), [1, 0])


@settings(max_examples=30, deadline=None)
@given(n=st.integers(1, 12), seed=st.integers(0, 9), data=st.data())
def test_gather_scatter_round_trip(n, seed, data):
    rng = np.random.default_rng(seed)
    tree = {"a": rng.normal(size=(n, 3)), "b": {"c": rng.integers(0, 9, size=(n,))}}
    idx = np.sort(rng.choice(n, size=data.draw(st.integers(1, n)), replace=False))
    chex.assert_trees_all_equal(pt.scatter(tree, idx, pt.gather(tree, idx)), tree)
    new = jax.tree.map(lambda x: x[idx] + 1, tree)
    padded, real = pt.pad_clients(new, 4)  # rows beyond len(idx) (mesh padding) are dropped
    assert real == len(idx) and padded["a"].shape[0] % 4 == 0
    out = pt.scatter(tree, idx, padded)
    rest = np.setdiff1d(np.arange(n), idx)
    chex.assert_trees_all_equal(pt.gather(out, idx), new)
    chex.assert_trees_all_equal(pt.gather(out, rest), pt.gather(tree, rest))
    assert tree["a"] is not out["a"]  # a copy: the original is untouched


def test_sampled_training_keeps_unsampled_private_leaves_and_resumes_exactly(tmp_path):
    kw = dict(synthetic_clients=2, synthetic_train=30, synthetic_test=6, max_len=8,
              embed_dim=6, hidden=4, mlp_hidden=4, ap=False, algorithm="fedper",
              partition="dirichlet_label", num_clients=6, alpha=0.5, clients_per_round=2,
              server_opt="adam")
    quiet = lambda _: None
    full = train(TrainConfig(rounds=2, out=str(tmp_path / "a"), **kw), log=quiet)
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    sampled = [r["clients"] for r in rows]
    assert all(len(s) == 2 and s == sorted(set(s)) for s in sampled)
    assert all(len(r["train_loss_per_client"]) == 2 for r in rows)
    seen = sorted(set(sampled[0]) | set(sampled[1]))
    unseen = [k for k in range(6) if k not in seen]
    assert unseen  # 2 rounds x 2 of 6 clients
    head = lambda k: np.asarray(full["private"]["classifier"]["output"]["kernel"][k])
    for k in unseen[1:]:  # never sampled: still the common initial value
        np.testing.assert_array_equal(head(k), head(unseen[0]))
    for k in seen:
        assert not np.allclose(head(k), head(unseen[0]))
    # a run stopped after round 1 and resumed (private leaves, sampling, adam state) is the same
    train(TrainConfig(rounds=1, out=str(tmp_path / "b"), **kw), log=quiet)
    resumed = train(TrainConfig(rounds=2, out=str(tmp_path / "b"), resume=True, **kw),
                    log=quiet)
    chex.assert_trees_all_close((resumed["params"], resumed["private"]),
                                (full["params"], full["private"]), atol=1e-6)
    with pytest.raises(ValueError, match="clients-per-round 7 > 6"):
        train(TrainConfig(rounds=1, out=str(tmp_path / "c"), **{**kw, "clients_per_round": 7}),
              log=quiet)


def test_pad_clients_on_a_population_axis_copies_the_first_client():
    tree = {"a": np.arange(2 * 3 * 2).reshape(2, 3, 2), "b": None}
    picked = pt.gather(tree, np.array([2, 0]), axis=1)
    np.testing.assert_array_equal(picked["a"], tree["a"][:, [2, 0]])
    padded, real = pt.pad_clients(picked, 4, axis=1)
    assert real == 2 and padded["b"] is None
    np.testing.assert_array_equal(padded["a"], tree["a"][:, [2, 0, 2, 2]])
    same, real = pt.pad_clients(picked, 2, axis=1)
    assert real == 2 and same is picked
