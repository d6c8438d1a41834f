"""What a round costs on the wire, per client (Li et al. 2021, Sec. 4.2.2 and Remark 3).

Counts follow the shapes of what is actually exchanged, obtained with ``jax.eval_shape`` of
the algorithm's upload transform (nothing is run):

* **download**: the server's shared leaves a client receives (without the algorithm's local
  copies, which a client makes itself); with local vocabularies only
  the rows of V^k of each word-embedding table (Remark 3), otherwise the whole ``[V, d]``.
* **upload, dense**: the client's trained shared leaves as the identity upload would send them
  (tables: ``|V^k| x d``, or ``V x d`` without local vocabularies).
* **upload, sent**: the algorithm's message. A leaf that says what it sends (``wire``) costs
  that: a table compressed by :func:`~fedjax_sc.algorithms.compression.pca_compress`,
  ``(|V^k| + d)(d2 - d1 + 1)`` floats (``theta_E^k U^k`` and ``U^k``); other leaves their
  size.
* **an algorithm's own state** (:class:`~fedjax_sc.algorithms.base.Hooks`): where the hooks
  say so, the server's state reaches every client with the model (``server_state_sent``,
  SCAFFOLD's c: download) and a client's ``client_end`` message goes up with its upload
  (SCAFFOLD's change of c_i: upload, dense and sent); table leaves of
  either count the client's rows, as the model's do. Where the server builds the model from
  the messages alone (``upload_sent`` False, q-FFL), the model upload is not counted.

Floats are counted by element, bytes as elements times the dtype's size (float32: 4). With local
vocabularies the client also tells the server which rows it sends: ``|V^k|`` int32 row ids,
reported separately as ``row_id_bytes`` (the paper's O(.) formulas leave them out). |V^k| counts
the words of the client's training data plus ``<unk>`` when it occurs (``PAD`` excluded).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from flax import traverse_util

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import (
    Algorithm,
    Batch,
    ClientEnd,
    ClientStart,
    UploadContext,
    encode_upload,
    hook_pair,
)
from fedjax_sc.core import copies
from fedjax_sc.core.client import start_optimizer
from fedjax_sc.core.leaves import gather_table_rows, table_of
from fedjax_sc.core.leaves import table_paths as held_tables
from fedjax_sc.core.round import ClientStates, ServerState, get_leaf, row_masks
from fedjax_sc.data.client_data import ClientData


class Communication(NamedTuple):
    """Per-client figures of one round (int64 numpy ``[K]``; the same every round).

    Attributes:
      download_floats / download_bytes: what the client receives.
      upload_dense_floats / upload_dense_bytes: the shared leaves uncompressed.
      upload_sent_floats / upload_sent_bytes: the algorithm's message.
      row_id_bytes: the int32 ids of the table rows sent (0 without local vocabularies).
    """

    download_floats: np.ndarray
    download_bytes: np.ndarray
    upload_dense_floats: np.ndarray
    upload_dense_bytes: np.ndarray
    upload_sent_floats: np.ndarray
    upload_sent_bytes: np.ndarray
    row_id_bytes: np.ndarray

    def summary(self) -> dict[str, Any]:
        """JSON-ready per-client lists plus the means in MB (10^6 bytes) per client and round
        and the compression ratio sent / dense."""
        out: dict[str, Any] = {k: np.asarray(v).tolist() for k, v in self._asdict().items()}
        for name in ("download", "upload_dense", "upload_sent"):
            out[f"{name}_MB_mean"] = float(np.mean(getattr(self, f"{name}_bytes")) / 1e6)
        out["upload_sent_over_dense"] = float(np.sum(self.upload_sent_bytes)
                                              / max(np.sum(self.upload_dense_bytes), 1))
        return out


def count(tree: Any, table_rows: dict[str, int]) -> tuple[int, int]:
    """``(floats, bytes)`` of a params-like tree (arrays or shape structs).

    A word-embedding table (a leaf whose path ends with a ``/``-split key of ``table_rows``,
    also inside an algorithm's state or message) counts ``table_rows[path]`` rows: a
    ``[R, d]`` leaf ``rows x d``. A message leaf that says what it sends,
    ``leaf.wire(rows) -> [(elements, dtype)]`` (KTEPS*'s
    :class:`~fedjax_sc.algorithms.compression.Compressed`: ``rows x m + d x m``), counts that.
    Every other leaf counts its size.
    """
    floats = nbytes = 0
    tables = [tuple(t.split("/")) for t in table_rows]
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=lambda x: hasattr(x, "wire"))
    for path, leaf in flat:
        table = table_of(path, tables)
        rows = None if table is None else table_rows["/".join(table)]
        if hasattr(leaf, "wire"):
            parts = leaf.wire(rows)
        elif rows is None:
            parts = [(leaf.size, leaf.dtype)]
        else:
            parts = [(rows * int(np.prod(leaf.shape[1:])), leaf.dtype)]
        for n, dtype in parts:
            floats += int(n)
            nbytes += int(n) * np.dtype(dtype).itemsize
    return floats, nbytes


def account(algorithm: Algorithm, state: ServerState, clients: ClientData,
            table_paths: tuple[tuple[str, ...], ...] | None = None,
            client_states: ClientStates | None = None) -> Communication:
    """Per-client communication of one round of ``algorithm`` on ``clients`` (train split).

    Args:
      algorithm: the algorithm (its upload transform decides the message).
      state: the server state (its shared params' shapes).
      clients: the clients' training data; ``vocab_ids`` set means local vocabularies.
      table_paths: word-embedding table paths (default: every path of
        :func:`fedjax_sc.core.leaves.is_table`).
      client_states: the clients' states, stacked (their private leaves and own state give
        the shapes a ``client_end`` hook sees; None: no private leaves, the state of
        ``hooks.client_init``).

    Returns:
      The :class:`Communication` figures.
    """
    # local copies (FedFusion's reference extractor) are made on the client: never sent
    params = copies.without_copies(state.params, algorithm.local_copies)
    flat = traverse_util.flatten_dict(params)
    tables = ["/".join(p) for p in held_tables(params, among=table_paths)]
    masks = row_masks(clients)
    if masks is None:
        rows_per_client = [{t: int(get_leaf(params, tuple(t.split("/"))).shape[0])
                            for t in tables}] * clients.num_clients
        local = params
        masks_of = {}
    else:
        per_client = np.asarray(masks).sum(axis=1)
        rows_per_client = [{t: int(n) for t in tables} for n in per_client]
        width = masks.shape[1]
        local = traverse_util.unflatten_dict({
            p: (jax.ShapeDtypeStruct((width,) + v.shape[1:], v.dtype)
                if "/".join(p) in tables else v) for p, v in flat.items()})
        masks_of = {t: jax.ShapeDtypeStruct((width,), bool) for t in tables}
    struct = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), local)
    upload = algorithm.upload
    memory = () if upload.client_init is None else jax.eval_shape(upload.client_init, struct)
    context = UploadContext(masks_of, struct, memory)  # the model downloaded, as the upload
    message, _, _ = jax.eval_shape(
        lambda p, c: encode_upload(upload, p, state.upload_state, jax.random.key(0), c),
        struct, context)
    server, end = hooks_traffic(algorithm, state, params, tables,
                                None if masks is None else masks.shape[1], client_states,
                                clients)
    figures = {k: [] for k in Communication._fields}
    model_up = algorithm.hooks.upload_sent  # False: the server reads the messages alone
    for rows in rows_per_client:
        for name, tree in (("download", (struct, server)),
                           ("upload_dense", (struct if model_up else (), end)),
                           ("upload_sent", (message if model_up else (), end))):
            n, b = count(tree, rows)
            figures[f"{name}_floats"].append(n)
            figures[f"{name}_bytes"].append(b)
        figures["row_id_bytes"].append(0 if masks is None else 4 * sum(rows.values()))
    return Communication(**{k: np.asarray(v, np.int64) for k, v in figures.items()})


def hooks_traffic(algorithm: Algorithm, state: ServerState, shared: Any, tables: list[str],
                  width: int | None, client_states: ClientStates | None,
                  clients: ClientData) -> tuple[Any, Any]:
    """Shapes of the server's algorithm state as a client downloads it and of a client's
    ``client_end`` message, as far as the hooks send them (``()`` for none); ``width``: the
    clients' row count with local vocabularies (None: whole tables). The hook is traced with
    the shapes a client has in the round (its ``start.data`` included), so a hook that fails
    to trace, or returns other than ``(state, message)`` with the state shaped as given,
    fails here, before any round or file.

    Raises:
      ValueError: from :func:`fedjax_sc.algorithms.base.hook_pair`.
    """
    hooks = algorithm.hooks
    paths = [tuple(t.split("/")) for t in tables]
    if width is None:
        rows = lambda tree: tree
    else:
        ids = jax.ShapeDtypeStruct((width,), jax.numpy.int32)
        rows = lambda tree: jax.eval_shape(lambda t, i: gather_table_rows(t, i, paths), tree,
                                           ids)
    sent = hooks.server_state_sent
    server = (rows(jax.eval_shape(sent, state.algorithm)) if callable(sent)
              else rows(state.algorithm) if sent else ())
    if hooks.client_end is None:
        return server, ()
    first = lambda tree: jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype),
                                      tree)
    if client_states is None:
        private, own = {}, jax.eval_shape(hooks.client_init, shared)
    else:
        private, own = first(client_states.private), first(client_states.algorithm)
    params = rows(masking.merge(shared, private))
    one = lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype)  # one client's split
    data = Batch(one(clients.tokens), one(clients.labels), one(clients.mask))
    start = ClientStart(params, (), 0, rows(own), rows(state.algorithm), data)

    def end(s, p, u):  # as the round builds it (client.build_client_update)
        p = copies.make_copies(p, algorithm.local_copies)
        opt = start_optimizer(algorithm, s._replace(params=p))
        return hook_pair(algorithm.name, "client_end", "(state, message)",
                         hooks.client_end(ClientEnd(s, p, jax.numpy.int32(1), u,
                                                    optimizer_state=opt)),
                         like=(s.state, None))

    _, message = jax.eval_shape(end, start, params, rows(shared))
    return server, message


def describe(summary: dict[str, Any]) -> str:
    """One line for logs and reports from :meth:`Communication.summary`."""
    return (f"communication per client and round (mean over clients): download "
            f"{summary['download_MB_mean']:.3f} MB; upload {summary['upload_sent_MB_mean']:.3f} "
            f"MB sent of {summary['upload_dense_MB_mean']:.3f} MB dense "
            f"(x{summary['upload_sent_over_dense']:.3f})")
