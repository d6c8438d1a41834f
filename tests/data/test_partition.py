"""Partitioners (FedNLP, Lin et al. 2022, Sec. 3.2, App. C): sizes, label proportions, coverage."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.data import partition
from fedjax_sc.data.corpus import Corpus


def _labels(n=2000, classes=2, seed=0):
    return np.random.default_rng(seed).integers(0, classes, size=n)


def _every_example_once(parts, n):
    joined = np.concatenate(parts)
    assert len(joined) == n and np.array_equal(np.sort(joined), np.arange(n))


@settings(max_examples=25, deadline=None)
@given(n=st.integers(10, 300), clients=st.integers(1, 10), classes=st.integers(1, 5),
       alpha=st.sampled_from([None, 0.01, 1.0, 100.0]), beta=st.sampled_from([None, 0.1, 5.0]),
       seed=st.integers(0, 3))
def test_every_example_assigned_exactly_once(n, clients, classes, alpha, beta, seed):
    labels = _labels(n, classes, seed)
    prior = partition.label_prior(labels, classes)
    plan = partition.make_plan(clients, prior, alpha=alpha, beta=beta, seed=seed)
    parts = partition.assign(plan, labels, seed=seed)
    assert len(parts) == clients
    _every_example_once(parts, n)
    assert min(len(p) for p in parts) >= 1
    np.testing.assert_allclose(plan.label_proportions.sum(1), 1.0)
    assert np.isclose(plan.size_shares.sum(), 1.0)


def test_large_alpha_is_near_iid_small_alpha_near_one_class():
    labels = _labels(4000, classes=4)
    prior = partition.label_prior(labels, 4)

    def label_share(alpha):
        plan = partition.make_plan(20, prior, alpha=alpha, seed=1)
        parts = partition.assign(plan, labels, seed=1)
        return np.stack([np.bincount(labels[p], minlength=4) / len(p) for p in parts])

    iid = label_share(1000.0)
    assert np.abs(iid - prior).max() < 0.15
    skewed = label_share(0.01)
    # most clients hold (nearly) a single class; the last ones take what is left over
    assert np.median(skewed.max(1)) > 0.95
    assert np.mean(skewed.max(1)) > np.mean(iid.max(1)) + 0.4


def test_equal_sizes_without_quantity_skew_and_spread_with_it():
    labels = _labels(1000)
    prior = partition.label_prior(labels, 2)
    even = partition.assign(partition.make_plan(7, prior, alpha=1.0, seed=0), labels)
    assert {len(p) for p in even} <= {142, 143}
    skew = partition.assign(partition.make_plan(7, prior, beta=0.3, seed=0), labels)
    sizes = np.asarray([len(p) for p in skew])
    assert sizes.sum() == 1000 and sizes.max() > 3 * sizes.min()
    # quantity skew alone keeps the label distribution near the prior for large clients
    big = skew[int(sizes.argmax())]
    assert abs(labels[big].mean() - labels.mean()) < 0.1


def test_label_that_runs_out_is_reassigned():
    labels = np.asarray([0] * 10 + [1] * 90)
    plan = partition.PartitionPlan(np.asarray([[1.0, 0.0]] * 4), np.full(4, 0.25))
    parts = partition.assign(plan, labels, seed=0)
    _every_example_once(parts, 100)
    assert [len(p) for p in parts] == [25] * 4
    assert labels[parts[0]].tolist().count(0) == 10  # all of label 0, then filled with 1s


def test_deterministic_and_seeded():
    labels = _labels(500)
    prior = partition.label_prior(labels, 2)
    a = partition.assign(partition.make_plan(5, prior, alpha=0.5, seed=3), labels, seed=4)
    b = partition.assign(partition.make_plan(5, prior, alpha=0.5, seed=3), labels, seed=4)
    c = partition.assign(partition.make_plan(5, prior, alpha=0.5, seed=9), labels, seed=4)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_allocate_and_errors():
    assert partition.allocate(10, np.asarray([0.5, 0.5, 0.0])).tolist() == [5, 4, 1]
    with pytest.raises(ValueError, match="cannot give"):
        partition.allocate(2, np.full(3, 1 / 3))
    with pytest.raises(ValueError, match="alpha"):
        partition.make_plan(3, np.asarray([0.5, 0.5]), alpha=0.0)
    with pytest.raises(ValueError, match="num_clients"):
        partition.make_plan(0, np.asarray([0.5, 0.5]))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        partition.label_prior(np.asarray([0, 2]), 2)


def _corpus(labels, tag):
    return Corpus(texts=tuple(f"{tag} w{i}" if i % 7 else "" for i in range(len(labels))),
                  labels=np.asarray(labels, np.int32), source=tag, num_empty=0,
                  num_latin1_lines=0)


def test_repartition_test_split_follows_the_train_plan():
    rng = np.random.default_rng(0)
    domains = {d: {"train": _corpus(rng.integers(0, 2, 300), f"{d}-train"),
                   "test": _corpus(rng.integers(0, 2, 300), f"{d}-test")} for d in "ab"}
    out = partition.repartition(domains, "dirichlet_label", 12, 2, alpha=0.05, seed=2)
    assert list(out) == [f"client{j:04d}" for j in range(12)]
    for split in ("train", "test"):
        texts = [t for c in out.values() for t in c[split].texts]
        pooled = [t for d in "ab" for t in domains[d][split].texts]
        assert sorted(texts) == sorted(pooled)  # nothing lost or duplicated
    share = lambda s: np.asarray([c[s].labels.mean() for c in out.values()])
    # a client's test labels lean the way its training labels do (same q_j)
    assert np.corrcoef(share("train"), share("test"))[0, 1] > 0.8
    for c in out.values():
        assert c["train"].num_empty == sum(not t for t in c["train"].texts)
    with pytest.raises(ValueError, match="needs --alpha"):
        partition.repartition(domains, "dirichlet_label", 3, 2)
    with pytest.raises(ValueError, match="partition must be"):
        partition.repartition(domains, "natural", 3, 2)
