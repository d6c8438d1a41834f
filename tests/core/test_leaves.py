"""An algorithm's state by rows: gather, scatter and the row-aware reduce against the dense
tables they stand for (hypothesis over tiny shapes, numpy as the reference)."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.core.leaves import gather_table_rows, reduce_table_rows, scatter_table_rows

TABLE = ("embedding", "embedding")
REDUCE = jax.jit(lambda tree, w, ids, mask: reduce_table_rows(tree, w, ids, mask, {TABLE: 7}))


def _rows(rng, k, r, v=7):
    """Each client's distinct row ids [k, r] (padding entries repeat id 0, masked)."""
    ids = np.zeros((k, r), np.int32)
    mask = np.zeros((k, r), bool)
    for i in range(k):
        n = int(rng.integers(0, r + 1))
        ids[i, :n] = rng.choice(v, size=n, replace=False)
        mask[i, :n] = True
    return ids, mask


@settings(max_examples=10, deadline=None)
@given(k=st.integers(1, 4), r=st.integers(1, 5), d=st.integers(1, 3),
       seed=st.integers(0, 999))
def test_reduce_by_rows_is_the_weighted_sum_of_the_dense_tables(k, r, d, seed):
    rng = np.random.default_rng(seed)
    ids, mask = _rows(rng, k, r)
    rows = rng.normal(size=(k, r, d)).astype(np.float32)
    other = rng.normal(size=(k, 2)).astype(np.float32)
    w = rng.uniform(size=k).astype(np.float32)
    dense = np.zeros((k, 7, d), np.float32)  # each client's changes, zero off its rows
    for i in range(k):
        dense[i, ids[i][mask[i]]] = rows[i][mask[i]]
    tree = {"embedding": {"embedding": jnp.asarray(rows)}, "head": jnp.asarray(other)}
    got = REDUCE(tree, jnp.asarray(w), jnp.asarray(ids), jnp.asarray(mask))
    np.testing.assert_allclose(got["embedding"]["embedding"], np.tensordot(w, dense, 1),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["head"], np.tensordot(w, other, 1), rtol=1e-5, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(r=st.integers(1, 6), seed=st.integers(0, 999))
def test_scatter_after_gather_writes_back_only_the_real_rows(r, seed):
    rng = np.random.default_rng(seed)
    ids, mask = _rows(rng, 1, r)
    full = {"c": {"embedding": {"embedding": jnp.asarray(rng.normal(size=(7, 2)),
                                                         jnp.float32)},
                  "bias": jnp.ones(3)}}
    seen = gather_table_rows(full, jnp.asarray(ids[0]), [TABLE])
    assert seen["c"]["embedding"]["embedding"].shape == (r, 2)  # a suffix match, any depth
    changed = jax.tree.map(lambda x: x + 1.0, seen)
    back = scatter_table_rows(changed, full, jnp.asarray(ids[0]), jnp.asarray(mask[0]), [TABLE])
    want = np.asarray(full["c"]["embedding"]["embedding"]).copy()
    want[ids[0][mask[0]]] += 1.0
    np.testing.assert_allclose(back["c"]["embedding"]["embedding"], want)
    np.testing.assert_allclose(back["c"]["bias"], 2.0)  # not a table: taken as changed


def test_the_table_rule_finds_every_word_embedding_table_of_every_model():
    """core.leaves.is_table (the engine's rule) and the models' TABLE_MODULES name the same
    tables, for every algorithm of the registry."""
    import jax

    from fedjax_sc.core.leaves import is_table, table_paths
    from fedjax_sc.models.text_classifier import TABLE_MODULES, init_params
    from fedjax_sc.run.registry import ALGORITHMS, build_algorithm

    assert all(is_table((name, "embedding")) for name in TABLE_MODULES)
    assert not is_table(("embedding",)) and not is_table(("classifier", "embedding"))
    assert not is_table(("gru", "kernel"))
    for name in ALGORITHMS:
        algorithm = build_algorithm(name, vocab_size=20, num_classes=2, embed_dim=4,
                                    num_clients=3, hidden=4, mlp_hidden=4)
        params = init_params(algorithm.model, jax.random.key(0))
        expected = sorted((m, "embedding") for m in TABLE_MODULES if m in params)
        assert table_paths(params) == expected, name
        assert expected, name
