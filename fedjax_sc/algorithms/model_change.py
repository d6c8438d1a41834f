"""Sending the model change compressed: top-k sparsification and probabilistic quantization.

Upload transforms (:class:`~fedjax_sc.algorithms.upload.UploadTransform`) that compose with
:func:`~fedjax_sc.algorithms.upload.chain`. A model's weights do not compress; the change a
client made to them in a round does, so :func:`model_change` sends ``params - start`` (the
shared params the client downloaded, ``UploadContext.start``) and the server adds it back to
what it sent. After it, a compressor:

* :func:`top_k` keeps the ``fraction`` of each leaf's entries of largest magnitude and sends
  them as values and int32 indices (Aji and Heafield 2017, "Sparse Communication for
  Distributed Gradient Descent"; on the model change in federated learning: Sattler et al.
  2019, "Robust and Communication-Efficient Federated Learning From Non-i.i.d. Data").
* :func:`probabilistic_quantization` rounds each entry to one of ``2^bits`` levels evenly
  spaced between the leaf's minimum and maximum, up or down at random so that the server's
  value is unbiased (Konecny et al. 2016, "Federated Learning: Strategies for Improving
  Communication Efficiency", Sec. 3, "probabilistic quantization", with ``bits`` = 1 as
  printed and more bits as its remark on it says).

Example (FedAvg sending a tenth of its change)::

    fedavg(model)._replace(upload=chain(model_change(), top_k(0.1)))

* :func:`scaled_sign` sends each entry's sign and one scale per leaf, the mean magnitude
  (Karimireddy et al. 2019, "Error Feedback Fixes SignSGD and other Gradient Compression
  Schemes", Alg. 2's compressor): 1 bit an entry, biased, the compressor error feedback was
  shown to repair.

and :func:`error_feedback` wraps any of them so that what it drops is not lost: each client keeps
the part of its change the server did not receive and adds it to the next round's change.

Example (FedAvg sending a hundredth of its change, the rest carried over; top-k is
contractive, which the memory needs)::

    fedavg(model)._replace(upload=chain(model_change(), error_feedback(top_k(0.01))))

Choices left open, as implemented: the fraction and the levels are per leaf and per client;
a word table uploaded by rows counts the client's own rows (``UploadContext.row_masks``: its
padding rows are never sent, and k follows its vocabulary's size); error feedback is opt-in
(the compressors alone drop what they do not send, as the papers that introduced them do).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct, traverse_util

from fedjax_sc.algorithms.upload import Params, UploadContext, UploadTransform, encode_upload


@struct.dataclass
class Sparse:
    """A leaf sent as its k entries of largest magnitude (:func:`top_k`).

    Attributes:
      values: float ``[k_max]``, the entries sent; slots past the client's own k hold 0.
      indices: int32 ``[k_max]``, their positions in the flattened leaf; a slot past the
        client's k holds the leaf's size (out of range: the server drops it).
      shape: the leaf's shape (static: known to both ends).
      fraction: the share of entries sent (static).
    """

    values: jax.Array
    indices: jax.Array
    shape: tuple[int, ...] = struct.field(pytree_node=False)
    fraction: float = struct.field(pytree_node=False)

    def wire(self, rows: int | None) -> list[tuple[int, Any]]:
        """``[(k, values' dtype), (k, int32)]``: what crosses the network, k the fraction of
        the leaf's entries (of a table's ``rows`` rows where given, the client's own)."""
        n = math.prod(self.shape) if rows is None else rows * math.prod(self.shape[1:])
        k = _count(self.fraction, n)
        return [(k, self.values.dtype), (k, jnp.int32)]


def _count(fraction: float, entries: Any) -> Any:
    """``max(1, ceil(fraction * entries))``: k of :func:`top_k` (a Python int or an array)."""
    if isinstance(entries, int):
        return max(1, math.ceil(fraction * entries))
    return jnp.maximum(1, jnp.ceil(fraction * entries).astype(jnp.int32))


def _real_entries(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    """bool, ``x``'s shape: True on the entries of the client's own rows (all without a
    row mask)."""
    if mask is None:
        return jnp.ones(x.shape, bool)
    return jnp.broadcast_to(mask.reshape((-1,) + (1,) * (x.ndim - 1)), x.shape)


@struct.dataclass
class Quantized:
    """A leaf sent as ``bits``-bit codes between its minimum and maximum
    (:func:`probabilistic_quantization`).

    Attributes:
      codes: uint8, the leaf's shape, each in ``[0, 2^bits - 1]``.
      low, high: float32 scalars, the leaf's minimum and maximum.
      bits: the bits per entry (static).
    """

    codes: jax.Array
    low: jax.Array
    high: jax.Array
    bits: int = struct.field(pytree_node=False)

    def wire(self, rows: int | None) -> list[tuple[int, Any]]:
        """The codes packed ``bits`` to an entry (a table's ``rows`` rows where given) as
        uint8 bytes, and the two float32 bounds."""
        n = self.codes.size if rows is None else rows * int(np.prod(self.codes.shape[1:]))
        return [(math.ceil(n * self.bits / 8), jnp.uint8), (2, jnp.float32)]


def _no_state(params: Params) -> tuple:
    del params
    return ()


def _start(context: UploadContext | None, who: str) -> Params:
    if context is None or context.start is None:
        raise ValueError(f"{who} needs the params the client started from "
                         f"(UploadContext.start); the round passes them")
    return context.start


def model_change() -> UploadTransform:
    """Sends ``params - start`` and restores ``start + message`` on the server.

    Returns:
      A stateless upload transform: the message has the params' structure. Without anything
      after it in the chain the server restores the params exactly up to float rounding.

    Raises:
      ValueError: at trace time, when the context holds no ``start`` (outside a round).
    """

    def encode(params, state, rng, context=None):
        del state, rng
        start = _start(context, "model_change")
        return jax.tree.map(jnp.subtract, params, start), {}

    def decode(message, state, context=None):
        del state
        return jax.tree.map(jnp.add, _start(context, "model_change"), message)

    return UploadTransform(_no_state, encode, decode)


def top_k(fraction: float) -> UploadTransform:
    """Sends each floating-point leaf as its ``k = max(1, ceil(fraction * n))`` entries of
    largest magnitude, n its entries (a word table's: those of the client's local-vocabulary
    rows, ``UploadContext.row_masks``); the server puts zeros elsewhere.

    Args:
      fraction: in (0, 1]; 1 sends every entry (as values and indices: twice the bytes).

    Returns:
      A stateless upload transform whose message holds a :class:`Sparse` per floating-point
      leaf (integer leaves go as they are); diagnostic ``topk_kept``: the share of the
      message's squared norm the sent entries keep (float32 scalar, 1 when all is sent).

    Raises:
      ValueError: ``fraction`` outside (0, 1].
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"top_k: fraction must be in (0, 1], got {fraction}")

    def one(x, mask):
        """(the leaf's :class:`Sparse`, its real entries' squared norm)."""
        flat = x.reshape(-1)
        k_max = _count(fraction, x.size)
        real = _real_entries(x, mask).reshape(-1)  # a table's padding rows are not the client's
        k = k_max if mask is None else _count(fraction, jnp.sum(real))
        _, indices = jax.lax.top_k(jnp.where(real, jnp.abs(flat), -1.0), k_max)
        valid = jnp.arange(k_max) < k
        sparse = Sparse(jnp.where(valid, flat[indices], 0),
                        jnp.where(valid, indices, flat.size).astype(jnp.int32), x.shape,
                        fraction)
        return sparse, jnp.sum(jnp.where(real, jnp.square(flat), 0.0))

    def encode(params, state, rng, context=None):
        del state, rng
        masks = {} if context is None else context.row_masks
        message, kept, total = traverse_util.flatten_dict(params), 0.0, 0.0
        for path, x in message.items():  # row_masks are keyed by the "/"-joined path
            if jnp.issubdtype(x.dtype, jnp.floating):
                message[path], energy = one(x, masks.get("/".join(path)))
                kept, total = kept + jnp.sum(jnp.square(message[path].values)), total + energy
        share = jnp.where(total > 0, kept / jnp.maximum(total, 1e-30), 1.0)
        return (traverse_util.unflatten_dict(message),
                {"topk_kept": jnp.asarray(share, jnp.float32)})

    def decode(message, state, context=None):
        del state, context
        dense = lambda s: (jnp.zeros(math.prod(s.shape), s.values.dtype)
                           .at[s.indices].set(s.values, mode="drop").reshape(s.shape))
        return jax.tree.map(lambda s: dense(s) if isinstance(s, Sparse) else s, message,
                            is_leaf=lambda s: isinstance(s, Sparse))

    return UploadTransform(_no_state, encode, decode)


def probabilistic_quantization(bits: int) -> UploadTransform:
    """Sends each floating-point leaf as ``bits``-bit codes: entry x in [low, high] (the leaf's
    minimum and maximum) goes to one of the two levels around it, the upper one with
    probability proportional to its distance from the lower, so the server's value is x in
    expectation (Konecny et al. 2016, Sec. 3).

    Args:
      bits: 1 to 8 bits per entry (2^bits levels).

    Returns:
      A stateless upload transform whose message holds a :class:`Quantized` per
      floating-point leaf; leaf i draws from ``fold_in(rng, i)``. A constant leaf is sent
      exactly.

    Raises:
      ValueError: ``bits`` outside 1..8.
    """
    if not isinstance(bits, int) or not 1 <= bits <= 8:
        raise ValueError(f"probabilistic_quantization: bits must be an int in 1..8, got "
                         f"{bits!r}")
    levels = 2 ** bits - 1

    def one(x, key):
        low, high = jnp.min(x), jnp.max(x)
        step = jnp.where(high > low, (high - low) / levels, 1.0)
        scaled = (x - low) / step
        floor = jnp.floor(scaled)
        up = jax.random.uniform(key, x.shape) < scaled - floor
        codes = jnp.clip(floor + up, 0, levels).astype(jnp.uint8)
        return Quantized(codes, low.astype(jnp.float32), high.astype(jnp.float32), bits)

    def encode(params, state, rng, context=None):
        del state, context
        leaves, treedef = jax.tree.flatten(params)
        return jax.tree.unflatten(treedef, [
            one(x, jax.random.fold_in(rng, i)) if jnp.issubdtype(x.dtype, jnp.floating)
            else x for i, x in enumerate(leaves)]), {}

    def decode(message, state, context=None):
        del state, context

        def dense(q):
            step = jnp.where(q.high > q.low, (q.high - q.low) / levels, 0.0)
            return q.low + q.codes.astype(jnp.float32) * step

        return jax.tree.map(lambda q: dense(q) if isinstance(q, Quantized) else q, message,
                            is_leaf=lambda q: isinstance(q, Quantized))

    return UploadTransform(_no_state, encode, decode)


@struct.dataclass
class Signs:
    """A leaf sent as the signs of its entries and one scale (:func:`scaled_sign`).

    Attributes:
      positive: bool, the leaf's shape: True where the entry is >= 0.
      scale: float32 scalar, the mean magnitude of the leaf's (real) entries.
    """

    positive: jax.Array
    scale: jax.Array

    def wire(self, rows: int | None) -> list[tuple[int, Any]]:
        """One bit an entry (of a table's ``rows`` rows where given), packed into uint8
        bytes, and the float32 scale."""
        n = self.positive.size if rows is None else rows * int(np.prod(self.positive.shape[1:]))
        return [(math.ceil(n / 8), jnp.uint8), (1, jnp.float32)]


def scaled_sign() -> UploadTransform:
    """Sends each floating-point leaf x as ``sign(x)`` and ``|x|_1 / n``; the server decodes
    ``(|x|_1 / n) sign(x)``, n the leaf's entries (a word table's: those of the client's own
    rows, ``UploadContext.row_masks``; its padding rows decode to 0). Karimireddy et al. 2019,
    Alg. 2: a contractive compressor, ``|C(x) - x|^2 = |x|^2 - |x|_1^2 / n``, so
    :func:`error_feedback` keeps a bounded memory with it.

    Returns:
      A stateless upload transform whose message holds a :class:`Signs` per floating-point
      leaf (integer leaves go as they are).
    """

    def encode(params, state, rng, context=None):
        del state, rng
        masks = {} if context is None else context.row_masks
        message = traverse_util.flatten_dict(params)
        for path, x in message.items():
            if jnp.issubdtype(x.dtype, jnp.floating):
                real = _real_entries(x, masks.get("/".join(path)))
                scale = jnp.sum(jnp.where(real, jnp.abs(x), 0)) / jnp.maximum(jnp.sum(real), 1)
                message[path] = Signs(x >= 0, scale.astype(jnp.float32))
        return traverse_util.unflatten_dict(message), {}

    def decode(message, state, context=None):
        masks = {} if context is None else context.row_masks
        flat = traverse_util.flatten_dict(message)  # a Signs is not a dict: a leaf
        for path, s in flat.items():
            if isinstance(s, Signs):
                real = _real_entries(s.positive, masks.get("/".join(path)))
                flat[path] = jnp.where(real, jnp.where(s.positive, s.scale, -s.scale), 0.0)
        return traverse_util.unflatten_dict(flat)

    return UploadTransform(_no_state, encode, decode)


def error_feedback(compressor: UploadTransform) -> UploadTransform:
    """``compressor`` with a memory per client: a client sends the compressor's message of
    ``v = change + memory`` and keeps ``memory' = v - decode(message)``, what the server did
    not receive, for its next round (Seide et al. 2014, "1-Bit Stochastic Gradient Descent
    and its Application to Data-Parallel Distributed Training of Speech DNNs"; Stich,
    Cordonnier and Jaggi 2018, "Sparsified SGD with Memory", Alg. 1; in federated learning:
    Sattler et al. 2019, who call the memory residual accumulation).

    Place it after :func:`model_change` (the memory is in the space of changes)::

        chain(model_change(), error_feedback(top_k(0.01)))

    A client that does not train in a round keeps its memory for the round it next trains in
    (partial participation: the rows of a client the round did not sample are not touched).

    The memory stays bounded for a contractive compressor, one whose error is smaller than
    what it compresses, ``|C(x) - x|^2 <= (1 - delta) |x|^2`` (Stich et al. 2018's k-contraction):
    :func:`top_k` (``delta = k / n``), :func:`scaled_sign`. :func:`probabilistic_quantization`
    is unbiased but not
    contractive (its noise, up to a level's step an entry, can exceed a change whose entries
    are mostly small): its memory grows with the range it sets. On FDU-MTL FedAvg with 1-bit
    quantization and this memory diverged by round 3 (docs/results.md); the CLI's
    ``--upload-compression`` offers ``+ef`` with ``topk`` and ``sign`` only.

    Args:
      compressor: a transform without a memory of its own, contractive for the memory to stay
        bounded (:func:`top_k`, :func:`scaled_sign`).

    Returns:
      An upload transform with ``client_init`` (zeros of the params' shapes; a word table's
      rows outside the client's vocabulary stay zero); its messages are the
      compressor's, and it adds the diagnostic ``ef_carried``: the share of ``v``'s squared
      norm left in the memory (float32 scalar, 0 when everything is sent).

    Raises:
      ValueError: ``compressor`` keeps a memory of its own; at trace time, a context without
        the client's memory (outside a round).
    """
    if compressor.client_init is not None:
        raise ValueError("error_feedback: the compressor keeps a memory of its own; wrap one "
                         "without (top_k, probabilistic_quantization)")
    floating = lambda x: jnp.issubdtype(x.dtype, jnp.floating)  # noqa: E731

    def client_init(params):
        return jax.tree.map(jnp.zeros_like, params)

    def real_rows(tree, context):
        """``tree`` with the rows outside the client's vocabulary zeroed (tables by rows)."""
        flat = traverse_util.flatten_dict(tree)
        for path, x in flat.items():
            mask = context.row_masks.get("/".join(path))
            if mask is not None:
                flat[path] = jnp.where(_real_entries(x, mask), x, 0)
        return traverse_util.unflatten_dict(flat)

    def encode(params, state, rng, context=None):
        if context is None or not jax.tree.leaves(context.memory):
            raise ValueError("error_feedback needs the client's memory (UploadContext.memory); "
                             "the round passes it")
        v = jax.tree.map(lambda x, m: x + m if floating(x) else x, params, context.memory)
        message, diagnostics, _ = encode_upload(compressor, v, state, rng, context)
        received = compressor.decode(message, state, context)
        memory = real_rows(jax.tree.map(lambda a, b: a - b if floating(a) else jnp.zeros_like(a),
                                        v, received), context)
        left = sum(jnp.sum(jnp.square(m)) for m in jax.tree.leaves(memory))
        total = sum(jnp.sum(jnp.square(x)) for x in jax.tree.leaves(real_rows(v, context))
                    if floating(x))
        carried = jnp.where(total > 0, left / jnp.maximum(total, 1e-30), 0.0)
        return message, {**diagnostics, "ef_carried": jnp.asarray(carried, jnp.float32)}, memory

    return UploadTransform(compressor.init, encode, compressor.decode, client_init)
