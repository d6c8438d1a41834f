"""The clients of each round, handed to the compiled round, and their private leaves kept.

One mechanism, two shapes. :class:`PopulationFeed` serves P members trained as one program
(:mod:`fedjax_sc.core.population`) on a :func:`~fedjax_sc.core.sharding.population_mesh`:
the members' private leaves are stacked ``[P, N, ...]`` and sharded
``P("members", "clients")``; the round's data is one copy ``[K, ...]`` sharded
``P("clients")`` (replicated over the member axis) when every client takes part, or
``[P, M, ...]`` sharded ``P("members", "clients")`` when each member samples its own M
clients. :class:`ClientFeed` is the same feed for one run driven by
:func:`~fedjax_sc.core.round.make_round_step`: one member, no member axis (``[N, ...]``,
``P("clients")`` on a :func:`~fedjax_sc.core.sharding.client_mesh`). Sampling, gathering,
padding and the private leaves' round trip are :mod:`fedjax_sc.core.participation`'s.
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
      data: the round's training split, host arrays
        (``fedjax_sc.data.client_data.host_client_data``), N clients.
      private: the members' per-client pytree, stacked ``[P, N, ...]``: the private leaves
        (``ClientStates.private``), or a whole ``ClientStates`` with the algorithm's own
        client state (as the training loop passes it); ``[N, ...]`` without the member axis.
        Any pytree whose leaves lead with the client axis is gathered, kept and scattered
        the same way.
      mesh: a :func:`~fedjax_sc.core.sharding.population_mesh` whose member axis divides P
        (without the member axis: any mesh with a ``clients`` axis; the clients split over
        it, replicated over the others).
      seeds: the members' seeds (their sampling draws), ``[P]``.
      num_sampled: M per round; None = all N.
      sampling: ``uniform`` or ``size`` (:func:`~fedjax_sc.core.participation.sample_clients`).
      num_clients: N when ``data`` holds only clients ``first..first + n - 1`` of them (one
        process's share, every client taking part: at least the rows of
        :func:`~fedjax_sc.core.sharding.client_block` that are real clients); None: ``data``
        holds all N.
      first: the first client ``data`` holds.
      member_axis: False for one member whose private leaves and round data carry no member
        axis (:class:`ClientFeed`).
      padding: how a sampled round pads the example axis
        (:data:`~fedjax_sc.core.participation.PADDINGS`; default ``bucket``: the largest
        sampled client's size rounded up to a power of two); every client taking part uses
        the scene's largest client.
      own: the host leaves of ``private`` are the feed's to write (the caller keeps no other
        use of them: the training loop's restored states); otherwise the first update
        copies them. Read-only leaves (round-0 views) and ones not in C order are copied
        either way.

    Raises:
      ValueError: M outside ``[1, N]``, an unknown sampling or padding, P not splitting over
        the mesh's member axis (or P != 1 without the member axis), or a share with sampling
        or without the rows its devices need.
    """

    def __init__(self, data, private, mesh, seeds: Sequence[int],
                 num_sampled: int | None = None, sampling: str = "uniform",
                 num_clients: int | None = None, first: int = 0, member_axis: bool = True,
                 padding: str = "bucket", own: bool = False):
        self.padding = participation.check_padding(padding)
        self.slots = self.examples = 0  # example slots and real examples of the last inputs
        self._sampled: list[Any] = [None] * len(seeds)  # (idx, draws) of the last sample()
        self.mesh, self.seeds = mesh, [int(s) for s in seeds]
        self.size = len(self.seeds)
        self.member_axis = member_axis
        self.devices = sharding.client_devices(mesh)
        if not member_axis and self.size != 1:
            raise ValueError(f"{self.size} members need a member axis")
        if member_axis and self.size % int(dict(mesh.shape)[sharding.MEMBERS]):
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
                                            "uniform", hi - lo)  # all: weighed by N^k
            self._cached = sharding.put_client_block(rows, mesh, self.round_size, lo)
        else:
            self._cached = None if self.partial else sharding.put_clients(
                participation.round_data(data, np.arange(self.num_clients), "uniform",
                                         self.devices), mesh)  # all: weighed by N^k
        self.private = (self._place(private) if self.resident
                        else jax.tree.map(np.asarray, private))
        self._own = own
        self._owned = False  # whether the host leaves are the feed's own to write

    @property
    def round_size(self) -> int:
        """Clients on the round's client axis: M padded to a multiple of the client axis."""
        return -(-self.num_sampled // self.devices) * self.devices

    def sample(self, round_index: int) -> list[np.ndarray]:
        """Every member's clients for the round, distinct and sorted (all N, in order,
        without sampling); their draws (:func:`~fedjax_sc.core.participation.distinct`, one
        each but under size sampling) weigh them when :meth:`inputs` gets these clients
        (other clients: one draw each)."""
        if not self.partial:
            return [np.arange(self.num_clients)] * self.size
        self._sampled = [participation.distinct(participation.sample_clients(
            seed, round_index, self.data.counts, self.num_sampled, self.sampling))
            for seed in self.seeds]
        return [idx for idx, _ in self._sampled]

    def inputs(self, idxs: Sequence[np.ndarray]) -> tuple[Any, Any]:
        """``(data, private)`` of every member's clients ``idxs[i]`` on the mesh: ``data``
        ``[K, ...]`` shared (all clients) or ``[P, K, ...]`` (sampled), ``private``
        ``[P, K, ...]``, K = :attr:`round_size` (no P without the member axis)."""
        if self._cached is not None:
            data = self._cached
            self.slots = self.size * self._cached.mask.shape[-2] * self._cached.mask.shape[-1]
            self.examples = self.size * int(np.sum(self.data.counts))
        else:
            # K' <= M distinct clients under size sampling: padded to the round's K
            rows = [participation.round_data(self.data, idx, self.sampling, self.round_size,
                                             self._draws_of(i, idx))
                    for i, idx in enumerate(idxs)]
            n = participation.padded_examples(np.concatenate([r.counts for r in rows]),
                                              self.data.mask.shape[1], self.padding)
            rows = [participation.trim_examples(r, n) for r in rows]
            self.slots = sum(r.mask.size for r in rows)
            self.examples = sum(int(r.counts.sum()) for r in rows)
            data = self._place(self._stack(rows))
        if self.resident:
            return data, self.private
        rows = [participation.pad_clients(participation.gather(self.member_private(i), idx),
                                          self.round_size)[0] for i, idx in enumerate(idxs)]
        return data, self._place(self._stack(rows))

    @property
    def padding_ratio(self) -> float | None:
        """The last :meth:`inputs`' example slots over its real examples (every member's; 1.0:
        no padding; the mesh's padding clients included); None before any or without
        examples."""
        return self.slots / self.examples if self.examples else None

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
        # The first update copies the states it was given unless they are its own (a
        # caller's arrays are never written; round-0 views cannot be); later ones write in
        # place, so the host holds the states once. Nothing reads them meanwhile: a
        # checkpoint is on disk before the next round starts (the run waits for each save),
        # and the round's inputs are copies of the sampled rows. C order: a copy of a
        # stride-0 view in NumPy's default order would put the client axis innermost.
        if not self._owned:
            def own(x):
                if self._own and x.flags.writeable and x.flags.c_contiguous:
                    return x
                return np.array(x, order="C")

            self.private = jax.tree.map(own, self.private)
            self._owned = True
        for i, idx in enumerate(idxs):
            if keep[i]:
                participation.write(self._member(self.private, i), idx, self._member(rows, i))

    def _draws_of(self, i: int, idx: np.ndarray) -> np.ndarray | None:
        """Member ``i``'s draws of clients ``idx``: those of the last :meth:`sample` where
        ``idx`` is what it returned, else one each."""
        sampled = self._sampled[i]
        if sampled is not None and np.array_equal(sampled[0], idx):
            return sampled[1]
        return None

    def member_private(self, i: int) -> Any:
        """Member ``i``'s private leaves ``[N, ...]`` (device arrays when resident, else
        NumPy)."""
        return self._member(self.private, i)

    def _member(self, tree: Any, i: int) -> Any:
        return jax.tree.map(lambda x: x[i], tree) if self.member_axis else tree

    def _stack(self, trees: Sequence[Any]) -> Any:
        """The members' host pytrees on a leading member axis (NumPy); the one tree without
        the member axis."""
        if not self.member_axis:
            return trees[0]
        return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *trees)

    def _place(self, tree: Any) -> Any:
        if self.member_axis:
            return sharding.put_members(tree, self.mesh, clients=True)
        return sharding.put_clients(tree, self.mesh)


