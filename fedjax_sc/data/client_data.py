"""A split of a scene as the round's input: every client's examples stacked on a leading client
axis (:class:`ClientData`), as host arrays or on a device, optionally with each client's token
ids remapped to its local vocabulary V^k (Li et al. 2021, Remark 3)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.data.scenes import local_vocabularies
from fedjax_sc.data.vocab import PAD


class ClientData(NamedTuple):
    """All clients' examples of one split, stacked on a leading client axis (device arrays).

    Attributes:
      tokens: int32 ``[num_clients, max_examples, len]``. Global vocabulary ids, or -- when
        ``vocab_ids`` is given -- ids into the client's local vocabulary ``vocab_ids[k]``.
      labels: int32 ``[num_clients, max_examples]``.
      mask: bool ``[num_clients, max_examples]``, True on real examples.
      counts: int32 ``[num_clients]``, N^k.
      vocab_ids: optional int32 ``[num_clients, R]``: client k's local vocabulary V^k as global
        row ids (PAD and UNK first, padded with PAD).
      vocab_mask: optional bool ``[num_clients, R]``, False on the padding of ``vocab_ids``.
      weights: optional float32 ``[num_clients]``, unnormalised aggregation weights; None:
        N^k (FedAvg). Size-proportional client sampling passes each sampled client's number
        of draws, and a padding client (added to fill a device mesh or a round) 0.
    """

    tokens: jax.Array
    labels: jax.Array
    mask: jax.Array
    counts: jax.Array
    vocab_ids: jax.Array | None = None
    vocab_mask: jax.Array | None = None
    weights: jax.Array | None = None

    @property
    def num_clients(self) -> int:
        return int(self.tokens.shape[0])


def row_masks(clients: ClientData) -> jax.Array | None:
    """bool ``[K, R]``: True on the entries of ``clients.vocab_ids`` that are words of V^k
    (the padding of ``vocab_ids`` and the ``PAD`` row excluded); ``None`` without
    ``vocab_ids``. These are the rows a client uploads and the server aggregates."""
    if clients.vocab_ids is None:
        return None
    return clients.vocab_mask & (clients.vocab_ids != PAD)


def vocab_rows(clients: ClientData) -> tuple[jax.Array, jax.Array]:
    """``(vocab_ids, vocab_mask)`` of the clients, or int32 zeros ``[K, 1]`` for both without
    local vocabularies (nothing is gathered by rows then)."""
    if clients.vocab_ids is not None:
        return clients.vocab_ids, clients.vocab_mask
    return (jnp.zeros((clients.num_clients, 1), jnp.int32),) * 2


def client_data(arrays: Any, local_vocab: bool = False) -> ClientData:
    """Moves one split of a scene (``fedjax_sc.data.scenes.ClientArrays``) to the (default)
    device: :func:`host_client_data`, then ``jnp.asarray`` (:mod:`fedjax_sc.core.sharding`
    places it over a device mesh instead).

    Raises:
      TypeError, ValueError: as :func:`host_client_data`.
    """
    return jax.tree.map(jnp.asarray, host_client_data(arrays, local_vocab))


def host_client_data(arrays: Any, local_vocab: bool = False) -> ClientData:
    """One split of a scene as a :class:`ClientData` of host (numpy) arrays.

    Args:
      arrays: object with numpy ``tokens``, ``labels``, ``mask``, ``counts`` as in ClientArrays.
      local_vocab: if True, remap each client's token ids to its local vocabulary (paper
        Remark 3) so that it trains only its ``R = max_k |V^k|`` rows instead of all V rows.

    Returns:
      The :class:`ClientData` (numpy leaves; ``weights`` None).

    Raises:
      TypeError: ``arrays`` lacks a field, or its token ids are not integers.
      ValueError: no client, tokens not ``[K, n, L]``, or a token id missing from its
        client's local vocabulary (internal check).
    """
    missing = [f for f in ("tokens", "labels", "mask", "counts") if not hasattr(arrays, f)]
    if missing:
        raise TypeError(f"client data need tokens, labels, mask and counts (a scene's "
                        f"ClientArrays, e.g. scene.train); {type(arrays).__name__} lacks "
                        f"{', '.join(missing)}")
    tokens = np.asarray(arrays.tokens)
    if tokens.ndim != 3 or tokens.shape[0] < 1:
        raise ValueError(f"tokens must be [K >= 1 clients, n, L], got shape {tokens.shape}")
    if not np.issubdtype(tokens.dtype, np.integer):
        raise TypeError(f"token ids must be integers, got {tokens.dtype}")
    vocab_ids = vocab_mask = None
    if local_vocab:
        ids, vmask = local_vocabularies(arrays)
        local = np.empty_like(tokens)
        for k in range(tokens.shape[0]):
            real = ids[k][vmask[k]]
            local[k] = np.searchsorted(real, tokens[k])
            if not np.array_equal(real[local[k]], tokens[k]):
                raise ValueError(f"client {k}: a token id is missing from its local vocabulary")
        tokens, vocab_ids, vocab_mask = local, ids, vmask
    return ClientData(tokens, np.asarray(arrays.labels), np.asarray(arrays.mask),
                      np.asarray(arrays.counts), vocab_ids, vocab_mask)
