"""A population's clients on a ``members x clients`` mesh, round after round.

:class:`PopulationFeed` is :class:`~fedjax_sc.core.participation.ClientFeed` for P members
trained as one program (:mod:`fedjax_sc.core.population`) on a
:func:`~fedjax_sc.core.sharding.population_mesh`: the members' private leaves are stacked
``[P, N, ...]`` and sharded ``P("members", "clients")``; the round's data is one copy
``[K, ...]`` sharded ``P("clients")`` (replicated over the member axis) when every client
takes part, or ``[P, M, ...]`` sharded ``P("members", "clients")`` when each member samples
its own M clients. With one member and a ``1 x D`` mesh it places exactly what a
``ClientFeed`` on the 1-D client mesh places.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from fedjax_sc.core import participation, sharding


class PopulationFeed:
    """Hands a population's compiled round its clients and keeps every member's private
    leaves.

    With all N clients taking part and N a multiple of the mesh's client axis, the data and
    the stacked private leaves stay on the devices for the whole run. Otherwise (M < N
    sampled, or padding needed) the private leaves live on the host as NumPy ``[P, N, ...]``:
    each round gathers every member's sampled rows, pads them to a multiple of the client
    axis with inert clients, places them on the mesh, and :meth:`update` scatters the new
    ones back (one all-gather with several processes).

    Args:
      data: the round's training split, host arrays (``round.host_client_data``), N clients.
      private: the members' private leaves, stacked ``[P, N, ...]`` (``ClientStates.private``
        of :func:`~fedjax_sc.core.population.init_from_params`).
      mesh: a :func:`~fedjax_sc.core.sharding.population_mesh` whose member axis divides P.
      seeds: the members' seeds (their sampling draws), ``[P]``.
      num_sampled: M per round; None = all N.
      sampling: ``uniform`` or ``size`` (:func:`~fedjax_sc.core.participation.sample_clients`).
      num_clients: N when ``data`` holds only clients ``first..first + n - 1`` of them (one
        process's share, every client taking part: at least the rows of
        :func:`~fedjax_sc.core.sharding.client_block` that are real clients); None: ``data``
        holds all N.
      first: the first client ``data`` holds.

    Raises:
      ValueError: M outside ``[1, N]``, an unknown sampling, P not splitting over the mesh's
        member axis, or a share with sampling or without the rows its devices need.
    """

    def __init__(self, data, private, mesh, seeds: Sequence[int],
                 num_sampled: int | None = None, sampling: str = "uniform",
                 num_clients: int | None = None, first: int = 0):
        self.mesh, self.seeds = mesh, [int(s) for s in seeds]
        self.size = len(self.seeds)
        self.devices = sharding.client_devices(mesh)
        if self.size % int(dict(mesh.shape)[sharding.MEMBERS]):
            raise ValueError(f"{self.size} members do not split over a member axis of "
                             f"{dict(mesh.shape)[sharding.MEMBERS]}")
        self.data = data
        self.num_clients = data.num_clients if num_clients is None else int(num_clients)
        share = first != 0 or self.num_clients != data.num_clients
        if share and num_sampled is not None and num_sampled < self.num_clients:
            raise ValueError("a process's share of the clients cannot be sampled from: every "
                             "process needs every client's data with --clients-per-round")
        self.num_sampled = self.num_clients if num_sampled is None else num_sampled
        if sampling not in participation.SAMPLINGS:
            raise ValueError(f"unknown sampling {sampling!r}; choose from "
                             f"{participation.SAMPLINGS}")
        if not 1 <= self.num_sampled <= self.num_clients:
            raise ValueError(f"cannot sample {self.num_sampled} of {self.num_clients} clients")
        self.sampling = sampling
        self.partial = self.num_sampled < self.num_clients
        self.resident = not self.partial and self.num_clients % self.devices == 0
        if share:  # this process's rows, inert padding clients after the last real one
            lo, hi = sharding.client_block(mesh, self.round_size)
            real = min(hi, self.num_clients) - lo
            if lo < first or lo + real > first + data.num_clients or real < 1:
                raise ValueError(f"the clients {first}..{first + data.num_clients - 1} lack "
                                 f"rows {lo}..{hi - 1} of this process's devices")
            rows = participation.round_data(data, np.arange(lo - first, lo - first + real),
                                            sampling, hi - lo)
            self._cached = sharding.put_client_block(rows, mesh, self.round_size, lo)
        else:
            self._cached = None if self.partial else sharding.put_clients(
                participation.round_data(data, np.arange(self.num_clients), sampling,
                                         self.devices), mesh)
        self.private = (sharding.put_members(private, mesh, clients=True) if self.resident
                        else jax.tree.map(np.asarray, private))

    @property
    def round_size(self) -> int:
        """Clients on the round's client axis: M padded to a multiple of the client axis."""
        return -(-self.num_sampled // self.devices) * self.devices

    def sample(self, round_index: int) -> list[np.ndarray]:
        """Every member's client indices for the round (all N, in order, without sampling)."""
        if not self.partial:
            return [np.arange(self.num_clients)] * self.size
        return [participation.sample_clients(seed, round_index, self.data.counts,
                                             self.num_sampled, self.sampling)
                for seed in self.seeds]

    def inputs(self, idxs: Sequence[np.ndarray]) -> tuple[Any, Any]:
        """``(data, private)`` of every member's clients ``idxs[i]`` on the mesh: ``data``
        ``[K, ...]`` shared (all clients) or ``[P, K, ...]`` (sampled), ``private``
        ``[P, K, ...]``, K = :attr:`round_size`."""
        if self._cached is not None:
            data = self._cached
        else:
            data = _stack([participation.round_data(self.data, idx, self.sampling,
                                                    self.devices) for idx in idxs])
            data = sharding.put_members(data, self.mesh, clients=True)
        if self.resident:
            return data, self.private
        rows = [participation.pad_clients(participation.gather(self.member_private(i), idx),
                                          self.devices)[0] for i, idx in enumerate(idxs)]
        return data, sharding.put_members(_stack(rows), self.mesh, clients=True)

    def update(self, idxs: Sequence[np.ndarray], private, keep: Sequence[bool]) -> None:
        """Keeps the round's new private leaves ``[P, K, ...]`` of the members whose ``keep``
        is True (a diverged member keeps its last ones; padding rows dropped). A collective
        with several processes when the leaves live on the host."""
        if self.resident:
            self.private = private  # a diverged member's rows are never read again
            return
        if not jax.tree.leaves(private):
            return
        rows = sharding.to_host(private)  # gathered from every process's devices
        kept = jax.tree.map(lambda x: np.array(x, copy=True), self.private)
        for i, idx in enumerate(idxs):
            if keep[i]:
                for x, r in zip(jax.tree.leaves(kept), jax.tree.leaves(rows)):
                    x[i, idx] = r[i, : len(idx)]
        self.private = kept

    def member_private(self, i: int) -> Any:
        """Member ``i``'s private leaves ``[N, ...]`` (device arrays when resident, else
        NumPy)."""
        return jax.tree.map(lambda x: x[i], self.private)


def _stack(trees: Sequence[Any]) -> Any:
    """Same-structured host pytrees stacked on a new leading member axis (NumPy)."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)
