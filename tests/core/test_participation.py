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
def test_sampling_uniform_without_and_size_with_replacement(n, seed, r, size, data):
    m = data.draw(st.integers(1, n))
    counts = np.arange(n)  # client 0 has no data
    if size and n == 1:
        with pytest.raises(ValueError, match="none of the 1 clients has data"):
            pt.sample_clients(seed, r, counts, m, "size")
        return
    idx = pt.sample_clients(seed, r, counts, m, "size" if size else "uniform")
    assert len(idx) == m and idx.min() >= 0 and idx.max() < n
    assert np.all(np.diff(idx) >= 0) if size else np.all(np.diff(idx) > 0)
    assert not size or 0 not in idx  # a client without data is never drawn by size
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
    assert pt.sample_clients(0, 1, np.asarray([0, 0, 3]), 2, "size").tolist() == [2, 2]
    np.testing.assert_array_equal(pt.aggregation_weights(np.asarray([3, 0]), "size"), [1, 0])


def test_size_sampling_weighs_each_client_by_its_share_in_expectation():
    """Scheme I of Li et al. 2020: draws with replacement, each weighed 1 / M: a client's
    expected share of the aggregate is N^k / N (drawn without replacement it would not be:
    0.25, 0.25, 0.49 here)."""
    counts, m, rounds = np.asarray([10, 10, 80]), 2, 4000
    share = np.zeros(3)
    for r in range(rounds):
        idx, draws = pt.distinct(pt.sample_clients(0, r, counts, m, "size"))
        w = pt.aggregation_weights(counts[idx], "size", draws)
        np.add.at(share, idx, w / w.sum())
    np.testing.assert_allclose(share / rounds, [0.1, 0.1, 0.8], atol=0.015)
    idx, draws = pt.distinct(np.asarray([0, 2, 2]))
    assert (idx.tolist(), draws.tolist()) == ([0, 2], [1, 2])
    assert pt.aggregation_weights(np.asarray([5, 0]), "size", draws).tolist() == [1, 0]
    assert pt.aggregation_weights(np.asarray([5, 7]), "uniform", draws).tolist() == [5, 7]


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
    # every client's evaluation is named as that client, the round's training figures as
    # the round's clients (FedPer has no global model: its personalised accuracy)
    import csv

    from fedjax_sc.run.paper.tidy_csv import metrics_csv
    from fedjax_sc.run.plumbing.tracking import round_scalars
    metrics_csv([tmp_path / "a"], tmp_path / "m.csv")
    table = list(csv.DictReader((tmp_path / "m.csv").open()))
    names = [f"client {k}" for k in range(6)]
    for r, row in zip((1, 2), rows):
        got = {(x["client"], x["metric"]): float(x["value"]) for x in table
               if x["round"] == str(r) and x["client"] != "all"}
        report = json.loads((tmp_path / "a" / "report.json").read_text())
        every = [c["client"] for c in report["clients"]]
        assert [got[c, "personal"] for c in every] == row["personal_per_client"]
        losses = {c: v for (c, m), v in got.items() if m == "train_loss"}
        assert losses == {every[k]: v for k, v in zip(row["clients"],
                                                      row["train_loss_per_client"])}
        scalars = round_scalars(row, names)
        for slot, k in enumerate(row["clients"]):
            assert scalars[f"train_loss_per_client/client {k}"] == \
                row["train_loss_per_client"][slot]
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


def test_size_sampling_trains_a_client_drawn_twice_once_with_twice_the_weight(tmp_path):
    """A client drawn twice trains once and weighs 2: the round's clients are distinct, so
    a stateful method's state stays the mean of its clients' (SCAFFOLD's c = mean c_i);
    the run resumes exactly."""
    kw = dict(synthetic_clients=2, synthetic_train=30, synthetic_test=6, max_len=8,
              embed_dim=6, hidden=4, mlp_hidden=4, ap=False, algorithm="scaffold",
              partition="dirichlet_quantity", num_clients=4, beta=0.3,
              clients_per_round=3, sampling="size", rounds=3)
    quiet = lambda _: None
    full = train(TrainConfig(out=str(tmp_path / "a"), **kw), log=quiet)
    rows = [json.loads(x) for x in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    sampled = [r["clients"] for r in rows]
    assert all(s == sorted(set(s)) for s in sampled)  # distinct
    assert any(len(s) < 3 for s in sampled), sampled  # seeded: some round draws one twice
    c, ci = full["server_state"], full["client_state"]
    chex.assert_trees_all_close(c, jax.tree.map(lambda x: x.mean(0), ci), atol=1e-6)
    train(TrainConfig(out=str(tmp_path / "b"), **{**kw, "rounds": 1}), log=quiet)
    resumed = train(TrainConfig(out=str(tmp_path / "b"), resume=True, **kw), log=quiet)
    chex.assert_trees_all_close((resumed["params"], resumed["server_state"]),
                                (full["params"], full["server_state"]), atol=1e-6)


def test_personal_accuracies_by_blocks_equal_all_clients_at_once():
    """Under partial participation the per-round personalised evaluation takes the host's
    private leaves a round's worth of clients at a time: the same figures as all at once."""
    import jax.numpy as jnp

    from fedjax_sc.core.evaluate import make_personal_evaluate
    from fedjax_sc.data.client_data import client_data
    from fedjax_sc.data.scenes import synthetic_scene
    from fedjax_sc.run import loading
    scene = synthetic_scene(num_clients=5, train_per_client=6, test_per_client=7, max_len=6)
    test = client_data(scene.test)
    rng = np.random.default_rng(0)
    private = {"w": rng.normal(size=(5, 2)).astype(np.float32)}  # host leaves, all clients

    def predict(params, tokens):  # a per-client linear score of the first token
        return {"sp": tokens[:, :1].astype(jnp.float32) * params["w"][None, :] + params["b"]}

    evaluate = make_personal_evaluate(predict)
    shared = {"b": jnp.zeros(2)}
    whole = loading.accuracies(scene, None, evaluate, None, shared, private, test)[1]
    assert len(set(whole["sp"].tolist())) > 1  # the clients' models differ
    hits = make_personal_evaluate(predict, hits=True)  # the end-of-run test record's
    every = loading.by_blocks(hits, shared, private, test, None)["sp"]
    for block in (1, 2, 3, 5, 8):
        got = loading.accuracies(scene, None, evaluate, None, shared, private, test, block)[1]
        np.testing.assert_array_equal(got["sp"], whole["sp"])
        np.testing.assert_array_equal(loading.by_blocks(hits, shared, private, test,
                                                        block)["sp"], every)


def test_size_sampling_needs_fewer_clients_per_round_than_clients(tmp_path):
    kw = dict(synthetic_clients=3, synthetic_train=6, synthetic_test=3, max_len=6,
              embed_dim=4, hidden=3, mlp_hidden=4, ap=False, rounds=1, sampling="size")
    with pytest.raises(ValueError, match="--sampling size draws a round's --clients-per-round"):
        train(TrainConfig(out=str(tmp_path / "a"), **kw), log=lambda _: None)
    with pytest.raises(ValueError, match="--clients-per-round 3, every client"):
        train(TrainConfig(out=str(tmp_path / "b"), clients_per_round=3, **kw),
              log=lambda _: None)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
