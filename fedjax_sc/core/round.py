"""One federated round as one compiled function (Li et al. 2021, Sec. 3.3; Alg. 1 lines 1-19).

``round_step(server_state, client_states, clients, rng) -> (server_state, client_states,
metrics)``:

1. every client downloads the server's (shared) params and joins them with its own private
   leaves from ``client_states`` (none for FedAvg); with ``ClientData.vocab_ids`` it works on
   the rows of its local vocabulary V^k of the word-embedding table only (paper Remark 3);
   An algorithm with a knowledge exchange (``Algorithm.knowledge``, FedKC) first extracts
   every client's message from the downloaded shared params and its data (never from a
   private leaf: an algorithm with both is refused); every client loss sees its
   :class:`~fedjax_sc.algorithms.base.ClientStart` (start params, all messages, client index:
   FedProx's centre, FedMMD's frozen model, FedKC's knowledge); an algorithm's local copies
   (FedFusion's reference extractor, :mod:`fedjax_sc.core.copies`) are made now;
2. every client runs ``local_epochs`` epochs of mini-batch training on its own examples,
   reshuffled each epoch, optimizer state fresh (or where ``Hooks.optimizer_init`` starts
   it: a state kept from the client's last round) -- all clients at once under ``jax.vmap``,
   the steps of one client as a ``lax.scan``; a client with fewer batches than the largest one
   runs masked no-op steps that leave its params and optimizer state untouched
   (:mod:`fedjax_sc.core.client`); with heterogeneous clients (``work``,
   :mod:`fedjax_sc.core.heterogeneity`) each client runs its own budget of steps instead, and
   a client without steps uploads nothing;
3. each client keeps its private leaves (the new ``client_states``) and encodes its shared
   ones (local copies left out) with the algorithm's upload transform (and its memory of
   earlier rounds, ``ClientStates.upload``, where the transform keeps one); the server decodes
   every message; an algorithm that owns state (``Algorithm.hooks``: SCAFFOLD, FedDyn) then
   ends each client's round with its ``client_end`` hook, which sees what the client trained
   and what its upload, as decoded, changed (the client's new state and a message to the
   server; a client without steps keeps its state); the server aggregates the uploads with
   weights N^k / N (or ``ClientData.weights``, normalised) and applies its server update
   (the aggregate itself, or an optax step on the pseudo-gradient ``params - aggregate``:
   FedOpt, :mod:`fedjax_sc.algorithms.fedopt`), then the algorithm's ``server_update`` hook
   sets the new global params and server state; the new model's local copies are remade
   from the model the clients downloaded.

The round runs on whichever clients it is given: all N, or the M sampled for this round by
:mod:`fedjax_sc.core.participation` (their data and private leaves gathered, the new private
leaves scattered back). Its client axis may be sharded over a device mesh
(:mod:`fedjax_sc.core.sharding`); the program is the same for one device or many.

Randomness: the round's key is ``fold_in(rng, server_state.round)``, client k's training key
is ``fold_in(round_key, k)`` and its upload key ``fold_in(fold_in(round_key, streams.UPLOAD),
k)``,
so a run resumed from a checkpoint replays exactly the same rounds.

Local-vocabulary training is exact, not an approximation, wherever a word that does not
occur in a client's training data gets a zero gradient at every step: its optimizer state
(fresh each round, or kept from a round where it was zero too) stays zero, so its row never
changes; the server's weighted mean of full
tables equals the table plus the weighted row deltas
(:func:`~fedjax_sc.algorithms.aggregate.weighted_mean_rows`). It is not exact where the
loss moves rows the data never touches: client optimizers that move parameters with a zero
gradient (weight decay), terms that pull every row (SCAFFOLD's c - c_i, Ditto's and
pFedMe's proximal terms after round 1; their docstrings say what differs), and upload
transforms that act on every row sent (the upload noise, N(0, sigma^2) on the client's rows
only instead of the whole table; KTEPS*'s PCA of the client's rows, docs/choices.md). Pass
``vocab_ids=None`` to train the dense ``[V, d]`` table instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import traverse_util

from fedjax_sc import streams
from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.aggregate import example_weights, weighted_mean_rows
from fedjax_sc.algorithms.base import (
    Algorithm,
    ClientEnd,
    Params,
    ServerInputs,
    UploadContext,
    encode_upload,
    hook_pair,
)
from fedjax_sc.algorithms.masking import split_private
from fedjax_sc.core import copies, fednova, leaves
from fedjax_sc.core.client import RoundMetrics, build_client_update  # noqa: F401 (re-exported)
from fedjax_sc.core.heterogeneity import LocalWork, budgets, participation_weights
from fedjax_sc.core.leaves import (  # noqa: F401 (re-exported)
    gather_table_rows,
    get_leaf,
    has_leaf,
    reduce_table_rows,
    replace_leaf,
    scatter_table_rows,
)
from fedjax_sc.core.local import all_finite, keep_where
from fedjax_sc.core.states import (  # noqa: F401 (re-exported)
    ClientStates,
    ServerState,
    check_clients,
    init_states,
)
from fedjax_sc.data.client_data import (  # noqa: F401 (row_masks re-exported)
    ClientData,
    row_masks,
    vocab_rows,
)


class RoundParts(NamedTuple):
    """The four stages of a round as separate (un-jitted) functions; :func:`build_round`
    composes them. Researchers (and ``fedjax-sc probe``) call them one by one to look at
    what a client trains, what it sends and what the server restores.

    Attributes:
      local_training: ``(server_state, client_states, clients, rng) -> (shared, client_states,
        metrics, ends)``: every client's local epochs under ``vmap``; ``shared`` holds
        each client's trained shared leaves stacked ``[K, ...]`` (word-embedding tables as the
        client's local rows ``[K, R, d]`` when ``clients.vocab_ids`` is set), the private
        leaves are written back into ``client_states``; ``ends`` the stacked
        :class:`~fedjax_sc.algorithms.base.ClientEnd` of every client for the ``client_end``
        stage (``()`` where the algorithm has no ``client_end`` hook).
      encode: ``(server_state, shared, clients, rng, memory=(), steps=None) -> (messages,
        diagnostics, memory)``: every client's upload transform; ``diagnostics``
        ``{name: [K]}``; ``memory`` the clients' upload memories (``ClientStates.upload``),
        a client kept as it was where ``steps`` (``RoundMetrics.steps``) is 0.
      decode: ``(server_state, messages, clients) -> uploads``: the server's decoding of each
        message, same structure as ``shared``.
      aggregate: ``(server_state, uploads, clients, steps=None, messages=(), updates=None)
        -> server_state``: weighted mean with N^k / N (tables by rows when local), the server
        optimizer, then the algorithm's ``server_update`` hook (which reads ``messages`` and
        ``updates``, the ``changes`` stage's output: computed here where None); with
        heterogeneous clients ``steps`` (``RoundMetrics.steps``) zeroes the weight of a
        client without steps and feeds FedNova.
      client_end: ``(server_state, client_states, clients, ends, updates, metrics) ->
        (client_states, metrics, messages)``: the algorithm's ``client_end`` hook on every
        client, after the server decoded the uploads (``ClientEnd.sent``: the client's row of
        ``updates``, from ``changes``, so a client's state can follow what it sent, noise
        included); a client without steps keeps its state; ``messages`` go to
        ``aggregate``. Without the hook: the inputs unchanged and ``()``.
      changes: ``(server_state, uploads, clients) -> updates``: what each client's upload,
        as the server decodes it, changed: ``uploads`` minus the model the client downloaded
        (stacked, tables as the client's rows, zero on the rows it does not upload: the PAD
        row, padding). The round computes it once, for ``client_end``
        (``ClientEnd.sent``) and ``aggregate`` (``ServerInputs.updates``) alike, and only
        where the algorithm has a hook that reads it (:func:`needs_changes`).
    """

    local_training: Callable
    encode: Callable
    decode: Callable
    aggregate: Callable
    client_end: Callable
    changes: Callable


def build_round_parts(algorithm: Algorithm, *, batch_size: int, local_epochs: int,
                      table_paths: tuple[tuple[str, ...], ...] | None = None,
                      work: LocalWork | None = None) -> RoundParts:
    """The stages of :func:`build_round` (same arguments and errors)."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"the round needs an Algorithm (e.g. fedjax_sc.fedavg(model)), got "
                        f"{algorithm!r}")
    if batch_size < 1 or local_epochs < 1:
        raise ValueError(f"batch_size and local_epochs must be >= 1, got {batch_size}, "
                         f"{local_epochs}")
    work = (work or LocalWork()).check()
    client_update = build_client_update(algorithm, batch_size=batch_size,
                                        local_epochs=local_epochs, work=work,
                                        optimizer_state=True)
    upload, hooks = algorithm.upload, algorithm.hooks

    def tables(params, clients):
        """The table paths of ``params`` trained by rows (none without local vocabularies)."""
        if clients.vocab_ids is None:
            return []
        return leaves.table_paths(params, among=table_paths)

    def local_training(state: ServerState, client_states: ClientStates, clients: ClientData,
                       rng: jax.Array):
        round_key = jax.random.fold_in(rng, state.round)
        keys = jax.vmap(lambda k: jax.random.fold_in(round_key, k))(
            jnp.arange(clients.num_clients))
        shared_tables = tables(state.params, clients)
        private_tables = tables(client_states.private, clients)

        def start_params(private, ids):
            params = masking.merge(state.params, private)
            # work on the rows of V^k only (exact, see the module docstring)
            return gather_table_rows(params, ids, shared_tables + private_tables)

        vocab_ids, vocab_mask = vocab_rows(clients)
        steps = (budgets(work, jax.random.fold_in(round_key, streams.WORK), clients.counts,
                         batch_size, local_epochs) if work.active
                 else jnp.zeros((clients.num_clients,), jnp.int32))
        knowledge = ()
        if algorithm.knowledge is not None:  # exchanged before local training (FedKC)
            if jax.tree.leaves(client_states.private):
                # the message goes to every client: computed from the shared leaves alone,
                # it can carry nothing derived from a private one
                raise ValueError(
                    f"{algorithm.name}: a knowledge exchange is computed from the shared "
                    f"leaves only, and this algorithm has private leaves "
                    f"{masking.leaf_paths(client_states.private)}; drop them (e.g. no FURL "
                    f"vector) or the exchange")
            knowledge_key = jax.random.fold_in(round_key, streams.KNOWLEDGE)
            knowledge = jax.vmap(lambda ids, tokens, labels, mask, k: (
                algorithm.knowledge(gather_table_rows(state.params, ids, shared_tables), tokens,
                                    labels, mask, jax.random.fold_in(knowledge_key, k))))(
                vocab_ids, clients.tokens, clients.labels, clients.mask,
                jnp.arange(clients.num_clients))
            if work.active:  # a client that does not train this round sends nothing: zeros
                knowledge = keep_where(steps > 0, knowledge,
                                       jax.tree.map(jnp.zeros_like, knowledge))

        row_tables = shared_tables + private_tables  # states' table leaves go by rows too

        def one_client(private, own, ids, vmask, tokens, labels, mask, key, client, budget):
            own_rows = gather_table_rows(own, ids, row_tables)
            params, metrics, start, opt_state = client_update(
                start_params(private, ids), tokens, labels, mask, key, knowledge, client,
                budget, state=own_rows,
                server=gather_table_rows(state.algorithm, ids, row_tables))
            # the client's state waits for its decoded upload (the client_end stage)
            end = () if hooks.client_end is None else ClientEnd(start, params, metrics.steps,
                                                                optimizer_state=opt_state)
            shared, new_private = split_private(algorithm, params)
            new_private = scatter_table_rows(new_private, private, ids, vmask, private_tables)
            return shared, new_private, metrics, end

        shared, private, metrics, ends = jax.vmap(one_client)(
            client_states.private, client_states.algorithm, vocab_ids, vocab_mask,
            clients.tokens, clients.labels, clients.mask, keys,
            jnp.arange(clients.num_clients, dtype=jnp.int32), steps)
        return shared, client_states._replace(private=private), metrics, ends

    def client_end(state: ServerState, client_states: ClientStates, clients: ClientData,
                   ends: Any, updates: Params, metrics: RoundMetrics):
        if hooks.client_end is None:
            return client_states, metrics, ()
        row_tables = tables(state.params, clients) + tables(client_states.private, clients)

        def one(end, sent, own, ids, vmask):
            new_own, message = hook_pair(algorithm.name, "client_end", "(state, message)",
                                         hooks.client_end(end._replace(sent=sent)),
                                         like=(end.start.state, None))
            # a client that ran no step (padding, dropped) keeps its state
            own = scatter_table_rows(keep_where(end.steps > 0, new_own, end.start.state),
                                     own, ids, vmask, row_tables)
            return own, message, (end.steps == 0) | all_finite((new_own, message))

        own, messages, finite = jax.vmap(one)(ends, updates, client_states.algorithm,
                                              *vocab_rows(clients))
        return (client_states._replace(algorithm=own),
                metrics._replace(finite=metrics.finite & finite), messages)

    def changes(state: ServerState, uploads: Params, clients: ClientData) -> Params:
        """The ``changes`` stage (:class:`RoundParts`)."""
        change = traverse_util.flatten_dict(jax.tree.map(jnp.subtract, uploads,
                                                         contexts(state, clients).start))
        for path in set(tables(state.params, clients)) & set(change):
            change[path] = jnp.where(row_masks(clients)[..., None], change[path], 0.0)
        return traverse_util.unflatten_dict(change)

    def encode(state: ServerState, shared: Params, clients: ClientData, rng: jax.Array,
               memory: Any = (), steps: jax.Array | None = None):
        shared = copies.without_copies(shared, algorithm.local_copies)  # never sent
        if not jax.tree.leaves(shared):  # nothing is shared (Indiv): nothing is sent
            return shared, {}, memory
        upload_key = jax.random.fold_in(jax.random.fold_in(rng, state.round), streams.UPLOAD)
        keys = jax.vmap(lambda k: jax.random.fold_in(upload_key, k))(
            jnp.arange(clients.num_clients))
        rows = tables(copies.without_copies(state.params, algorithm.local_copies), clients)
        trained = (jnp.ones((clients.num_clients,), bool) if steps is None else steps > 0)

        def one(params, key, context, own, i, m, real):
            own_rows = gather_table_rows(own, i, rows)  # the memory as the upload's layout
            message, diagnostics, new = encode_upload(upload, params, state.upload_state, key,
                                                      context._replace(memory=own_rows))
            # a client that did not train sent nothing to remember: it keeps its memory
            new = scatter_table_rows(keep_where(real, new, own_rows), own, i, m, rows)
            return message, diagnostics, new

        return jax.vmap(one)(shared, keys, contexts(state, clients), memory,
                             *vocab_rows(clients), trained)

    def decode(state: ServerState, messages, clients: ClientData):
        if not jax.tree.leaves(messages):
            return messages
        return jax.vmap(lambda m, context: upload.decode(m, state.upload_state, context))(
            messages, contexts(state, clients))

    def contexts(state: ServerState, clients: ClientData) -> UploadContext:
        """Every client's :class:`UploadContext`, stacked ``[K, ...]``: its row masks and the
        shared params it downloaded (tables as its rows), as the upload is laid out."""
        sent = copies.without_copies(state.params, algorithm.local_copies)
        rows = tables(sent, clients)
        masks = row_masks(clients)
        start = jax.vmap(lambda i: gather_table_rows(sent, i, rows))(vocab_rows(clients)[0])
        return UploadContext({"/".join(p): masks for p in rows}, start)

    def aggregate(state: ServerState, uploads: Params, clients: ClientData,
                  steps: jax.Array | None = None, messages: Any = (),
                  updates: Params | None = None) -> ServerState:
        raw = clients.counts if clients.weights is None else clients.weights
        if work.active:
            if steps is None:
                raise ValueError("with heterogeneous local work, aggregate needs every "
                                 "client's local steps (RoundMetrics.steps)")
            raw = participation_weights(raw, steps)
        weights = example_weights(raw)
        trained = raw > 0 if steps is None else (raw > 0) & (steps > 0)
        # the local copies are not sent: aggregated without them, remade from the model
        # the clients downloaded (mod:`fedjax_sc.core.copies`)
        base = copies.without_copies(state.params, algorithm.local_copies)
        # what each client's upload, as the server decodes it, changed (ServerInputs.updates)
        decoded = (() if hooks.server_update is None
                   else changes(state, uploads, clients) if updates is None else updates)
        if work.aggregation == "fednova":
            uploads = normalised_uploads(state, uploads, clients, weights, steps)
        flat = traverse_util.flatten_dict(uploads)
        by_rows = {p: flat.pop(p) for p in tables(base, clients)}
        params = algorithm.aggregator(traverse_util.unflatten_dict(flat), weights)
        params = masking.merge(params, traverse_util.unflatten_dict({
            p: weighted_mean_rows(get_leaf(base, p), clients.vocab_ids, rows,
                                  row_masks(clients), weights) for p, rows in by_rows.items()}))
        opt_state = state.opt_state
        if algorithm.server_optimizer is not None:  # FedOpt: a step on params - aggregate
            pseudo_grad = jax.tree.map(jnp.subtract, base, params)
            updates, opt_state = algorithm.server_optimizer.update(pseudo_grad, opt_state,
                                                                   base)
            params = optax.apply_updates(base, updates)
        server = state.algorithm
        if hooks.server_update is not None:
            sizes = {p: get_leaf(base, p).shape[0] for p in tables(base, clients)}
            reduce = lambda tree, w: reduce_table_rows(tree, w, clients.vocab_ids,
                                                       row_masks(clients), sizes)
            # a client that did not train sends zeros (weighed 0 anyway; a nan from its
            # empty data would poison every sum)
            messages, decoded = keep_where(trained, (messages, decoded),
                                           jax.tree.map(jnp.zeros_like, (messages, decoded)))
            params, server = hook_pair(algorithm.name, "server_update", "(params, state)",
                                       hooks.server_update(ServerInputs(
                                           params, base, server, messages, weights, trained,
                                           reduce, decoded)),
                                       like=(params, server))
        params = copies.restore_copies(params, state.params, algorithm.local_copies)
        # no client with an example (weights summing to 0): the mean would be all zeros and
        # kill the model for good; the server keeps its model and optimizer state instead
        empty = jnp.sum(raw) <= 0
        keep = lambda old, new: jax.tree.map(lambda a, b: jnp.where(empty, a, b), old, new)
        return ServerState(keep(state.params, params), state.round + 1,
                           keep(state.opt_state, opt_state), state.upload_state,
                           keep(state.algorithm, server))

    def normalised_uploads(state, uploads, clients, weights, steps):
        """FedNova: every upload moved tau_eff / ||a_k|| along its own update."""
        scale = fednova.scales(weights, steps, work.scan_length(
            batch_size, local_epochs, clients.tokens.shape[1]), work.momentum, work.prox)
        return fednova.rescale(contexts(state, clients).start, uploads, scale)

    return RoundParts(local_training, encode, decode, aggregate, client_end, changes)


