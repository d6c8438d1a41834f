"""Privacy probe of the word-embedding upload (Li et al. 2021, Sec. 5.6.3, Fig. 5).

From a run's last checkpoint the probe replays the next round: every client trains as in the
run, then each requested PCA band (d1, d2) is applied to the upload. For one client and one
query word (default "man") it ranks the other words of the client's local vocabulary V^k by
inner product with the query in three tables:

* **Client**: the client's trained word embeddings before compression;
* **Server**: what the server restores from the client's message (Eq. 12, noise included);
* **Agg**: the table after aggregation over all clients, which every client downloads next.

I_ser(K) and I_ag(K) are the sizes of the intersections of the Server and Agg top-K lists with
the Client top-K list: the smaller, the less the server (or the other clients) learn about the
client's word relationships (Eq. 13). The training of the replayed round is shared by all bands,
so the bands differ only in what is sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.compression import EMBEDDING_TABLE
from fedjax_sc.algorithms.kteps_star import private_upload
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.vocab import PAD, UNK
from fedjax_sc.run import rundir
from fedjax_sc.run.setup import restore_run

DEFAULT_TOP_K = (10, 20, 50, 100)
TABLE_PATH = tuple(EMBEDDING_TABLE.split("/"))


def top_k(table: np.ndarray, query: int, candidates: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` candidate rows with the largest inner product with row ``query``.

    Args:
      table: float ``[rows, d]``.
      query: row index of the query word.
      candidates: int ``[n]`` row indices to rank (the query itself excluded by the caller).
      k: list length (at most n).

    Returns:
      int ``[k]`` row indices, best first (ties broken by the lower index).
    """
    scores = table[candidates] @ table[query]
    order = np.lexsort((candidates, -scores))
    return candidates[order[:k]]


