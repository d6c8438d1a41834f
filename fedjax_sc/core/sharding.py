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
``jax.devices()`` (all processes' devices; :func:`client_mesh` does this). Every process loads
the same scene and calls the same functions; :func:`put_clients` gives each process only the
client rows of its own devices (``jax.make_array_from_callback``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

CLIENTS = "clients"


def client_mesh(devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A 1-D mesh with the axis ``"clients"`` over ``devices`` (default: ``jax.devices()``,
    every device of every process)."""
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

    def put(x):
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] % mesh.size:
            raise ValueError(f"a client axis of {x.shape[:1]} does not split over "
                             f"{mesh.size} devices; pad it (participation.pad_clients)")
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
