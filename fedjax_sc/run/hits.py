"""A run's per-example test record, ``test_hits.json``: which test reviews its final models
classify correctly, so that two runs can be compared on the same reviews
(:mod:`fedjax_sc.run.compare`) from the run folder's small files alone, long after its
checkpoints are gone.

Ag^k (Li et al. 2021, "Preliminary Steps Towards Federated Sentiment Classification",
Eq. 14) is the share of client k's test reviews the global model gets right; a paired
bootstrap of the difference of two methods needs the reviews themselves, not only the share.
``fedjax-sc train`` writes the record after its last round; ``fedjax-sc results hits RUN``
writes it from a run's last checkpoint (for runs trained before the record existed). It is
one of the files ``fedjax-sc results export`` copies into ``results/``.

The file (JSON)::

    {"round": R, "clients": [K names], "test_files": {name: {size, sha256}},
     "labels": {client: [int, ...]},           # the real test examples, in order
     "models": {"global": {client: "0110..."},  # "1": classified correctly
                "personal (sp)": {client: "..."}}}

``global`` is absent for a method without a global model (FedPer, LG-FedAvg, Indiv, ...),
``personal (<mode>)`` for one without private leaves (its personalised model is the global
one). The personalised models are those before the Ap phase's fine-tuning, in the run's Ap
mode (the fine-tuned models are not kept).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fedjax_sc.core.evaluate import make_example_hits, make_personal_evaluate
from fedjax_sc.run import loading, processes, rundir

FILE = "test_hits.json"
"""The record's name in a run folder."""


def personal_key(mode: str) -> str:
    """The record's key of the personalised models in inference mode ``mode``."""
    return f"personal ({mode})"


def record(scene, algorithm, global_params, params, private, test, mode: str, at_round: int,
           test_files: dict[str, Any]) -> dict[str, Any]:
    """The record of one run's models (see the module docstring).

    Args:
      scene: the run's scene, or one process's share of it (``scene.share``; the record is
        then gathered from every process: a collective, every process must call it).
      algorithm: the run's :class:`~fedjax_sc.core.types.Algorithm`.
      global_params: the global model's parameters (what ``algorithm.global_predict`` reads).
      params: the server's parameters; ``private``: every client's private leaves
        ``[K, ...]`` (``None`` or empty without private leaves).
      test: the share's test data (global vocabulary ids), ``[K_share, n, L]``.
      mode: the personalised models' inference mode (the run's Ap mode).
      at_round: the round the models are from.
      test_files: the test-split corpus files (name -> size and SHA-256) the run recorded.

    Returns:
      The record as a JSON-ready dict.
    """
    mask, labels = np.asarray(test.mask), np.asarray(test.labels)
    models = {}
    if algorithm.global_predict is not None:
        models["global"] = np.asarray(make_example_hits(algorithm.global_predict)(
            global_params, test))
    if private is not None and jax.tree.leaves(private):
        models[personal_key(mode)] = np.asarray(make_personal_evaluate(
            algorithm.predict, hits=True)((params, loading.rows(private, scene)), test)[mode])
    first = 0 if scene.share is None else scene.share[0]
    names = scene.client_names
    share = {"labels": {}, "models": {k: {} for k in models}}
    for i in range(mask.shape[0]):
        real = mask[i]
        client = names[first + i]
        share["labels"][client] = labels[i][real].astype(int).tolist()
        for k, hits in models.items():
            share["models"][k][client] = "".join("1" if h else "0" for h in hits[i][real])
    merged: dict[str, Any] = {"labels": {}, "models": {k: {} for k in models}}
    for part in processes.allgather_json(share):
        merged["labels"].update(part["labels"])
        for k in models:
            merged["models"][k].update(part["models"][k])
    order = list(names)
    return {"round": int(at_round), "clients": order, "test_files": test_files,
            "labels": {c: merged["labels"][c] for c in order},
            "models": {k: {c: v[c] for c in order} for k, v in merged["models"].items()}}


def write(out: str | Path, rec: dict[str, Any]) -> Path:
    """Writes ``rec`` to ``<out>/test_hits.json`` (whole or not at all; process 0 of
    several)."""
    path = Path(out) / FILE
    rundir.write_text(path, json.dumps(rec, separators=(",", ":")) + "\n")
    return path


def read(out: str | Path) -> dict[str, Any] | None:
    """The record in run folder ``out``, or None without one.

    Raises:
      ValueError: the file is not a record (names the file and what is missing).
    """
    path = Path(out) / FILE
    if not path.is_file():
        return None
    rec = rundir.read_json(path)
    missing = [k for k in ("round", "clients", "labels", "models") if k not in rec]
    if missing:
        raise ValueError(f"{path}: not a test-hits record (no {', '.join(missing)})")
    return rec


def arrays(rec: dict[str, Any], model: str, source: str = "") -> dict[str, np.ndarray]:
    """``hits``, ``mask`` (bool) and ``labels`` (int32), each ``[K, max_k n_k]``, of one model
    of a record, padded at the end as :func:`fedjax_sc.data.client_data.client_data` pads.

    Raises:
      ValueError: the record has no such model (names ``source``, e.g. the run folder, and
        the models it has), or a client's hits and labels differ in length.
    """
    if model not in rec["models"]:
        raise ValueError(f"{source or 'the record'}: no {model} model in {FILE} (it has: "
                         f"{', '.join(rec['models']) or 'none'})")
    clients = rec["clients"]
    counts = [len(rec["labels"][c]) for c in clients]
    width = max(counts, default=0)
    hits = np.zeros((len(clients), width), bool)
    labels = np.zeros((len(clients), width), np.int32)
    for k, c in enumerate(clients):
        bits = rec["models"][model][c]
        if len(bits) != counts[k]:
            raise ValueError(f"{source or 'the record'}: {FILE} has {len(bits)} hits and "
                             f"{counts[k]} labels for client {c}")
        hits[k, :counts[k]] = np.frombuffer(bits.encode(), np.uint8) == ord("1")
        labels[k, :counts[k]] = rec["labels"][c]
    mask = np.arange(width)[None, :] < np.asarray(counts)[:, None]
    return {"hits": hits, "mask": mask, "labels": labels}