def probe(out: str | Path, client: str, word: str = "man",
          bands: Sequence[tuple[int, int]] | None = None, sigma: float | None = None,
          ks: Sequence[int] = DEFAULT_TOP_K, show: int = 10,
          log: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs the probe (see the module docstring).

    Args:
      out: a run directory of ``fedjax-sc train`` (its last checkpoint is used).
      client: the client's name (FDU: its domain).
      word: the query word; it must occur in the client's training data.
      bands: the (d1, d2) bands to probe (default: the run's ``pca_band``).
      sigma: upload noise std (default: the run's ``upload_noise``).
      ks: the K of I_ser(K), I_ag(K).
      show: how many of the top words to list per table.
      log: where the tables go.

    Returns:
      ``{"client", "word", "round", "sigma", "bands": [{"d1", "d2", "I_ser": {K: n},
      "I_ag": {K: n}, "top": {"Client"|"Server"|"Agg": [words]}}]}``; also written to
      ``out/probe-<client>-<word>.json`` (each name as :func:`file_part` writes it: two
      words, or two clients, never share a file, and a word never names a path outside
      ``out``). A K larger than the client's other words is left out, with a line in ``log``.

    Raises:
      ValueError: a K below 1 (checked first), unknown client, word not in the client's
        vocabulary, no band to probe, or the shared params hold no word-embedding table
        (private embeddings are never sent); as :func:`~fedjax_sc.run.setup.restore_run`.
      FileNotFoundError, CheckpointError: as :func:`~fedjax_sc.run.setup.restore_run` (no
        run, data or checkpoint there; a checkpoint that cannot be restored).
    """
    bad = [k for k in ks if k < 1]
    if bad:
        raise ValueError(f"--top-k {bad[0]}: K must be >= 1 (the length of a top-K list)")
    c, scene, setup, step, state, client_states = restore_run(out)
    names = list(scene.client_names)
    if client not in names:
        raise ValueError(f"unknown client {client!r}; the run's clients are {names}")
    k_idx = names.index(client)
    bands = [tuple(b) for b in (bands or ([c.pca_band] if c.pca_band else []))]
    if not bands:
        raise ValueError(f"the run in {out} uploads without PCA; give the bands to probe "
                         f"(--band D1 D2)")
    sigma = c.upload_noise if sigma is None else sigma
    if not rnd.has_leaf(state.params, TABLE_PATH):
        raise ValueError(f"{c.algorithm} keeps its word embeddings private: nothing to probe")
    data = client_data(scene.train, local_vocab=c.local_vocab)
    ids = (np.asarray(data.vocab_ids[k_idx]) if data.vocab_ids is not None
           else np.arange(len(scene.vocab)))
    real = (np.asarray(rnd.row_masks(data)[k_idx]) if data.vocab_ids is not None
            else np.ones(len(scene.vocab), bool))
    query_id = scene.vocab.index.get(word)
    where = np.flatnonzero((ids == query_id) & real) if query_id is not None else []
    if len(where) == 0:
        raise ValueError(f"{word!r} does not occur in the training data of client {client}")
    query = int(where[0])
    candidates = np.flatnonzero(real & (ids != UNK) & (ids != PAD) & (np.arange(len(ids)) != query))
    left_out = [k for k in ks if k > len(candidates)]
    ks = [k for k in ks if k <= len(candidates)]
    if left_out:
        log(f"--top-k {' '.join(map(str, left_out))} left out: client {client} has "
            f"{len(candidates)} other words")

    log(f"probe of {out} at round {step} -> replaying round {step + 1}; client {client} "
        f"(|V^k| = {int(real.sum())}), word {word!r}, sigma {sigma}")
    train_parts = rnd.build_round_parts(setup.algorithm, batch_size=c.batch_size,
                                        local_epochs=c.local_epochs)
    shared, *_ = jax.jit(train_parts.local_training)(state, client_states, data,
                                                       setup.train_key)
    client_table = np.asarray(rnd.get_leaf(shared, TABLE_PATH)[k_idx])
    words = lambda rows: [scene.vocab.words[int(ids[r])] for r in rows]
    result = {"client": client, "word": word, "round": step + 1, "sigma": sigma, "bands": []}
    for d1, d2 in bands:
        alg = setup.algorithm._replace(upload=private_upload((d1, d2), sigma, c.pca_center))
        parts = rnd.build_round_parts(alg, batch_size=c.batch_size,
                                      local_epochs=c.local_epochs)

        @jax.jit
        def server_side(state, shared, data):
            messages, diagnostics, _ = parts.encode(state, shared, data, setup.train_key)
            uploads = parts.decode(state, messages, data)
            return (rnd.get_leaf(uploads, TABLE_PATH), diagnostics,
                    rnd.get_leaf(parts.aggregate(state, uploads, data).params, TABLE_PATH))

        restored, diagnostics, aggregated = server_side(state, shared, data)
        tables = {"Client": client_table, "Server": np.asarray(restored[k_idx]),
                  "Agg": np.asarray(jnp.asarray(aggregated)[jnp.asarray(ids)])}
        ranked = {name: top_k(t, query, candidates, max(ks + [show]))
                  for name, t in tables.items()}
        inter = {name: {k: len(set(ranked["Client"][:k]) & set(ranked[name][:k])) for k in ks}
                 for name in ("Server", "Agg")}
        entry = {"d1": d1, "d2": d2,
                 "energy_kept": float(np.asarray(diagnostics["energy_kept"])[k_idx]),
                 "I_ser": inter["Server"], "I_ag": inter["Agg"],
                 "top": {name: words(r[:show]) for name, r in ranked.items()}}
        result["bands"].append(entry)
        log(format_band(entry, ks))
    path = Path(out) / f"probe-{file_part(client)}-{file_part(word)}.json"
    rundir.write_text(path, json.dumps(result, indent=2))
    log(f"written to {path}")
    return result


def format_band(entry: dict[str, Any], ks: Sequence[int]) -> str:
    """Markdown: the top words per table and the I_ser / I_ag row per K (Fig. 5)."""
    lines = [f"d1 = {entry['d1']}, d2 = {entry['d2']} (energy kept "
             f"{entry['energy_kept']:.3f})", "",
             "| table | top words |", "|---|---|"]
    lines += [f"| {name} | {', '.join(ws)} |" for name, ws in entry["top"].items()]
    lines += ["", "| K | " + " | ".join(str(k) for k in ks) + " |",
              "|---|" + "---:|" * len(ks),
              "| I_ser | " + " | ".join(str(entry["I_ser"][k]) for k in ks) + " |",
              "| I_ag | " + " | ".join(str(entry["I_ag"][k]) for k in ks) + " |"]
    return "\n".join(lines)


def file_part(text: str) -> str:
    """``text`` as one part of a file name, different for different texts: ``text`` itself
    when it is at most :data:`_PART_CHARS` letters, digits, ``.`` and ``_`` (not dots only);
    else a readable slug (every other character ``_``, ``-`` kept, cut to
    :data:`_PART_CHARS`), ``~`` and the first 10 hex digits of the text's SHA-256. A corpus
    word like ``../x`` or ``a/b`` stays in the run folder, ``a/b`` and ``a_b`` name two
    files, and ``probe-<client>-<word>.json`` stays within a file name's 255 bytes."""
    if (re.fullmatch(r"[\w.]+", text, flags=re.ASCII) and set(text) != {"."}
            and len(text) <= _PART_CHARS):
        return text
    slug = re.sub(r"[^\w.-]", "_", text, flags=re.ASCII)[:_PART_CHARS]
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{'_' if set(slug) <= {'.'} else slug}~{digest}"


_PART_CHARS = 100
"""The longest slug of :func:`file_part` (two parts and ``probe-``, ``~``, the digests and
``.json`` stay under 255 bytes)."""
