import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedjax_sc.core.evaluate import (
    make_evaluate,
    make_example_hits,
    mean_accuracy,
    paired_ag_difference,
)
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import synthetic_scene
from fedjax_sc.models.text_classifier import TextClassifier, init_params


def test_accuracy_per_client_matches_numpy_for_global_and_stacked_params():
    scene = synthetic_scene(num_clients=3, train_per_client=8, test_per_client=7, max_len=9)
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=6, hidden=3, mlp_hidden=4)
    params = init_params(model, jax.random.key(0))
    test = client_data(scene.test)
    acc = np.asarray(make_evaluate(model, batch_size=4)(params, test))
    logits = jax.jit(model.apply)  # one compiled program per client's size
    for k in range(3):
        n = int(scene.test.counts[k])
        pred = np.argmax(logits({"params": params}, scene.test.tokens[k, :n]), -1)
        np.testing.assert_allclose(acc[k], np.mean(pred == scene.test.labels[k, :n]), rtol=1e-6)
    assert mean_accuracy(jnp.asarray(acc)) == pytest.approx(acc.mean())
    stacked = jax.tree.map(lambda x: jnp.stack([x] * 3), params)
    acc2 = make_evaluate(model, batch_size=5, stacked_params=True)(stacked, test)
    np.testing.assert_allclose(acc2, acc, rtol=1e-6)
    with pytest.raises(ValueError, match="global vocabulary"):
        make_evaluate(model)(params, client_data(scene.train, local_vocab=True))


def test_example_hits_are_the_examples_behind_the_accuracy():
    scene = synthetic_scene(num_clients=3, train_per_client=8, test_per_client=7, max_len=9)
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=6, hidden=3, mlp_hidden=4)
    params = init_params(model, jax.random.key(1))
    test = client_data(scene.test)
    hits = np.asarray(make_example_hits(model, batch_size=4, client_chunk=2)(params, test))
    assert hits.shape == test.mask.shape and hits.dtype == bool
    assert not hits[~np.asarray(test.mask)].any()  # padding is never a hit
    logits = jax.jit(model.apply)
    for k in range(3):
        n = int(scene.test.counts[k])
        pred = np.argmax(logits({"params": params}, scene.test.tokens[k, :n]), -1)
        np.testing.assert_array_equal(hits[k, :n], pred == scene.test.labels[k, :n])
    acc = np.asarray(make_evaluate(model, batch_size=4)(params, test))
    np.testing.assert_allclose(hits.sum(1) / scene.test.counts, acc, rtol=1e-6)


_HITS = hnp.arrays(bool, st.tuples(st.integers(1, 4), st.integers(1, 30)))


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_paired_ag_difference_is_the_mean_of_client_differences_and_antisymmetric(data):
    a = data.draw(_HITS)
    b = data.draw(hnp.arrays(bool, a.shape))
    mask = data.draw(hnp.arrays(bool, a.shape))
    mask[0, 0] = True  # at least one client has a test example
    counts = mask.sum(1)
    acc = lambda h: np.where(counts > 0, (h & mask).sum(1) / np.maximum(counts, 1), np.nan)
    ab = paired_ag_difference(a, b, mask, resamples=200, seed=3)
    ba = paired_ag_difference(b, a, mask, resamples=200, seed=3)
    assert ab["diff"] == pytest.approx(np.nanmean(acc(a)) - np.nanmean(acc(b)))
    assert ab["diff"] == pytest.approx(-ba["diff"])
    assert ab["low"] == pytest.approx(-ba["high"]) and ab["high"] == pytest.approx(-ba["low"])
    assert ab["low"] <= ab["high"]
    assert ab["wins"] == ba["losses"] and ab["ties"] == ba["ties"]
    assert ab["wins"] + ab["losses"] + ab["ties"] == int((counts > 0).sum())
    assert ab["disagree"] == int(((a != b) & mask).sum())
    same = paired_ag_difference(a, a, mask, resamples=50)
    assert same["diff"] == same["low"] == same["high"] == 0.0 and same["disagree"] == 0


