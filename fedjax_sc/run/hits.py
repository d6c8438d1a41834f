"""A run's per-example test record, ``test_hits.json``: which test reviews its final models
classify correctly, so that two runs can be compared on the same reviews
(:mod:`fedjax_sc.run.paper.compare`) from the run folder's small files alone, long after its
checkpoints are gone.

Ag^k (Li et al. 2021, "Preliminary Steps Towards Federated Sentiment Classification",
Eq. 14) is the share of client k's test reviews the global model gets right; a paired
bootstrap of the difference of two methods needs the reviews themselves, not only the share.
``fedjax-sc train`` writes the record after its last round; ``fedjax-sc results hits RUN``
writes it from a run's last checkpoint (for runs trained before the record existed). It is
one of the files ``fedjax-sc results export`` copies into ``results/``.

The file (JSON)::

    {"round": R, "clients": [K names], "test_files": {name: {bytes, sha256}},
     "labels": {client: [int, ...]},           # the real test examples, in order
     "models": {"global": {client: "0110..."},  # "1": classified correctly
                "personal (sp)": {client: "..."}},
     "ap": {"mode": "sp", "evaluations": n_Z,   # the Ap phase's fine-tuned models:
            "correct": {client: [int, ...]}}}   # per example, of the n_Z evaluations

``global`` is absent for a method without a global model (FedPer, LG-FedAvg, Indiv, ...),
``personal (<mode>)`` for one without private leaves (its personalised model is the global
one). The personalised models are those before the Ap phase's fine-tuning, in the run's Ap
mode. ``ap`` (absent for a run without the Ap phase) counts, per test example, the Ap
phase's evaluations (t = 1..n_Z, Eq. 16) that classify it correctly: ``correct / n_Z``
averaged over a client's examples is its Ap^k, so two methods' Ap compare pairwise as their
Ag do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fedjax_sc.core.evaluate import make_example_hits, make_personal_evaluate
from fedjax_sc.run import loading, rundir
from fedjax_sc.run.plumbing import processes

FILE = "test_hits.json"
"""The record's name in a run folder."""


def personal_key(mode: str) -> str:
    """The record's key of the personalised models in inference mode ``mode``."""
    return f"personal ({mode})"


def record(scene, algorithm, global_params, params, private, test, mode: str, at_round: int,
           test_files: dict[str, Any], ap=None, block: int | None = None) -> dict[str, Any]:
    """The record of one run's models (see the module docstring).

    Args:
      scene: the run's scene, or one process's share of it (``scene.share``; the record is
        then gathered from every process: a collective, every process must call it).
      algorithm: the run's :class:`~fedjax_sc.algorithms.base.Algorithm`.
      global_params: the global model's parameters (what ``algorithm.global_predict`` reads).
      params: the server's parameters; ``private``: every client's private leaves
        ``[K, ...]`` (``None`` or empty without private leaves).
      test: the share's test data (global vocabulary ids), ``[K_share, n, L]``.
      mode: the personalised models' inference mode (the run's Ap mode).
      at_round: the round the models are from.
      test_files: the test-split corpus files (name -> size and SHA-256) the run recorded.
      ap: the Ap phase's :class:`~fedjax_sc.core.personalize.Personalization` of every
        client (its ``correct`` gathered from every process), or None without one.
      block: the personalised models evaluated ``block`` clients at a time
        (:func:`fedjax_sc.run.loading.by_blocks`; a sampled run's M), None: all at once.

    Returns:
      The record as a JSON-ready dict.
    """
    mask, labels = np.asarray(test.mask), np.asarray(test.labels)
    models = {}
    if algorithm.global_predict is not None:
        models["global"] = np.asarray(make_example_hits(algorithm.global_predict)(
            global_params, test))
    if private is not None and jax.tree.leaves(private):
        models[personal_key(mode)] = loading.by_blocks(
            make_personal_evaluate(algorithm.predict, hits=True), params,
            loading.rows(private, scene), test, block)[mode]
    ap_correct = (None if ap is None or ap.correct is None else
                  np.asarray(loading.rows(ap.correct[mode], scene)))
    first = 0 if scene.share is None else scene.share[0]
    names = scene.client_names
    share: dict[str, Any] = {"labels": {}, "models": {k: {} for k in models}, "ap": {}}
    for i in range(mask.shape[0]):
        real = mask[i]
        client = names[first + i]
        share["labels"][client] = labels[i][real].astype(int).tolist()
        for k, hits in models.items():
            share["models"][k][client] = "".join("1" if h else "0" for h in hits[i][real])
        if ap_correct is not None:
            share["ap"][client] = ap_correct[i][real].astype(int).tolist()
    merged: dict[str, Any] = {"labels": {}, "models": {k: {} for k in models}, "ap": {}}
    for part in processes.allgather_json(share):
        for key in ("labels", "ap"):
            merged[key].update(part[key])
        for k in models:
            merged["models"][k].update(part["models"][k])
    order = list(names)
    out = {"round": int(at_round), "clients": order, "test_files": test_files,
           "labels": {c: merged["labels"][c] for c in order},
           "models": {k: {c: v[c] for c in order} for k, v in merged["models"].items()}}
    if ap_correct is not None:
        evaluations = max(int(next(iter(ap.curve.values())).shape[1]) - 1, 1)
        out["ap"] = {"mode": mode, "evaluations": evaluations,
                     "correct": {c: merged["ap"][c] for c in order}}
    return out


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


AP = "ap"
"""The model name :func:`arrays` gives the Ap phase's fine-tuned models."""


def arrays(rec: dict[str, Any], model: str, source: str = "") -> dict[str, np.ndarray]:
    """``hits``, ``mask`` (bool) and ``labels`` (int32), each ``[K, max_k n_k]``, of one model
    of a record (a key of ``models``, or :data:`AP`), the real examples first, padding after.
    ``hits`` is bool for a model, float64 in [0, 1] for :data:`AP` (the share of the n_Z
    evaluations that classify the example correctly).

    Raises:
      ValueError: the record has no such model (names ``source``, e.g. the run folder, and
        the models it has), or a client's hits and labels differ in length.
    """
    if model == AP:
        if "ap" not in rec:
            raise ValueError(f"{source or 'the record'}: no Ap phase in {FILE} (a run "
                             f"without it, or recorded before the Ap phase was)")
        per_client = rec["ap"]["correct"]
        value = lambda x: np.asarray(x, np.float64) / rec["ap"]["evaluations"]
    elif model in rec["models"]:
        per_client = rec["models"][model]
        value = lambda x: np.frombuffer(x.encode(), np.uint8) == ord("1")
    else:
        raise ValueError(f"{source or 'the record'}: no {model} model in {FILE} (it has: "
                         f"{', '.join([*rec['models'], *([AP] if 'ap' in rec else [])])})")
    clients = rec["clients"]
    counts = [len(rec["labels"][c]) for c in clients]
    width = max(counts, default=0)
    hits = np.zeros((len(clients), width), np.float64 if model == AP else bool)
    labels = np.zeros((len(clients), width), np.int32)
    for k, c in enumerate(clients):
        if len(per_client[c]) != counts[k]:
            raise ValueError(f"{source or 'the record'}: {FILE} has {len(per_client[c])} "
                             f"{model} entries and {counts[k]} labels for client {c}")
        hits[k, :counts[k]] = value(per_client[c])
        labels[k, :counts[k]] = rec["labels"][c]
    mask = np.arange(width)[None, :] < np.asarray(counts)[:, None]
    return {"hits": hits, "mask": mask, "labels": labels}