def needs_changes(algorithm: Algorithm) -> bool:
    """Whether a round of ``algorithm`` reads what each upload changed (the ``changes``
    stage of :class:`RoundParts`): where it has a ``client_end`` or a ``server_update``
    hook."""
    return algorithm.hooks.client_end is not None or algorithm.hooks.server_update is not None


def build_round(algorithm: Algorithm, *, batch_size: int, local_epochs: int,
                table_paths: tuple[tuple[str, ...], ...] | None = None,
                work: LocalWork | None = None
                ) -> Callable[[ServerState, ClientStates, ClientData, jax.Array],
                              tuple[ServerState, ClientStates, RoundMetrics]]:
    """The un-jitted round function (jit it, or use :func:`make_round_step`).

    Args:
      algorithm: the :class:`~fedjax_sc.algorithms.base.Algorithm`.
      batch_size: local mini-batch size B (paper: 8 for FDU).
      local_epochs: local epochs E per round (paper: 2).
      table_paths: params paths of the word-embedding tables (default: every path of
        :func:`fedjax_sc.core.leaves.is_table`); those present are trained on
        the clients' local-vocabulary rows only when ``ClientData.vocab_ids`` is set.
      work: heterogeneous clients (:class:`~fedjax_sc.core.heterogeneity.LocalWork`: fixed
        or drawn local steps, dropout, stragglers, FedNova); None or an inactive one: every
        client runs ``local_epochs`` epochs, FedAvg-weighted (the plain round, unchanged).

    Returns:
      ``round_step(server_state, client_states, clients, rng) -> (server_state,
      client_states, RoundMetrics)`` where ``rng`` is the run's root key (the round number is
      folded in). The upload transform's diagnostics join ``RoundMetrics.aux``. Build the
      initial states with :func:`init_states`; the stages are :func:`build_round_parts`.

    Raises:
      TypeError: ``algorithm`` is not an :class:`~fedjax_sc.algorithms.base.Algorithm`;
        when the round is traced, token ids that are not integers.
      ValueError: if batch_size or local_epochs < 1, or a ``work`` setting is out of range;
        when the round is traced (:func:`~fedjax_sc.core.states.check_clients`), no client
        or client states and data of different client counts, a knowledge exchange beside
        private leaves, or upload diagnostics whose names collide with the loss's aux.
    """
    parts = build_round_parts(algorithm, batch_size=batch_size, local_epochs=local_epochs,
                              table_paths=table_paths, work=work)

    def round_step(state: ServerState, client_states: ClientStates, clients: ClientData,
                   rng: jax.Array):
        check_clients(client_states, clients)
        shared, client_states, metrics, ends = parts.local_training(state, client_states,
                                                                    clients, rng)
        messages, diagnostics, memory = parts.encode(state, shared, clients, rng,
                                                     client_states.upload, metrics.steps)
        client_states = client_states._replace(upload=memory)
        uploads = parts.decode(state, messages, clients)
        updates = parts.changes(state, uploads, clients) if needs_changes(algorithm) else None
        client_states, metrics, sent = parts.client_end(state, client_states, clients, ends,
                                                        updates, metrics)
        new_state = parts.aggregate(state, uploads, clients, metrics.steps, sent, updates)
        if set(diagnostics) & set(metrics.aux):
            raise ValueError(f"upload diagnostics {sorted(diagnostics)} collide with the "
                             f"client loss's aux {sorted(metrics.aux)}")
        metrics = metrics._replace(aux={**metrics.aux, **diagnostics})
        return new_state, client_states, metrics

    return round_step


