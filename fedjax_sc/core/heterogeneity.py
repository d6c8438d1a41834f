"""Clients that are not alike, inside the one compiled round: unequal local work, clients that
drop out of a round and stragglers, all as per-client step budgets (masks), so the program,
its shapes and its cost are the same every round and nothing recompiles.

A client's local training is a scan of a fixed number of steps S (:meth:`LocalWork.scan_length`)
over its endless stream of shuffled epochs (:func:`fedjax_sc.core.local.stream_batch`); its
first ``budget_k`` steps are real, the rest are no-ops. Each round the budgets are drawn inside
the round from ``fold_in(round key, streams.WORK)``:

1. local work tau_k: ``E * ceil(N^k / B)`` (local epochs: proportional to the client's data, the
   default and the paper's setting), a fixed ``steps`` for every client, or drawn per client
   and round uniformly from ``steps_range`` (as FedNova's experiments draw local epochs);
2. stragglers: ``round(stragglers * K')`` of the K' clients with data, drawn without
   replacement each round, finish only part of their work: tau uniform in ``{1, ..., tau_k -
   1}`` (``partial``, FedProx's systems-heterogeneity setting: Li et al. 2020, "Federated
   Optimization in Heterogeneous Networks", Sec. 5.2), or nothing (``drop``: FedAvg's handling
   of stragglers in that paper);
3. dropout: each client independently misses the round with probability ``dropout``.

A client with budget 0 trains nothing, keeps its private leaves and uploads nothing: its
aggregation weight is 0 and the others' weights are renormalised (:func:`participation_weights`);
if every client misses a round the server keeps its model. With unequal work the aggregate can
be FedNova's normalised average (``aggregation="fednova"``, :mod:`fedjax_sc.core.fednova`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

AGGREGATIONS = ("mean", "fednova")
STRAGGLER_POLICIES = ("partial", "drop")


class LocalWork(NamedTuple):
    """How much local work each client does per round (static: part of the compiled program).

    Attributes:
      steps: a fixed number of local steps tau for every client (None: ``local_epochs``
        epochs of its own data, tau_k = E ceil(N^k / B)).
      steps_range: ``(lo, hi)``: tau_k drawn per client and round uniformly from ``lo..hi``
        (inclusive); exclusive with ``steps``.
      dropout: probability in ``[0, 1]`` that a client misses a round.
      stragglers: fraction in ``[0, 1]`` of the clients with data that straggle each round.
      straggler_policy: ``partial`` (a straggler's partial work is aggregated) or ``drop``
        (a straggler's update is discarded).
      aggregation: ``mean`` (N^k-weighted, FedAvg) or ``fednova`` (normalised averaging).
      momentum: the client optimizer's momentum rho (FedNova's normaliser needs it; optax
        transformations do not expose it).
      prox: eta * mu of a FedProx proximal term (FedNova's normaliser), 0 without one.
    """

    steps: int | None = None
    steps_range: tuple[int, int] | None = None
    dropout: float = 0.0
    stragglers: float = 0.0
    straggler_policy: str = "partial"
    aggregation: str = "mean"
    momentum: float = 0.0
    prox: float = 0.0

    @property
    def active(self) -> bool:
        """False when every client does its E epochs, every round, FedAvg-averaged: the plain
        round then runs unchanged (bit for bit)."""
        return (self.steps is not None or self.steps_range is not None or self.dropout > 0
                or self.stragglers > 0 or self.aggregation != "mean")

    def check(self) -> LocalWork:
        """Returns ``self``.

        Raises:
          ValueError: a setting out of range (named as its ``fedjax-sc train`` flag).
        """
        if self.steps is not None and self.steps_range is not None:
            raise ValueError("--local-steps: give a fixed number N or a range LO:HI, not both")
        if self.steps is not None and self.steps < 1:
            raise ValueError(f"--local-steps must be >= 1, got {self.steps}")
        if self.steps_range is not None:
            lo, hi = self.steps_range
            if not 1 <= lo <= hi:
                raise ValueError(f"--local-steps {lo}:{hi}: need 1 <= LO <= HI")
        for flag, value in (("--client-dropout", self.dropout),
                            ("--straggler-fraction", self.stragglers)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{flag} must lie in [0, 1], got {value}")
        if self.straggler_policy not in STRAGGLER_POLICIES:
            raise ValueError(f"--straggler-policy {self.straggler_policy!r}: choose from "
                             f"{STRAGGLER_POLICIES}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"--aggregation {self.aggregation!r}: choose from {AGGREGATIONS}")
        if not 0.0 <= self.momentum < 1.0 or not 0.0 <= self.prox < 1.0:
            raise ValueError(f"FedNova needs momentum and eta * mu in [0, 1), got "
                             f"{self.momentum}, {self.prox}")
        return self

    def scan_length(self, batch_size: int, local_epochs: int, max_examples: int) -> int:
        """S, the steps of the local scan: the largest budget any client can get."""
        if self.steps is not None:
            return self.steps
        if self.steps_range is not None:
            return self.steps_range[1]
        return local_epochs * max(math.ceil(max_examples / batch_size), 1)


def budgets(work: LocalWork, key: jax.Array, counts: jax.Array, batch_size: int,
            local_epochs: int) -> jax.Array:
    """Every client's local steps this round (see the module docstring).

    Args:
      work: the setting.
      key: the round's work key (``fold_in(round key, streams.WORK)``).
      counts: int ``[K]``, N^k (0: a client without data, or mesh padding: budget 0).
      batch_size: B.
      local_epochs: E.

    Returns:
      int32 ``[K]``, each in ``[0, scan_length]``.
    """
    k = counts.shape[0]
    steps_key, pick_key, part_key, drop_key = jax.random.split(key, 4)
    has_data = counts > 0
    if work.steps is not None:
        tau = jnp.full((k,), work.steps, jnp.int32)
    elif work.steps_range is not None:
        lo, hi = work.steps_range
        tau = jax.random.randint(steps_key, (k,), lo, hi + 1, jnp.int32)
    else:
        tau = (local_epochs * -(-counts // batch_size)).astype(jnp.int32)
    tau = jnp.where(has_data, tau, 0)
    if work.stragglers > 0:
        n_slow = jnp.round(work.stragglers * jnp.sum(has_data)).astype(jnp.int32)
        priority = jnp.where(has_data, jax.random.uniform(pick_key, (k,)), 2.0)
        slow = jnp.argsort(jnp.argsort(priority)) < n_slow
        if work.straggler_policy == "drop":
            partial = jnp.zeros_like(tau)
        else:
            u = jax.random.uniform(part_key, (k,))
            partial = jnp.maximum(1 + jnp.floor(u * (tau - 1)).astype(jnp.int32), 1)
            partial = jnp.minimum(partial, tau)
        tau = jnp.where(slow, partial, tau)
    if work.dropout > 0:
        tau = jnp.where(jax.random.bernoulli(drop_key, work.dropout, (k,)), 0, tau)
    return tau.astype(jnp.int32)


def participation_weights(raw: jax.Array, steps: jax.Array) -> jax.Array:
    """The unnormalised aggregation weights of a round with budgets: ``raw`` (N^k or the
    sampling's weights, float ``[K]``) where the client ran at least one step, else 0 (it
    uploads nothing); normalising them renormalises the others."""
    return jnp.where(steps > 0, raw.astype(jnp.float32), 0.0)
