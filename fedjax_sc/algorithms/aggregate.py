"""Server-side aggregation (Li et al. 2021, Sec. 3.3; McMahan et al. 2017, FedAvg)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.base import Params


def example_weights(counts: jax.Array) -> jax.Array:
    """FedAvg weights N^k / N, or any non-negative weights normalised to sum to 1.

    Args:
      counts: int or float ``[num_clients]``, N^k or unnormalised weights (0 for a client
        that takes no part); float weights may sum to less than 1.

    Returns:
      float32 ``[num_clients]`` summing to 1 (all zeros if every count is 0).
    """
    c = counts.astype(jnp.float32)
    total = jnp.sum(c)
    return jnp.where(total > 0, c / jnp.where(total > 0, total, 1.0), 0.0)


def weighted_mean(stacked: Params, weights: jax.Array) -> Params:
    """``sum_k weights[k] * stacked[k]`` for every leaf (paper Sec. 3.3).

    Args:
      stacked: pytree whose leaves are ``[num_clients, ...]``.
      weights: float32 ``[num_clients]``; callers pass weights summing to 1.

    Returns:
      Pytree of the leaves without the client axis, in the leaves' dtype.
    """
    return jax.tree.map(
        lambda x: jnp.tensordot(weights.astype(x.dtype), x, axes=1), stacked)


def weighted_mean_rows(table: jax.Array, row_ids: jax.Array, rows: jax.Array,
                       row_mask: jax.Array, weights: jax.Array) -> jax.Array:
    """Weighted mean of client tables that differ from ``table`` only in some rows.

    Client k's full table is ``table`` with rows ``row_ids[k]`` replaced by ``rows[k]``; the
    result equals ``weighted_mean`` of those full tables (for weights summing to 1) without
    materialising them: ``table + sum_k w_k scatter(row_ids[k], rows[k] - table[row_ids[k]])``.
    This is how a client that only ever touches its local vocabulary V^k uploads its word
    embeddings (paper Remark 3).

    Args:
      table: ``[V, d]`` the server's table before the round.
      row_ids: int32 ``[num_clients, R]`` global row ids, each client's distinct real ids.
      rows: ``[num_clients, R, d]`` the clients' trained rows.
      row_mask: bool ``[num_clients, R]``; False on padding entries (ignored).
      weights: float32 ``[num_clients]`` summing to 1.

    Returns:
      ``[V, d]`` aggregated table.
    """
    delta = rows - table[row_ids]
    delta = delta * (row_mask.astype(table.dtype) * weights.astype(table.dtype)[:, None])[..., None]
    return table.at[row_ids.reshape(-1)].add(delta.reshape(-1, table.shape[-1]))