class ClientFeed:
    """Hands one run's compiled round (:func:`~fedjax_sc.core.round.make_round_step`) its
    clients, round after round, and keeps every client's private leaves: a
    :class:`PopulationFeed` of one member without the member axis.

    With all N clients taking part and N a multiple of the mesh's devices, data and private
    leaves stay on the devices (sharded over clients) for the whole run. Otherwise (M < N
    sampled, or padding needed) they live on the host: each round gathers the sampled rows,
    pads them to a multiple of the devices with inert clients, places them on the mesh, and
    :meth:`update` scatters the new private leaves back.

    Args:
      data: the round's training split, host arrays
        (``fedjax_sc.data.client_data.host_client_data``), N clients.
      private: the N clients' private leaves (``ClientStates.private``), leading axis N.
      mesh: the device mesh (``sharding.client_mesh``; a 2-D ``population_mesh`` too: the
        clients split over its ``clients`` axis, replicated over its members).
      num_sampled: M per round; None = all N.
      sampling: ``uniform`` or ``size`` (:func:`~fedjax_sc.core.participation.sample_clients`).
      seed: the run's seed (sampling draws).
      padding: the example axis of a sampled round (:class:`PopulationFeed`).

    Raises:
      ValueError: M outside ``[1, N]``, an unknown sampling or padding.
    """

    def __init__(self, data, private, mesh, num_sampled: int | None = None,
                 sampling: str = "uniform", seed: int = 0, padding: str = "bucket"):
        self._feed = PopulationFeed(data, private, mesh, [seed], num_sampled, sampling,
                                    member_axis=False, padding=padding)

    @property
    def private(self) -> Any:
        """The N clients' private leaves ``[N, ...]`` (device arrays when resident, else
        NumPy)."""
        return self._feed.private

    @property
    def num_clients(self) -> int:
        return self._feed.num_clients

    @property
    def num_sampled(self) -> int:
        return self._feed.num_sampled

    @property
    def round_size(self) -> int:
        """Clients on the round's client axis: M padded to a multiple of the devices."""
        return self._feed.round_size

    @property
    def padding_ratio(self) -> float | None:
        """The last inputs' example slots over real examples (:class:`PopulationFeed`)."""
        return self._feed.padding_ratio

    def sample(self, round_index: int) -> np.ndarray:
        """The round's clients, distinct and sorted (all N, in order, without sampling; a
        client drawn twice under size sampling weighs 2 in the next :meth:`inputs`)."""
        return self._feed.sample(round_index)[0]

    def inputs(self, idx: np.ndarray) -> tuple[Any, Any]:
        """``(data, private)`` of clients ``idx`` on the mesh (:attr:`round_size` clients)."""
        return self._feed.inputs([idx])

    def update(self, idx: np.ndarray, private) -> None:
        """Keeps the round's new private leaves of clients ``idx`` (padding rows dropped)."""
        self._feed.update([idx], private, [True])


class CompiledRounds:
    """A jitted round compiled ahead of time once per distinct input shape (a sampled round's
    example axis takes one of :func:`~fedjax_sc.core.participation.example_ladder`'s sizes):
    ``compile(*args)`` lowers and compiles for ``args``' shapes, calling it runs the program
    of the arguments' shapes, compiling it first when it is new.

    Args:
      jitted: a ``jax.jit``-ed function (donation and shardings as its ``jit`` says).
    """

    def __init__(self, jitted):
        self.jitted, self.programs = jitted, {}

    def compile(self, *args) -> Any:
        """The compiled program for ``args``' shapes and dtypes (compiled on first use)."""
        leaves, tree = jax.tree.flatten(args)
        key = (tree, tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves))
        if key not in self.programs:
            self.programs[key] = self.jitted.lower(*args).compile()
        return self.programs[key]

    def __call__(self, *args) -> Any:
        return self.compile(*args)(*args)