def test_paired_ag_difference_interval_narrows_with_more_test_examples():
    rng = np.random.default_rng(0)
    widths = []
    for n in (100, 1600):  # A is right on 80%, B on 75% of the examples, independently
        a, b = rng.random((2, 4, n)) < np.array([0.8, 0.75])[:, None, None]
        r = paired_ag_difference(a, b, np.ones((4, n), bool), resamples=2000)
        assert r["low"] < r["diff"] < r["high"]
        widths.append(r["high"] - r["low"])
    assert widths[1] < widths[0] / 2  # about 1/sqrt(n)
    with pytest.raises(ValueError, match="no client has a test example"):
        paired_ag_difference(a, b, np.zeros_like(a))
    with pytest.raises(ValueError, match="shape"):
        paired_ag_difference(a, b[:, :3], np.ones_like(a))


def test_paired_ag_difference_over_seeds_holds_the_seeds_spread():
    rng = np.random.default_rng(1)
    n, mask = 400, np.ones((4, 400), bool)
    b = rng.random((3, 4, n)) < 0.8
    # A is 6 points ahead on seed 0, level on seed 1, 6 behind on seed 2
    a = np.stack([rng.random((4, n)) < p for p in (0.86, 0.8, 0.74)])
    r = paired_ag_difference(a, b, mask, resamples=2000)
    single = [paired_ag_difference(a[s], b[s], mask, resamples=2000) for s in range(3)]
    assert r["per_seed"] == pytest.approx([x["diff"] for x in single])
    assert r["diff"] == pytest.approx(np.mean(r["per_seed"]))
    assert r["low"] < r["diff"] < r["high"]
    # the seeds' spread widens the interval beyond any one pair's test-sample interval
    assert r["high"] - r["low"] > 1.5 * max(x["high"] - x["low"] for x in single)
    assert r["disagree"] == sum(x["disagree"] for x in single)
    # one pair given with a seed axis is the one-model comparison, draw for draw
    assert paired_ag_difference(a[:1], b[:1], mask, seed=5, resamples=300)["low"] == (
        paired_ag_difference(a[0], b[0], mask, seed=5, resamples=300)["low"])
    with pytest.raises(ValueError, match=r"\[S, K, n\]"):
        paired_ag_difference(a, b[:2], mask)


def test_a_client_level_over_the_seeds_is_a_tie_not_a_win():
    # A's seeds get 3 fewer, 2 more and 1 more of client 0's 400 reviews right than B's: the
    # mean difference is 0 exactly, though (-3 + 2 + 1) / 400 / 3 in floats is 1e-19
    n, mask = 400, np.ones((2, 400), bool)
    b = np.zeros((3, 2, n), bool)
    a = b.copy()
    a[0, 0, :3], b[0, 0, :3] = False, True
    a[1, 0, :2], a[2, 0, :1] = True, True
    a[:, 1, :1] = True  # A ahead on client 1 with every seed
    r = paired_ag_difference(a, b, mask, resamples=10)
    assert (r["wins"], r["losses"], r["ties"]) == (1, 0, 1)


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_paired_difference_of_scores_in_0_1_reduces_to_hits_and_averages_them(data):
    a = data.draw(_HITS)
    b = data.draw(hnp.arrays(bool, a.shape))
    mask = np.ones(a.shape, bool)
    # hits given as 0/1 scores: the same comparison, draw for draw
    bools = paired_ag_difference(a, b, mask, resamples=100, seed=2)
    floats = paired_ag_difference(a.astype(float), b.astype(float), mask, resamples=100, seed=2)
    for k in ("diff", "low", "high", "wins", "losses", "ties", "disagree"):
        assert bools[k] == pytest.approx(floats[k]), k
    # shares of n evaluations (Ap): the mean of the per-evaluation comparisons
    n = data.draw(st.integers(1, 5))
    evals_a = data.draw(hnp.arrays(bool, (n, *a.shape)))
    evals_b = data.draw(hnp.arrays(bool, (n, *a.shape)))
    r = paired_ag_difference(evals_a.mean(0), evals_b.mean(0), mask, resamples=50)
    each = [paired_ag_difference(x, y, mask, resamples=1)["diff"]
            for x, y in zip(evals_a, evals_b)]
    assert r["diff"] == pytest.approx(np.mean(each))
    assert r["disagree"] == int((evals_a.sum(0) != evals_b.sum(0)).sum())
    with pytest.raises(ValueError, match=r"scores in \[0, 1\]"):
        paired_ag_difference(a + 1.5, b, mask)
