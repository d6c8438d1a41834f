"""The client axis sharded over devices with ``jax.sharding`` (one code path for 1 or many).

A 1-D :class:`jax.sharding.Mesh` with the axis ``"clients"`` spans the devices. Every array
with a leading client axis (the round's :class:`~fedjax_sc.core.round.ClientData`, the clients'
private leaves) is placed with ``NamedSharding(mesh, P("clients"))``: each device holds
``K / num_devices`` clients. The server state is replicated (``P()``). The compiled round is
the same function as on one device: under ``jax.jit`` the ``vmap`` over clients becomes
per-device work on the local clients (XLA's SPMD partitioner), and the weighted mean over the
client axis becomes an all-reduce. Nothing in the algorithms knows about devices.

K must be a multiple of the number of devices; :func:`fedjax_sc.core.participation.pad_clients`
adds inert padding clients (no examples, zero weight) where it is not.

Multi-host (several processes, e.g. TPU pods or several GPU hosts): call
``jax.distributed.initialize()`` at the start of every process, then build the mesh over
``jax.devices()`` (all processes' devices; :func:`client_mesh` does this). Every process calls
the same functions; :func:`put_clients` gives each process only the client rows of its own
devices (``jax.make_array_from_callback``) from the whole scene, :func:`put_client_block` from
the rows of :func:`client_block` alone (a process that loaded only its own clients).

Populations (:mod:`fedjax_sc.core.population`: P members stacked on a leading member axis)
use a 2-D mesh ``members x clients`` (:func:`population_mesh`): the member axis first, laid
over the processes (process p's devices are consecutive rows, so with P a multiple of the
process count a process holds whole members), the client axis within. A member's server state
is placed ``P("members")``, its private leaves ``P("members", "clients")`` and the round's
data ``P("clients")`` (replicated over the members) or ``P("members", "clients")`` when each
member samples its own clients (:func:`put_members`). A 1 x D mesh is the 1-D client mesh.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

CLIENTS = "clients"
MEMBERS = "members"


def client_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh with the axis ``"clients"`` over ``devices`` (default: ``jax.devices()``,
    every device of every process).

    Raises:
      ValueError: no device.
    """
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("client_mesh needs at least one device")
    return Mesh(np.asarray(devices), (CLIENTS,))


def put_clients(tree: Any, mesh: Mesh) -> Any:
    """Places every leaf (numpy or jax, leading client axis) sharded over the mesh's clients.

    Raises:
      ValueError: a leaf's client axis is not a multiple of the number of devices.
    """
    sharding = NamedSharding(mesh, P(CLIENTS))
    devices = client_devices(mesh)

    def put(x):
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] % devices:
            raise ValueError(f"a client axis of {x.shape[:1]} does not split over "
                             f"{devices} devices; pad it (participation.pad_clients)")
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

    return jax.tree.map(put, tree)


def client_block(mesh: Mesh, num_rows: int, process: int | None = None) -> tuple[int, int]:
    """``(first, stop)``: the rows of a client axis of ``num_rows`` (a multiple of the mesh's
    client axis), sharded ``P("clients")`` or ``P("members", "clients")``, that the devices of
    ``process`` (default: this one) hold; contiguous, the smallest range covering them.

    Raises:
      ValueError: ``num_rows`` does not split over the client axis, or the process has no
        device in the mesh.
    """
    c = client_devices(mesh)
    if num_rows % c:
        raise ValueError(f"a client axis of {num_rows} does not split over {c} devices")
    process = jax.process_index() if process is None else process
    columns = [j for (_, j), d in np.ndenumerate(mesh.devices) if d.process_index == process]
    if not columns:
        raise ValueError(f"process {process} has no device in the mesh")
    block = num_rows // c
    return min(columns) * block, (max(columns) + 1) * block


def put_client_block(tree: Any, mesh: Mesh, num_rows: int, first: int) -> Any:
    """Places every leaf, which holds rows ``first..first + len - 1`` of a client axis of
    ``num_rows`` (NumPy, leading axis), as one global array ``[num_rows, ...]`` sharded
    ``P("clients")``: each process gives only its own devices' rows, so each needs only the
    rows of :func:`client_block` (:func:`put_clients` for a process that holds them all).

    Raises:
      ValueError: a device of this process needs a row the leaf does not hold.
    """
    sharding = NamedSharding(mesh, P(CLIENTS))

    def put(x):
        x = np.asarray(x)

        def rows(idx):
            lo, hi, _ = idx[0].indices(num_rows)
            if lo < first or hi > first + x.shape[0]:
                raise ValueError(f"rows {lo}..{hi - 1} of the client axis are not among the "
                                 f"rows {first}..{first + x.shape[0] - 1} this process holds")
            return x[(slice(lo - first, hi - first),) + tuple(idx[1:])]

        return jax.make_array_from_callback((num_rows,) + x.shape[1:], sharding, rows)

    return jax.tree.map(put, tree)


def client_devices(mesh: Mesh) -> int:
    """The size of the mesh's ``"clients"`` axis: the devices a client axis splits over."""
    return int(dict(mesh.shape)[CLIENTS])


def parse_mesh(text: str) -> tuple[int, int]:
    """``"2x4"`` -> ``(2, 4)``: the ``--mesh MEMBERSxCLIENTS`` flag.

    Raises:
      ValueError: not two positive integers joined by ``x`` (names the flag).
    """
    parts = str(text).lower().split("x")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise ValueError(f"--mesh {text}: write MEMBERSxCLIENTS, e.g. 2x4 (two positive "
                         f"integers whose product is the number of devices)")
    return int(parts[0]), int(parts[1])


