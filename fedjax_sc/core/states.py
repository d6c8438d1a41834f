"""The states a federated round carries from one round to the next: the server's
(:class:`ServerState`) and every client's (:class:`ClientStates`, stacked on a leading client
axis), their round-0 values (:func:`init_states`) and the check that client data fits them
(:func:`check_clients`). :mod:`fedjax_sc.core.round` builds the round that updates them (and
re-exports these names)."""

from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.base import Algorithm, Params
from fedjax_sc.algorithms.masking import split_private
from fedjax_sc.core import copies
from fedjax_sc.core.participation import broadcast_clients
from fedjax_sc.data.client_data import ClientData


class ServerState(NamedTuple):
    """What the server keeps across rounds.

    Attributes:
      params: the shared leaves of the model (all leaves for FedAvg): the global model.
      round: int32 scalar, the number of rounds completed.
      opt_state: the server optimizer's state (``()`` without a server optimizer).
      upload_state: the upload transform's state (``()`` for the identity upload).
      algorithm: the algorithm's own server state (``Algorithm.hooks.server_init``:
        SCAFFOLD's control variate, FedDyn's h), ``()`` without one.
    """

    params: Params
    round: jax.Array
    opt_state: Any = ()
    upload_state: Any = ()
    algorithm: Any = ()


class ClientStates(NamedTuple):
    """What every client keeps across rounds (FURL/FedPer-style stateful clients).

    Attributes:
      private: the private leaves of all clients, stacked ``[num_clients, ...]`` (an empty dict
        when the algorithm has none). They never leave their client.
      algorithm: every client's own algorithm state (``Algorithm.hooks.client_init``:
        SCAFFOLD's c_i, FedDyn's gradient), stacked ``[num_clients, ...]``; ``()`` without
        one. Kept, sampled and checkpointed with the private leaves.
      upload: every client's upload memory (``UploadTransform.client_init``: error
        feedback's residual), stacked ``[num_clients, ...]``; ``()`` without one. Kept like
        ``algorithm``.
    """

    private: Params
    algorithm: Any = ()
    upload: Any = ()


def check_clients(client_states: ClientStates, clients: ClientData) -> None:
    """Raises, while the round is traced, for client data the round cannot train on.

    Raises:
      TypeError: token ids that are not integers.
      ValueError: no client, or client states for another number of clients than the data
        (names both counts).
    """
    if not jnp.issubdtype(clients.tokens.dtype, jnp.integer):
        raise TypeError(f"token ids must be integers, got {clients.tokens.dtype}")
    k = clients.tokens.shape[0]
    if k < 1:
        raise ValueError("the round needs at least one client, got client data for 0")
    for leaf in jax.tree.leaves(tuple(client_states)):  # private, algorithm, upload states
        if leaf.shape[:1] != (k,):
            raise ValueError(f"client states for {leaf.shape[0] if leaf.ndim else 0} clients "
                             f"but client data for {k}")


def init_states(algorithm: Algorithm, params: Params, num_clients: int, *,
                host: bool = False) -> tuple[ServerState, ClientStates]:
    """Round-0 states: the shared leaves go to the server (with the server optimizer's and the
    upload transform's initial states), every client starts its private leaves from the same
    initial values (the algorithm's local copies made).

    Args:
      algorithm: the algorithm (its leaf rules, local copies, hooks and upload transform).
      params: the model's initial params (one model, no client axis).
      num_clients: N, the leading axis of every client leaf.
      host: build the client states as read-only NumPy views of one client's values
        (:func:`~fedjax_sc.core.participation.broadcast_clients`: no memory per client, nothing
        ``[N, ...]`` on a device), for a run whose client states live on the host (partial
        participation; the checkpoint restore's template). Default: device arrays ``[N, ...]``.

    Raises:
      ValueError: ``num_clients`` < 1, or the algorithm's ``leaf_rules`` do not cover the
        params exactly once.
    """
    if not isinstance(num_clients, numbers.Integral) or num_clients < 1:
        raise ValueError(f"num_clients must be an int >= 1, got {num_clients!r}")
    shared, private = split_private(algorithm, copies.make_copies(params,
                                                                 algorithm.local_copies))
    sent = copies.without_copies(shared, algorithm.local_copies)
    opt_state = (() if algorithm.server_optimizer is None
                 else algorithm.server_optimizer.init(sent))
    hooks = algorithm.hooks
    memory = () if algorithm.upload.client_init is None else algorithm.upload.client_init(sent)
    one = ClientStates(private, hooks.client_init(sent), memory)
    return (ServerState(shared, jnp.zeros((), jnp.int32), opt_state,
                        algorithm.upload.init(sent), hooks.server_init(sent)),
            broadcast_clients(one, num_clients, host=host))
