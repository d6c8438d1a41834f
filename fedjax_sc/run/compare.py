"""Paired comparison of two trained runs on the same test examples (``fedjax-sc compare``).

One seed of each method gives one Ag each; whether their difference is larger than the test
sample can explain is a question about the same test reviews classified by both models. This
restores each run's checkpoint, records which test examples each model gets right
(:func:`fedjax_sc.core.evaluate.make_example_hits`) and reports Ag(A) - Ag(B) with a paired,
per-client bootstrap interval (:func:`fedjax_sc.core.evaluate.paired_ag_difference`), the
per-client differences and how many clients each model leads on. Ag^k and Ag are as in Li et
al. 2021, "Preliminary Steps Towards Federated Sentiment Classification", Eq. 14-15.

The models compared are the global ones (Ag) by default; ``personal=True`` compares the
personalised models before fine-tuning (shared leaves + each client's private leaves, the
run's Ap mode), the only choice for a method without a global model (FedPer, LG-FedAvg,
Indiv, ...). The Ap phase's fine-tuned models are not saved, so Ap is not compared here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fedjax_sc.core.evaluate import (
    accuracy_list,
    check_bootstrap,
    make_example_hits,
    make_personal_evaluate,
    paired_ag_difference,
)
from fedjax_sc.data.client_data import client_data
from fedjax_sc.run import rundir
from fedjax_sc.run.setup import global_params, restore_run, tested_files


def run_hits(out: str | Path, personal: bool = False, at_round: int | None = None
             ) -> dict[str, Any]:
    """Which test examples the model of the run in ``out`` classifies correctly.

    Args:
      out: a run directory of ``fedjax-sc train`` (or of a ``reproduce`` store).
      personal: compare the personalised model (shared + private leaves, the run's Ap mode)
        instead of the global one.
      at_round: the checkpoint's round (default: the last saved).

    Returns:
      ``{"out", "algorithm", "round", "model" (a description), "clients": [K names],
      "hits": bool [K, n], "mask": bool [K, n], "labels": int32 [K, n]}``.

    Raises:
      FileNotFoundError: not a run directory, or no checkpoint (at ``at_round``).
      ValueError: the run's method has no global model and ``personal`` is False, or has no
        private leaves and ``personal`` is True.
    """
    c, scene, setup, step, state, client_states = restore_run(out, at_round)
    algorithm = setup.algorithm
    test = client_data(scene.test)
    if personal:
        if not jax.tree.leaves(client_states.private):
            raise ValueError(f"{out}: {c.algorithm} has no private leaves; its personalised "
                             f"model is the global one (compare without --personal)")
        mode = c.ap_mode or algorithm.default_mode
        hits = make_personal_evaluate(algorithm.predict, hits=True)(
            (state.params, client_states.private), test)[mode]
        model = f"personalised ({mode})"
    else:
        if algorithm.global_predict is None:
            raise ValueError(f"{out}: {c.algorithm} has no global model; compare the "
                             f"personalised models (--personal)")
        hits = make_example_hits(algorithm.global_predict)(global_params(setup, state.params),
                                                           test)
        model = "global"
    return {"out": str(out), "algorithm": c.algorithm, "round": step, "model": model,
            "clients": list(scene.client_names), "hits": np.asarray(hits),
            "mask": np.asarray(test.mask), "labels": np.asarray(test.labels)}


def compare(run_a: str | Path, run_b: str | Path, personal: bool = False,
            at_round: int | None = None, resamples: int = 10_000, seed: int = 0,
            level: float = 0.95, json_path: str | Path | None = None,
            log: Callable[[str], None] = print) -> dict[str, Any]:
    """Ag(A) - Ag(B) of two runs on the same test examples, with its paired bootstrap
    interval and the per-client differences (see the module docstring).

    Args:
      run_a, run_b: run directories; both must have the same clients and test examples.
      personal: compare personalised models (see :func:`run_hits`).
      at_round: the checkpoints' round (default: each run's last saved).
      resamples, seed, level: the bootstrap (:func:`paired_ag_difference`).
      json_path: where to write the result as JSON as well (optional).
      log: where the table goes (Markdown).

    Returns:
      ``{"a": {...}, "b": {...}, "clients": [...], "Ag_a", "Ag_b", "per_client_a",
      "per_client_b"}`` plus the keys of :func:`paired_ag_difference`; accuracies and
      differences as fractions.

    Raises:
      ValueError: the two runs were evaluated on other clients or other test examples.
      FileNotFoundError, ValueError: as :func:`run_hits`.
    """
    check_bootstrap(resamples, level)  # before the runs are loaded
    a = run_hits(run_a, personal, at_round)
    b = run_hits(run_b, personal, at_round)
    files_a, files_b = tested_files(run_a), tested_files(run_b)
    differ = sorted(k for k in set(files_a) & set(files_b) if files_a[k] != files_b[k])
    if differ:
        raise ValueError(f"{run_a} and {run_b} were tested on other texts: "
                         f"{', '.join(differ)} differ; a paired comparison needs the same test "
                         f"examples")
    if a["clients"] != b["clients"]:
        raise ValueError(f"{run_a} and {run_b} have other clients: {a['clients']} vs "
                         f"{b['clients']}")
    if not (np.array_equal(a["mask"], b["mask"]) and np.array_equal(a["labels"], b["labels"])):
        raise ValueError(f"{run_a} and {run_b} were evaluated on other test examples (other "
                         f"data, --max-len or --domains); a paired comparison needs the same "
                         f"ones")
    mask = a["mask"]
    counts = mask.sum(1)
    acc = {k: np.where(counts > 0, (r["hits"] & mask).sum(1) / np.maximum(counts, 1), np.nan)
           for k, r in (("a", a), ("b", b))}
    stats = paired_ag_difference(a["hits"], b["hits"], mask, resamples, seed, level)
    result = {"a": {k: a[k] for k in ("out", "algorithm", "round", "model")},
              "b": {k: b[k] for k in ("out", "algorithm", "round", "model")},
              "clients": a["clients"], "counts": counts.tolist(),
              "Ag_a": float(np.nanmean(acc["a"])), "Ag_b": float(np.nanmean(acc["b"])),
              "per_client_a": acc["a"], "per_client_b": acc["b"], **stats}
    log(format_comparison(result))
    if json_path is not None:
        ready = {k: accuracy_list(v, 6) if isinstance(v, np.ndarray) else v
                 for k, v in result.items()}
        rundir.write_text(Path(json_path), json.dumps(ready, indent=2) + "\n")
        log(f"written to {json_path}")
    return result


def format_comparison(r: dict[str, Any]) -> str:
    """Markdown: one row per client (A, B, A - B in points) and the Ag row with its
    interval, then the wins and the number of examples the models disagree on."""
    pts = lambda x: "n/a" if np.isnan(x) else f"{100 * x:.1f}"
    diff = lambda x: "n/a" if np.isnan(x) else f"{100 * x:+.1f}"
    name = lambda s: f"{s['algorithm']} ({s['model']}, round {s['round']})"
    lines = [f"A = {name(r['a'])}: {r['a']['out']}", f"B = {name(r['b'])}: {r['b']['out']}", "",
             "| client | test | A | B | A - B |", "|---|---:|---:|---:|---:|"]
    for k, client in enumerate(r["clients"]):
        lines.append(f"| {client} | {r['counts'][k]} | {pts(r['per_client_a'][k])} | "
                     f"{pts(r['per_client_b'][k])} | {diff(r['per_client'][k])} |")
    level = round(100 * r["level"])
    lines.append(f"| **Ag** | {sum(r['counts'])} | {pts(r['Ag_a'])} | {pts(r['Ag_b'])} | "
                 f"{diff(r['diff'])} ({level}% CI {diff(r['low'])} to {diff(r['high'])}) |")
    lines += ["", f"A ahead on {r['wins']} clients, B on {r['losses']}, tied on {r['ties']}; "
              f"the models disagree on {r['disagree']:,} test examples. The interval: paired "
              f"bootstrap over each client's test examples ({r['resamples']:,} draws); it "
              f"does not include the spread over training seeds."]
    return "\n".join(lines)
