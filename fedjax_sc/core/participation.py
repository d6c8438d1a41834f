"""Partial participation: M of N clients per round (McMahan et al. 2017, Alg. 1 "S_t <- random
set of m clients"; FedNLP, Lin et al. 2022).

Each round the host samples M client indices, gathers their rows of the (host-side) client data
and private state, the compiled round runs on those M, and the new private state is scattered
back. The compiled round, its cost and its device memory depend on M only; the N clients'
data and private leaves stay in host memory (numpy).

The sampled clients' example axis is padded to the largest *sampled* client rounded up to the
next power of two (at most the scene's largest client; :func:`example_bucket`), not to the
scene's largest client: a round of one-review clients does not carry the longest client's
padding. The compiled round is then one program per bucket, at most
``len(example_ladder(n_max))`` = ``ceil(log2 n_max) + 1`` of them. Padded examples are masked
and a client's real examples keep their order and keys whatever the padding
(:func:`fedjax_sc.core.local.epoch_schedule`), so the bucket changes no figure.

Sampling is a pure function of ``(seed, round)``, so a resumed run samples the same clients.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc import streams

SAMPLINGS = ("uniform", "size")


def sample_clients(seed: int, round_index: int, counts: np.ndarray, num_sampled: int,
                   sampling: str = "uniform") -> np.ndarray:
    """The draws of one round's clients.

    ``uniform``: M distinct clients, every client equally likely (McMahan et al. 2017), to be
    aggregated with weights N^k. ``size``: M independent draws with probability N^k / N, with
    replacement (Li et al. 2020, "On the convergence of FedAvg on non-IID data", scheme I),
    each draw weighed 1 / M, so that the expected aggregate is the full N^k-weighted mean. A
    client drawn twice trains once and weighs its number of draws (:func:`distinct`,
    :func:`aggregation_weights`): the aggregate a deterministic client update would give
    scheme I, one update per client and round, so the state it keeps stays its own (SCAFFOLD's
    c_i, FedDyn's h_k). (Drawn without replacement, equal weights would favour the small
    clients: at N^k = 10, 10, 80 and M = 2 the expected weights are 0.25, 0.25, 0.49 instead
    of 0.1, 0.1, 0.8.)

    Args:
      seed: the run's seed.
      round_index: the round (1-based as in the logs; any int works).
      counts: int ``[N]``, N^k of every client.
      num_sampled: M, 1 <= M <= N.
      sampling: ``uniform`` or ``size``.

    Returns:
      int64 ``[M]``, sorted client indices: distinct under ``uniform``, possibly repeated
      under ``size`` (never a client without data); :func:`distinct` gives the clients
      that train and their draws.

    Raises:
      ValueError: M outside ``[1, N]``, no client with data under ``size``, or an unknown
        sampling.
    """
    counts = np.asarray(counts)
    n = len(counts)
    if sampling not in SAMPLINGS:
        raise ValueError(f"unknown sampling {sampling!r}; choose from {SAMPLINGS}")
    if not 1 <= num_sampled <= n:
        raise ValueError(f"cannot sample {num_sampled} of {n} clients")
    rng = np.random.default_rng([seed, streams.SAMPLING, round_index])
    if sampling == "uniform":
        return np.sort(rng.choice(n, size=num_sampled, replace=False))
    if not np.any(counts > 0):
        raise ValueError(f"size sampling: none of the {n} clients has data")
    return np.sort(rng.choice(n, size=num_sampled, replace=True, p=counts / counts.sum()))


def distinct(draws: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The clients of a round's draws (:func:`sample_clients`), each once, and how many times
    each was drawn: ``(int64 [K'], int64 [K'])``, sorted; K' = M but under size sampling."""
    return np.unique(np.asarray(draws), return_counts=True)


def aggregation_weights(counts: np.ndarray, sampling: str,
                        draws: np.ndarray | None = None) -> np.ndarray:
    """Unnormalised aggregation weights of a round's clients: N^k under uniform sampling
    (FedAvg), the number of times each was drawn under size sampling (the draws already
    weigh by N^k, so the expected aggregate is the full N^k-weighted mean; Li et al. 2020,
    scheme I). A client without data weighs 0.

    Args:
      counts: N^k of the round's clients ``[K]``.
      sampling: ``uniform`` or ``size``.
      draws: the clients' draws ``[K]`` (:func:`distinct`; None: one each).

    Returns:
      float32 ``[K]``.
    """
    counts = np.asarray(counts, np.float32)
    if sampling == "uniform":
        return counts
    times = np.ones_like(counts) if draws is None else np.asarray(draws, np.float32)
    return np.where(counts > 0, times, 0.0).astype(np.float32)


