"""Leaves of a nested-dict params pytree by path, and the local-vocabulary view of its
word-embedding tables (Li et al. 2021, Remark 3: a client trains only the rows of its words)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import traverse_util

from fedjax_sc.algorithms.base import Params


def is_table(path: tuple[str, ...]) -> bool:
    """Whether a params path is a word-embedding table: a top-level module whose name ends in
    ``embedding`` holding its ``[V, d]`` table as ``embedding`` (``embedding/embedding``,
    ``private_embedding/embedding``, ...). The library's models follow this rule
    (:data:`fedjax_sc.models.text_classifier.TABLE_MODULES`); a model of one's own whose
    tables follow it gets local-vocabulary training of them, rows only, for free."""
    return len(path) == 2 and path[1] == "embedding" and path[0].endswith("embedding")


def table_paths(*trees: Params, among=None) -> list[tuple[str, ...]]:
    """The word-embedding table paths (:func:`is_table`) held by any of ``trees`` (nested-dict
    params), in sorted order; ``among``: only these paths (None: every table)."""
    held = {p for t in trees for p in traverse_util.flatten_dict(t) if is_table(p)}
    if among is not None:
        held &= {tuple(p) for p in among}
    return sorted(held)


def replace_leaf(params: Params, path: tuple[str, ...], value: jax.Array) -> Params:
    """Returns ``params`` with the leaf at ``path`` replaced (nested dicts, no mutation).

    Raises:
      KeyError: no leaf at ``path`` (the message lists the leaves).
    """
    flat = traverse_util.flatten_dict(params)
    if path not in flat:
        raise KeyError(f"no leaf {'/'.join(path)} in params; leaves: "
                       f"{['/'.join(p) for p in flat]}")
    flat[path] = value
    return traverse_util.unflatten_dict(flat)


def get_leaf(params: Params, path: tuple[str, ...]) -> jax.Array:
    """The leaf at ``path`` of a nested-dict params pytree."""
    for name in path:
        params = params[name]
    return params


def has_leaf(params: Params, path: tuple[str, ...]) -> bool:
    """Whether the nested-dict ``params`` holds a leaf at ``path``."""
    return path in traverse_util.flatten_dict(params)


def _path_names(path) -> tuple[str, ...]:
    """A ``tree_flatten_with_path`` key path as names (dict keys, attribute names, indices)."""
    names = []
    for k in path:
        for attr in ("key", "name", "idx"):
            if hasattr(k, attr):
                names.append(str(getattr(k, attr)))
                break
    return tuple(names)


def table_of(path, tables) -> tuple[str, ...] | None:
    """The table path among ``tables`` (tuples of names) that the pytree key path ``path``
    (of ``jax.tree_util.tree_flatten_with_path``) ends with, or None: the rule by which any
    pytree's leaf is seen as a word-embedding table's rows."""
    names = _path_names(path)
    for t in tables:
        if names[-len(t):] == tuple(t):
            return tuple(t)
    return None


def gather_table_rows(tree, ids: jax.Array, tables) -> object:
    """Any pytree (an algorithm's state, a message) with every leaf whose path ends with one
    of ``tables`` (e.g. ``("embedding", "embedding")``) replaced by its rows ``ids``
    (int32 ``[R]``): a ``[V, d]`` state leaf seen as the client's local-vocabulary rows,
    aligned with its params; on params, the client's local-vocabulary view of its tables
    (paper Remark 3)."""
    if not tables:
        return tree
    return jax.tree_util.tree_map_with_path(
        lambda p, x: x[ids] if table_of(p, tables) is not None else x, tree)


def scatter_table_rows(rows, reference, ids: jax.Array, vmask: jax.Array, tables) -> object:
    """Inverse of :func:`gather_table_rows`: ``reference`` (the full tree) with the rows of
    each table leaf of ``rows`` written back at ``ids`` (entries where ``vmask`` is False
    dropped); every other leaf taken from ``rows``."""
    if not tables:
        return rows

    def put(p, r, full):
        if table_of(p, tables) is None:
            return r
        safe = jnp.where(vmask, ids, full.shape[0])  # out of range: dropped
        return full.at[safe].set(r, mode="drop")

    return jax.tree_util.tree_map_with_path(put, rows, reference)


def reduce_table_rows(stacked, weights: jax.Array, ids: jax.Array | None,
                      vmask: jax.Array | None, sizes: dict[tuple[str, ...], int]) -> object:
    """``sum_k weights[k] stacked[k]`` over the leading client axis of every leaf, a table
    leaf's rows (``[K, R, d]``, the paths ending in a key of ``sizes``) scattered into the
    full ``[V, d]`` table (``V = sizes[table]``; rows a client does not hold count as 0).

    Args:
      stacked: a pytree of ``[K, ...]`` leaves.
      weights: float ``[K]``.
      ids: int32 ``[K, R]``, each client's rows (None: no table by rows).
      vmask: bool ``[K, R]``, True at the real entries of ``ids`` (None with ``ids``).
      sizes: ``{table path: V}`` of the tables held by rows.
    """
    tables = list(sizes) if ids is not None else []

    def one(p, x):
        w = weights.astype(x.dtype)
        t = table_of(p, tables)
        if t is None:
            return jnp.tensordot(w, x, axes=1)
        scaled = x * (vmask.astype(x.dtype) * w[:, None]).reshape(
            vmask.shape + (1,) * (x.ndim - 2))
        return jnp.zeros((sizes[t],) + x.shape[2:], x.dtype).at[ids.reshape(-1)].add(
            scaled.reshape((-1,) + x.shape[2:]))

    return jax.tree_util.tree_map_with_path(one, stacked)
