"""Aggregation: weights N^k/N, weighted mean, and the row-sparse (local vocabulary) form."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms.aggregate import example_weights, weighted_mean, weighted_mean_rows


@settings(max_examples=12, deadline=None)
@given(st.lists(st.integers(0, 2000), min_size=1, max_size=20).filter(lambda c: sum(c) > 0))
def test_weights_are_proportional_to_counts_and_sum_to_one(counts):
    w = np.asarray(example_weights(jnp.asarray(counts)))
    np.testing.assert_allclose(w.sum(), 1.0, rtol=1e-5)
    np.testing.assert_allclose(w, np.asarray(counts) / sum(counts), rtol=1e-5)


@settings(max_examples=12, deadline=None)
@given(st.lists(st.floats(0.0, 2.0), min_size=1, max_size=20).filter(lambda w: sum(w) > 1e-3))
def test_float_weights_summing_below_one_are_normalised_too(weights):
    """Unnormalised float weights (``ClientData.weights``) become shares summing to 1, also
    when they sum to less than 1, so dense leaves and tables are averaged alike."""
    w = np.asarray(example_weights(jnp.asarray(weights, jnp.float32)))
    np.testing.assert_allclose(w, np.asarray(weights) / sum(weights), rtol=1e-5, atol=1e-7)
    assert not np.any(np.asarray(example_weights(jnp.zeros(3))))


@settings(max_examples=8, deadline=None)
@given(k=st.integers(1, 6), n=st.integers(1, 5))
def test_averaging_identical_clients_is_the_identity(k, n):
    tree = {"a": jnp.arange(n, dtype=jnp.float32), "b": {"c": jnp.ones((n, 2)) * 3.0}}
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (k,) + x.shape), tree)
    w = example_weights(jnp.arange(1, k + 1))
    chex.assert_trees_all_close(weighted_mean(stacked, w), tree, rtol=1e-6)


def test_weighted_mean_matches_numpy():
    x = np.random.default_rng(0).normal(size=(3, 4, 2)).astype(np.float32)
    w = np.array([0.5, 0.3, 0.2], np.float32)
    np.testing.assert_allclose(weighted_mean({"x": jnp.asarray(x)}, jnp.asarray(w))["x"],
                               np.einsum("k,kij->ij", w, x), rtol=1e-6)


@settings(max_examples=10, deadline=None)
@given(v=st.integers(3, 12), k=st.integers(1, 4), r=st.integers(1, 6), seed=st.integers(0, 99))
def test_row_sparse_mean_equals_dense_mean_of_full_tables(v, k, r, seed):
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(v, 2)).astype(np.float32)
    ids = np.stack([np.sort(rng.choice(v, size=min(r, v), replace=False)) for _ in range(k)])
    mask = rng.random(ids.shape) < 0.8
    rows = rng.normal(size=ids.shape + (2,)).astype(np.float32)
    counts = rng.integers(1, 50, size=k)
    full = np.repeat(table[None], k, axis=0)
    for c in range(k):
        full[c, ids[c][mask[c]]] = rows[c][mask[c]]
    sparse, dense = _sparse_and_dense(table, ids, rows, mask, counts, full)
    np.testing.assert_allclose(sparse, dense, atol=1e-5)


@jax.jit  # one compiled program per example's shapes, not one per operation
def _sparse_and_dense(table, ids, rows, mask, counts, full):
    w = example_weights(counts)
    return (weighted_mean_rows(table, ids, rows, mask, w),
            weighted_mean({"t": full}, w)["t"])