def gather(tree: Any, idx: np.ndarray, axis: int = 0) -> Any:
    """Rows ``idx`` of every leaf's client axis ``axis`` (1 for a population's ``[P, N, ...]``
    leaves); ``None`` leaves stay ``None``."""
    return jax.tree.map(lambda x: x[(slice(None),) * axis + (idx,)], tree)


def scatter(tree: Any, idx: np.ndarray, rows: Any) -> Any:
    """``tree`` with rows ``idx`` of every leaf replaced by ``rows`` (host numpy, a copy).

    ``rows`` may have more rows than ``idx`` (padding clients added for the device mesh):
    only the first ``len(idx)`` are written.
    """
    fresh = jax.tree.map(lambda x: np.array(x, order="C"), tree)
    write(fresh, idx, rows)
    return fresh


def write(tree: Any, idx: np.ndarray, rows: Any) -> None:
    """Writes ``rows`` into rows ``idx`` (distinct) of every leaf of ``tree`` in place
    (writable host NumPy; only the first ``len(idx)`` rows of ``rows``, as :func:`scatter`)."""
    def put(x, r):
        x[idx] = np.asarray(r)[: len(idx)]

    jax.tree.map(put, tree, rows)


def by_blocks(fn: Callable[..., Any], num_clients: int, block: int, trees: Sequence[Any],
              axes: Sequence[int], out_axis: int = 0) -> Any:
    """``fn(lo, *rows)`` on the clients in blocks of ``block``, so that a device holds
    ``block`` clients at a time (one program of that size): ``rows`` are each of ``trees``'
    clients ``lo .. lo + block - 1`` along its client axis (``axes``, 1 for a population's
    ``[P, N, ...]`` leaves), the last block padded with copies of its first client
    (:func:`pad_clients`), whose outputs are dropped; the outputs, host NumPy, joined on
    ``out_axis``."""
    parts = []
    for lo in range(0, num_clients, block):
        idx = np.arange(lo, min(lo + block, num_clients))
        rows = [pad_clients(gather(t, idx, axis=a), block, axis=a)[0]
                for t, a in zip(trees, axes, strict=True)]
        out = jax.device_get(fn(lo, *rows))
        parts.append(jax.tree.map(
            lambda x, n=len(idx): np.take(np.asarray(x), np.arange(n), axis=out_axis), out))
    return jax.tree.map(lambda *xs: np.concatenate(xs, axis=out_axis), *parts)


def pad_clients(tree: Any, multiple: int, axis: int = 0) -> tuple[Any, int]:
    """Pads the client axis ``axis`` of every leaf (1 for a population's ``[P, N, ...]``
    leaves) to a multiple of ``multiple`` with copies of the first client (so that it splits
    evenly over the devices of a mesh, or fills a block of a fixed size).

    Returns:
      ``(padded tree, number of real clients)``: host NumPy leaves when padded, ``tree``
      itself otherwise. Callers must make the copies inert: the round gives a client with an
      all-False example mask and zero weight no steps and no say; the Ap phase drops their
      results.
    """
    leaves = jax.tree.leaves(tree)
    if not leaves:
        return tree, 0
    k = int(leaves[0].shape[axis])
    extra = (-k) % multiple
    if not extra:
        return tree, k

    def pad(x):
        x = np.asarray(x)
        first = np.take(x, [0], axis=axis)
        return np.concatenate([x, np.repeat(first, extra, axis=axis)], axis=axis)

    return jax.tree.map(pad, tree), k


PADDINGS = ("bucket", "sampled", "global")
"""How a sampled round pads its clients' example axis: ``bucket`` (the largest sampled client
rounded up by :func:`example_bucket`), ``sampled`` (the largest sampled client exactly: one
program per distinct size) or ``global`` (the scene's largest client, one program)."""


def check_padding(padding: str) -> str:
    """``padding`` when it is one of :data:`PADDINGS`.

    Raises:
      ValueError: another value (names it and the choices).
    """
    if padding not in PADDINGS:
        raise ValueError(f"unknown padding {padding!r}; choose from {PADDINGS}")
    return padding


