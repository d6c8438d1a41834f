"""Upload transforms: what a client sends and the server reads back, as optax-style pairs.

An :class:`UploadTransform` is a NamedTuple of pure functions (``init``, ``encode``,
``decode``, and ``client_init`` for a transform that keeps a memory on each client) that runs
inside the one compiled round on every client's trained shared leaves; :func:`chain` composes
them (mask -> PCA compression -> noise, Li et al. 2021, "Preliminary Steps Towards Federated
Sentiment Classification", Alg. 1 lines 13-17). The transforms themselves live beside this
module (``compression``, ``noise``, ``model_change``); :mod:`fedjax_sc.algorithms.base`
re-exports these names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jax

Params = Any
"""A params pytree (nested dict of arrays)."""


class UploadContext(NamedTuple):
    """What both ends of one client's upload know besides the message (simulation plumbing).

    Attributes:
      row_masks: ``{"module/param": bool [rows]}``: for each word-embedding table of the
        upload, True on the rows that belong to the client's local vocabulary V^k (the words
        of its training data, paper Remark 3). A table without an entry has every row real
        (the dense ``[V, d]`` table, Eq. 10 as printed).
      start: the shared params the client downloaded at the start of the round, laid out as
        the upload (tables as the client's rows), or ``None`` where the caller has no round
        (a transform that needs it raises). Both ends hold it: the client downloaded it and
        the server sent it, so a transform may send the change ``params - start`` and add it
        back on the server (:func:`fedjax_sc.algorithms.model_change.model_change`).
      memory: this client's upload memory (:attr:`UploadTransform.client_init`), laid out as
        the upload (tables as the client's rows), on the client's end only: ``()`` for a
        transform without one, and in ``decode`` (the server never holds it).
    """

    row_masks: Mapping[str, jax.Array] = {}
    start: Params | None = None
    memory: Any = ()


Diagnostics = dict[str, jax.Array]
"""Float32 scalars an upload transform reports about one client's upload (e.g. the energy a
compression keeps). They are simulation figures for the metrics, not part of the message."""


class UploadTransform(NamedTuple):
    """A transform of what a client uploads, as a pair of pure functions (optax style).

    ``init(params) -> state`` builds the transform's state from the shared params (kept in the
    server state, the same for every client); ``encode(params, state, rng, context) ->
    (message, diagnostics)`` runs on the client on its trained shared leaves; ``decode(message,
    state, context) -> params`` runs on the server on each client's message before
    aggregation and returns params with the shapes the client encoded. Both get the client's
    :class:`UploadContext` (its row masks, the params it started the round from), or ``None``
    outside a round (the server's full tables). The message is what crosses the network; it
    never holds a private leaf (the round removes them before ``encode``).

    A transform that remembers something on each client between rounds (error feedback's
    residual) sets ``client_init(params) -> memory``: one client's initial memory from the
    shared params (tables ``[V, d]``; the round keeps every client's, stacked ``[N, ...]`` in
    ``ClientStates.upload``, checkpointed, and hands a client its own as
    ``context.memory``, tables as its rows). Its ``encode`` then returns ``(message,
    diagnostics, new_memory)``; :func:`encode_upload` calls either kind. A client that did not
    train in a round keeps its memory.
    """

    init: Callable[[Params], Any]
    encode: Callable[[Params, Any, jax.Array, UploadContext | None], tuple[Any, ...]]
    decode: Callable[[Any, Any, UploadContext | None], Params]
    client_init: Callable[[Params], Any] | None = None


def encode_upload(transform: UploadTransform, params: Params, state: Any, rng: jax.Array,
                  context: UploadContext | None) -> tuple[Any, Diagnostics, Any]:
    """``(message, diagnostics, new_memory)`` of ``transform.encode``: a transform without
    ``client_init`` returns ``()`` as its memory.

    Raises:
      ValueError: ``encode`` returned another number of results than its kind has (two
        without ``client_init``, three with it).
    """
    out = transform.encode(params, state, rng, context)
    want = 2 if transform.client_init is None else 3
    if not isinstance(out, tuple) or len(out) != want:
        raise ValueError(f"an upload transform {'with' if want == 3 else 'without'} "
                         f"client_init returns {want} results from encode ((message, "
                         f"diagnostics{', new_memory' if want == 3 else ''})), got "
                         f"{len(out) if isinstance(out, tuple) else type(out).__name__}")
    return out if want == 3 else (*out, ())


def _send_as_is(params, state, rng, context=None):
    del state, rng, context
    return params, {}


def _received_as_is(message, state, context=None):
    del state, context
    return message


_IDENTITY = UploadTransform(lambda params: (), _send_as_is, _received_as_is)


def identity_upload() -> UploadTransform:
    """The upload transform that sends the shared leaves as they are (FedAvg, KTEPS); one
    value, so ``upload == identity_upload()`` tells whether an algorithm's upload is it."""
    return _IDENTITY


def chain(*transforms: UploadTransform) -> UploadTransform:
    """Composes upload transforms: encodes with ``transforms`` in order, decodes in reverse.

    Transform i+1 sees transform i's message. The state is the tuple of the parts' states
    (part i+1's ``init`` gets part i's message of the initial params, encoded with them as
    ``UploadContext.start``: a client that has not moved); transform i encodes with
    ``fold_in(rng, i)``, so no two parts share a key. Every part encodes and decodes with the
    same context; the diagnostics are merged (a name reported twice raises ``ValueError``).

    With parts that keep a memory per client (:attr:`UploadTransform.client_init`), the
    chain's memory is the tuple of the parts' (``()`` for a part without) and its ``encode``
    returns the new one as a third element; each part sees its own in ``context.memory``.

    Example (KTEPS*, Li et al. 2021, Alg. 1 lines 13-14)::

      chain(pca_compress(2, 150), gaussian_noise(0.01))
    """
    remembers = any(t.client_init is not None for t in transforms)

    def initial(params, with_memory):
        """Every part's state (and memory): part i+1's from part i's message of ``params``."""
        states, memories, context = [], [], UploadContext(start=params)  # has not moved
        for t in transforms:
            states.append(t.init(params))
            memories.append(() if t.client_init is None else t.client_init(params))
            # one compiled program, not the encoder's operations compiled one by one
            params = jax.jit(lambda p, s, c, t=t: encode_upload(t, p, s, jax.random.key(0),
                                                                c)[0])(
                params, states[-1], context._replace(memory=memories[-1]))
        return tuple(memories if with_memory else states)

    def init(params):
        return initial(params, False)

    def check(state):
        if not isinstance(state, tuple) or len(state) != len(transforms):
            raise ValueError(f"chain of {len(transforms)} upload transforms got a state of "
                             f"{len(state) if isinstance(state, tuple) else type(state)} parts")

    def encode(params, state, rng, context=None):
        check(state)
        diagnostics: Diagnostics = {}
        memories = (context.memory if remembers and context is not None
                    else ((),) * len(transforms))
        new = []
        for i, (t, s, m) in enumerate(zip(transforms, state, memories)):
            part = None if context is None else context._replace(memory=m)
            params, d, m = encode_upload(t, params, s, jax.random.fold_in(rng, i), part)
            new.append(m)
            if set(d) & set(diagnostics):
                raise ValueError(f"two chained upload transforms report "
                                 f"{set(d) & set(diagnostics)}")
            diagnostics.update(d)
        return (params, diagnostics, tuple(new)) if remembers else (params, diagnostics)

    def decode(message, state, context=None):
        check(state)
        for t, s in reversed(list(zip(transforms, state))):
            message = t.decode(message, s, context)
        return message

    return UploadTransform(init, encode, decode,
                           (lambda params: initial(params, True)) if remembers else None)
