"""FedNova: normalised averaging for clients that did unequal amounts of local work (Wang, Liu,
Liang, Joshi and Poor 2020, "Tackling the Objective Inconsistency Problem in Heterogeneous
Federated Optimization", Eq. 6-7 and their code, ``distoptim/FedNova.py``).

Plain FedAvg weights every client's model by p_k = N^k / N; a client that ran more local steps
moved further and pulls the average towards its own optimum (the "objective inconsistency").
FedNova divides client k's cumulative update ``Delta_k = x - y_k`` by the norm of its
aggregation vector a_k, the sum over its local steps of the coefficients each gradient received,
and rescales the mean by the effective number of steps tau_eff = sum_k p_k ||a_k||_1::

    x <- x - tau_eff * sum_k p_k Delta_k / ||a_k||_1
       = sum_k p_k (x + s_k (y_k - x)),   s_k = tau_eff / ||a_k||_1

The second form is what :func:`rescale` computes: each upload moved along its own update, so
the usual weighted mean (and any server optimizer after it) does the rest. With equal local
work every s_k is 1 and FedNova is FedAvg.

||a_k||_1 for tau_k steps, following the authors' code step by step (their ``step``): with
momentum rho a counter c <- rho c + 1 is added every step (a = sum_t (1 - rho^t) / (1 - rho));
with a proximal term (FedProx, eta mu) a <- a (1 - eta mu) + 1; plain SGD a = tau_k. With a
proximal term their code takes tau_eff = sum_k p_k tau_k; so does :func:`effective_steps`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp


def normalizers(steps: jax.Array, max_steps: int, momentum: float = 0.0,
                prox: float = 0.0) -> jax.Array:
    """||a_k||_1 for every client.

    Args:
      steps: int ``[K]``, tau_k: the local steps each client ran (0 for one that ran none).
      max_steps: a static upper bound of ``steps`` (the local scan's length).
      momentum: the client optimizer's heavy-ball momentum rho in ``[0, 1)``.
      prox: eta * mu of a proximal term (FedProx), 0 without one.

    Returns:
      float32 ``[K]``; 0 where ``steps`` is 0.
    """

    def step(carry, _):
        counter, a = carry
        if momentum:
            counter = momentum * counter + 1.0
            a = a + counter
        if prox:
            a = a * (1.0 - prox) + 1.0
        if not momentum and not prox:
            a = a + 1.0
        return (counter, a), a

    _, by_steps = jax.lax.scan(step, (jnp.float32(0), jnp.float32(0)), None,
                               length=max(int(max_steps), 1))
    table = jnp.concatenate([jnp.zeros((1,), jnp.float32), by_steps])
    return table[jnp.clip(steps, 0, table.shape[0] - 1)]


def effective_steps(weights: jax.Array, norms: jax.Array, steps: jax.Array,
                    prox: float = 0.0) -> jax.Array:
    """tau_eff = sum_k p_k ||a_k||_1 (sum_k p_k tau_k with a proximal term, as the authors'
    code); ``weights`` float32 ``[K]`` summing to 1 over the clients that take part."""
    base = steps.astype(jnp.float32) if prox else norms
    return jnp.sum(weights * base)


def scales(weights: jax.Array, steps: jax.Array, max_steps: int, momentum: float = 0.0,
           prox: float = 0.0) -> jax.Array:
    """s_k = tau_eff / ||a_k||_1: float32 ``[K]`` (0 for a client without steps)."""
    norms = normalizers(steps, max_steps, momentum, prox)
    tau_eff = effective_steps(weights, norms, steps, prox)
    return jnp.where(norms > 0, tau_eff / jnp.maximum(norms, 1e-12), 0.0)


def rescale(start: Any, uploads: Any, scale: jax.Array) -> Any:
    """``start + scale_k (uploads_k - start)`` leaf by leaf.

    Args:
      start: the server's parameters each client started from: leaves shaped as one
        client's upload (broadcast over clients), or stacked ``[K, ...]`` like ``uploads``
        (a word-embedding table's rows gathered per client).
      uploads: the decoded uploads, leaves ``[K, ...]``.
      scale: float32 ``[K]``.

    Returns:
      the rescaled uploads, leaves ``[K, ...]`` in their own dtype.
    """

    def one(x, y):
        s = jnp.reshape(scale, scale.shape + (1,) * (y.ndim - 1)).astype(jnp.float32)
        x = x.astype(jnp.float32)
        return (x + s * (y.astype(jnp.float32) - x)).astype(y.dtype)

    return jax.tree.map(one, start, uploads)
