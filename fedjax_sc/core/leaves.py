"""Leaves of a nested-dict params pytree by path, and the local-vocabulary view of its
word-embedding tables (Li et al. 2021, Remark 3: a client trains only the rows of its words)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import traverse_util

from fedjax_sc.algorithms.base import Params


def replace_leaf(params: Params, path: tuple[str, ...], value: jax.Array) -> Params:
    """Returns ``params`` with the leaf at ``path`` replaced (nested dicts, no mutation)."""
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


def gather_rows(params: Params, ids: jax.Array, paths) -> Params:
    """Replaces each ``[V, d]`` table at ``paths`` by its rows ``ids`` (int32 ``[R]``): the
    client's local-vocabulary view (paper Remark 3)."""
    for p in paths:
        params = replace_leaf(params, p, get_leaf(params, p)[ids])
    return params


def scatter_rows(params: Params, reference: Params, ids: jax.Array, vmask: jax.Array,
                 paths) -> Params:
    """Inverse of :func:`gather_rows`: writes the ``[R, d]`` rows at ``paths`` of ``params``
    into the full tables of ``reference`` (padding entries, ``vmask`` False, are dropped)."""
    for p in paths:
        table = get_leaf(reference, p)
        safe_ids = jnp.where(vmask, ids, table.shape[0])  # out of range: dropped
        params = replace_leaf(params, p, table.at[safe_ids].set(get_leaf(params, p),
                                                                mode="drop"))
    return params


def has_leaf(params: Params, path: tuple[str, ...]) -> bool:
    """Whether the nested-dict ``params`` holds a leaf at ``path``."""
    return path in traverse_util.flatten_dict(params)