def make_round_step(algorithm: Algorithm, *, batch_size: int, local_epochs: int,
                    table_paths: tuple[tuple[str, ...], ...] | None = None,
                    work: LocalWork | None = None, donate: bool = False):
    """``jax.jit`` of :func:`build_round` (the same arguments, ``work`` included): the whole
    round is one compiled program.

    It compiles once per input shape: once per run when every client takes part, or when the
    feed pads every sampled round to one size (``ClientFeed(padding="global")``); otherwise
    once per padded example count (``"bucket"``, the default: one per size of
    :func:`~fedjax_sc.core.participation.example_ladder`, at most ``ceil(log2 cap) + 1``;
    ``"sampled"``: one per distinct largest sampled client).

    ``donate=True`` lets XLA write the new server and client states into the old ones'
    buffers, so a round holds one copy of them instead of two (SCAFFOLD's, FedDyn's and
    Ditto's client states are model-sized per client); the caller must not use the old
    states afterwards, as in ``state, clients, m = round_step(state, clients, ...)``. Off by
    default, so that a loop that keeps an earlier state (a test, a comparison) stays valid;
    ``fedjax-sc train`` donates.
    """
    fn = build_round(algorithm, batch_size=batch_size, local_epochs=local_epochs,
                     table_paths=table_paths, work=work)
    return jax.jit(fn, donate_argnums=(0, 1) if donate else ())