def example_bucket(n: int, cap: int) -> int:
    """The padded example count for a round whose largest sampled client holds ``n``
    examples: the smallest power of two >= max(n, 1), at most ``cap`` (the scene's largest
    client): one of :func:`example_ladder`'s sizes."""
    return min(1 << max(int(n) - 1, 0).bit_length(), int(cap))


def example_ladder(cap: int) -> list[int]:
    """Every size :func:`example_bucket` gives under ``cap``: 1, 2, 4, ... below ``cap``, then
    ``cap`` (``ceil(log2 cap) + 1`` sizes)."""
    sizes, n = [], 1
    while n < cap:
        sizes.append(n)
        n *= 2
    return sizes + [int(cap)]


def padded_examples(counts: np.ndarray, cap: int, padding: str = "bucket") -> int:
    """The example axis of a round whose sampled clients hold ``counts`` (int ``[M]``) under
    ``padding`` (:data:`PADDINGS`), ``cap`` the scene's largest client.

    Raises:
      ValueError: an unknown padding.
    """
    check_padding(padding)
    largest = int(np.max(counts)) if np.size(counts) else 0
    if padding == "global":
        return int(cap)
    return example_bucket(largest, cap) if padding == "bucket" else min(max(largest, 1), cap)


def trim_examples(data, n: int):
    """``data`` (a ClientData of NumPy arrays, each client's real examples a prefix of the
    example axis) with its example axis cut to ``n`` rows: tokens ``[K, n, L]``, labels and
    mask ``[K, n]``; other fields unchanged. ``n`` must be at least every client's count."""
    if data.tokens.shape[1] == n:
        return data
    return data._replace(tokens=data.tokens[:, :n], labels=data.labels[:, :n],
                         mask=data.mask[:, :n])


def round_data(data, idx: np.ndarray, sampling: str, multiple: int,
               draws: np.ndarray | None = None):
    """Host rows ``idx`` (distinct) of ``data`` (a
    :class:`~fedjax_sc.data.client_data.ClientData` of NumPy arrays) for one round:
    aggregation weights for ``sampling`` and the clients' ``draws``
    (:func:`aggregation_weights`; None under uniform), padded to a multiple of ``multiple``
    clients with inert ones (no examples, no weight, no vocabulary rows)."""
    data = gather(data, idx)
    weights = (None if sampling == "uniform"
               else aggregation_weights(data.counts, sampling, draws))
    data = data._replace(weights=weights)
    data, real = pad_clients(data, multiple)
    if data.num_clients > real:  # padding clients: no examples, no weight
        mask = data.mask.copy()
        mask[real:] = False
        counts = data.counts.copy()
        counts[real:] = 0
        data = data._replace(mask=mask, counts=counts)
        if data.weights is not None:
            w = data.weights.copy()
            w[real:] = 0
            data = data._replace(weights=w)
        if data.vocab_mask is not None:
            vm = data.vocab_mask.copy()
            vm[real:] = False
            data = data._replace(vocab_mask=vm)
    return data


def broadcast_clients(tree: Any, num_clients: int, *, axis: int = 0,
                      host: bool = False) -> Any:
    """Every leaf of one client's ``tree`` repeated on a new client axis of ``num_clients``
    inserted at ``axis`` (1 for a population's ``[P, ...]`` leaves: ``[P, N, ...]``).

    ``host=True`` gives read-only NumPy views (``np.broadcast_to``: no memory per client; a
    client's rows become their own array when first written, as
    :func:`scatter` copies); otherwise ``jnp.broadcast_to``,
    which materialises ``[N, ...]`` (traceable under ``jax.vmap``).
    """
    if not host:
        return _broadcast_on_device(tree, num_clients, axis)

    def put(x):
        x = np.asarray(x)
        return np.broadcast_to(np.expand_dims(x, axis),
                               x.shape[:axis] + (num_clients,) + x.shape[axis:])

    return jax.tree.map(put, tree)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _broadcast_on_device(tree: Any, num_clients: int, axis: int) -> Any:
    """:func:`broadcast_clients` with ``host=False``: one compiled program per tree layout,
    not one per leaf."""
    put = lambda x: jnp.broadcast_to(jnp.expand_dims(x, axis),
                                     x.shape[:axis] + (num_clients,) + x.shape[axis:])
    return jax.tree.map(put, tree)