def mesh_shape(members: int, devices: int, processes: int = 1) -> tuple[int, int]:
    """The automatic ``(member axis, client axis)`` sizes for ``members`` members on
    ``devices`` devices in ``processes`` processes: the largest member-axis size dividing
    both ``members`` and ``devices``, among those that are a multiple of ``processes`` (each
    process then holds whole members) when any is; ``(1, devices)`` for one member."""
    sizes = [m for m in range(1, devices + 1) if members % m == 0 and devices % m == 0]
    whole = [m for m in sizes if m % processes == 0]
    m = max(whole or sizes)
    return m, devices // m


def population_mesh(members: int, shape: tuple[int, int] | str | None = None,
                    devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 2-D mesh ``("members", "clients")`` over ``devices`` (default: ``jax.devices()``,
    every device of every process) for a population of ``members`` members.

    Args:
      members: P, the population's size (1: a single run, a ``1 x D`` mesh).
      shape: ``(m, c)`` or ``"MxC"`` (``--mesh``); None: :func:`mesh_shape`.
      devices: the devices, ordered here by (process, id) so that each process's devices
        are consecutive rows of the member axis.

    Raises:
      ValueError: no device, ``m * c`` not the number of devices, or ``m`` not dividing
        ``members`` (one line naming ``--mesh``).
    """
    devices = sorted(jax.devices() if devices is None else devices,
                     key=lambda d: (d.process_index, d.id))
    if not devices:
        raise ValueError("population_mesh needs at least one device")
    if shape is None:
        shape = mesh_shape(members, len(devices), len({d.process_index for d in devices}))
    m, c = parse_mesh(shape) if isinstance(shape, str) else shape
    if m * c != len(devices):
        raise ValueError(f"--mesh {m}x{c}: {m * c} devices, but the run has {len(devices)} "
                         f"(MEMBERS x CLIENTS must be the number of devices)")
    if members % m:
        raise ValueError(f"--mesh {m}x{c}: {members} member(s) do not split over a member "
                         f"axis of {m} (it must divide the number of members)")
    return Mesh(np.asarray(devices).reshape(m, c), (MEMBERS, CLIENTS))


def member_sharding(mesh: Mesh, clients: bool) -> NamedSharding:
    """``P("members", "clients")`` (``clients``: leaves ``[P, K, ...]``) or ``P("members")``
    (leaves ``[P, ...]``) on a :func:`population_mesh`."""
    return NamedSharding(mesh, P(MEMBERS, CLIENTS) if clients else P(MEMBERS))


def put_members(tree: Any, mesh: Mesh, clients: bool) -> Any:
    """Places every leaf (numpy or jax, leading member axis ``[P, ...]``, then a client axis
    when ``clients``) as :func:`member_sharding` says; each process places only its own
    devices' blocks.

    Raises:
      ValueError: a member axis that does not split over the member axis of the mesh, or a
        client axis that does not split over its client axis.
    """
    sharding = member_sharding(mesh, clients)
    m, c = int(dict(mesh.shape)[MEMBERS]), client_devices(mesh)

    def put(x):
        x = np.asarray(x)
        if x.ndim < 1 + clients or x.shape[0] % m or (clients and x.shape[1] % c):
            raise ValueError(f"an array of shape {x.shape} does not split over a "
                             f"{m} x {c} mesh of members x clients")
        return jax.make_array_from_callback(x.shape, sharding, lambda idx: x[idx])

    return jax.tree.map(put, tree)


def put_replicated(tree: Any, mesh: Mesh) -> Any:
    """Places every leaf replicated on all the mesh's devices (the server state)."""
    sharding = NamedSharding(mesh, P())
    return jax.tree.map(
        lambda x: jax.make_array_from_callback(np.shape(x), sharding,
                                               lambda idx: np.asarray(x)[idx]), tree)


def to_host(tree: Any) -> Any:
    """Every leaf as a NumPy array on this host, whole: the leaves sharded over several
    processes' devices (not fully addressable here) are gathered from all of them, in one
    compiled all-gather for those placed with a ``NamedSharding`` (a collective: every
    process must call it, as ``multihost_utils.process_allgather``, which gathers the
    others); a replicated leaf is read from this process's own copy."""
    from jax.experimental import multihost_utils
    leaves, treedef = jax.tree.flatten(tree)
    far = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)
           and not x.is_fully_addressable and not x.sharding.is_fully_replicated]
    named = [i for i in far if isinstance(leaves[i].sharding, NamedSharding)]
    if named:
        whole = [leaves[i].sharding.update(spec=P()) for i in named]
        gathered = jax.jit(_identity, out_shardings=whole)([leaves[i] for i in named])
        for i, x in zip(named, gathered):
            leaves[i] = x

    def get(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            if x.sharding.is_fully_replicated:
                return np.asarray(x.addressable_data(0))
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(jax.device_get(x))

    return jax.tree.unflatten(treedef, [get(x) for x in leaves])


def _identity(x: Any) -> Any:
    return x


def local(tree: Any) -> Any:
    """``tree`` with every leaf that spans other processes' devices gathered into a NumPy
    array here (:func:`to_host`, a collective: every process must call it); every other leaf
    as it is. With one process, ``tree`` itself: a whole computation on the result then runs
    in this process alone (the evaluation, the Ap phase)."""
    leaves, treedef = jax.tree.flatten(tree)
    far = [i for i, x in enumerate(leaves)
           if isinstance(x, jax.Array) and not x.is_fully_addressable]
    if not far:
        return tree
    for i, x in zip(far, to_host([leaves[i] for i in far])):
        leaves[i] = x
    return jax.tree.unflatten(treedef, leaves)
