"""Paired comparison of two trained runs on the same test examples (``fedjax-sc compare``).

One seed of each method gives one Ag each; whether their difference is larger than the test
sample can explain is a question about the same test reviews classified by both models. This
reads which test examples each model gets right from the run's ``test_hits.json``
(:mod:`fedjax_sc.run.hits`: written when the run ended, exported into ``results/`` with its
other small files), or, without one, restores the run's checkpoint and records them
(:func:`fedjax_sc.core.evaluate.make_example_hits`), and reports Ag(A) - Ag(B) with a paired,
per-client bootstrap interval (:func:`fedjax_sc.core.evaluate.paired_ag_difference`), the
per-client differences and how many clients each model leads on. Ag^k and Ag are as in Li et
al. 2021, "Preliminary Steps Towards Federated Sentiment Classification", Eq. 14-15.

Whether one method beats another is a question about training seeds as well: given two
folders of seed runs (``<store>/<scene>/<method>/seed-<s>``, or the exported
``results/<scene>/<table>/<method>-seed<s>`` named by ``results/<scene>/<table>/<method>``),
the seeds are paired by name (with ``over_seeds``, a run ``<path>`` and the ``<path>-seed<s>``
runs beside it, each under the seed its config records), the difference is the mean over the
pairs and the interval resamples the pairs as well as
the test examples (a two-level bootstrap), so it holds both sources of chance.

The models compared are the global ones (Ag) by default; ``personal=True`` compares the
personalised models before fine-tuning (shared leaves + each client's private leaves, the
run's Ap mode), the only choice for a method without a global model (FedPer, LG-FedAvg,
Indiv, ...); ``ap=True`` compares Ap (Eq. 16), the Ap phase's fine-tuned models: the record
holds, per test example, how many of the n_Z evaluations get it right, and Ap^k is the mean
of those shares over the client's examples, so the same paired bootstrap applies to them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.core.evaluate import accuracy_list, check_bootstrap, paired_ag_difference
from fedjax_sc.data.client_data import client_data
from fedjax_sc.run import hits as hits_record
from fedjax_sc.run import loading, rundir
from fedjax_sc.run.setup import global_params, restore_run, tested_files


def run_hits(out: str | Path, personal: bool = False, at_round: int | None = None,
             ap: bool = False) -> dict[str, Any]:
    """Which test examples the model of the run in ``out`` classifies correctly.

    Read from the run's ``test_hits.json`` (:mod:`fedjax_sc.run.hits`, written when the run
    ended; all an exported run in ``results/`` has) when ``at_round`` is None or its round,
    else computed from the run's checkpoint.

    Args:
      out: a run directory of ``fedjax-sc train`` (or of a ``reproduce`` store, or exported).
      personal: compare the personalised model (shared + private leaves, the run's Ap mode)
        instead of the global one.
      at_round: the checkpoint's round (default: the record's, else the last saved).
      ap: the Ap phase's fine-tuned models instead (Eq. 16): ``hits`` is then each
        example's share of the n_Z evaluations that get it right (float64). Read from the
        record only (``fedjax-sc results hits RUN`` makes it from the last checkpoint).

    Returns:
      ``{"out", "algorithm", "round", "model" (a description), "clients": [K names],
      "hits": bool [K, n], "mask": bool [K, n], "labels": int32 [K, n]}``, the real examples
      of each client first, n the largest client's count.

    Raises:
      FileNotFoundError: not a run directory, or neither a record nor a checkpoint (at
        ``at_round``).
      ValueError: the run's method has no global model and ``personal`` is False, or has no
        private leaves and ``personal`` is True; with ``ap``, no record with the Ap phase.
      CheckpointError: a checkpoint that cannot be restored (:func:`checkpoint_record`).
    """
    rec = hits_record.read(out)
    if rec is None or at_round not in (None, rec["round"]):
        if ap:
            raise ValueError(f"{out}: no {hits_record.FILE} of round {at_round or 'last'}: "
                             f"the Ap phase's models are recorded when a run ends; `fedjax-sc "
                             f"results hits {out}` redoes it from the last checkpoint")
        try:
            rec = checkpoint_record(out, at_round)
        except FileNotFoundError as e:
            if rec is not None or not (Path(out) / "config.json").is_file():
                raise
            raise FileNotFoundError(
                f"{out}: no {hits_record.FILE} and no checkpoint to make it from (a run "
                f"exported before the record existed, or whose checkpoints are gone); retrain "
                f"it, or `fedjax-sc results hits` a copy that still has its checkpoints") from e
    algorithm = rundir.read_json(Path(out) / "config.json").get("algorithm")
    if ap:
        model = hits_record.AP
        label = f"Ap ({rec['ap']['mode']}), fine-tuned" if "ap" in rec else "Ap"
    elif personal:
        model = next((k for k in rec["models"] if k.startswith("personal")), None)
        if model is None:
            raise ValueError(f"{out}: {algorithm} has no private leaves; its personalised "
                             f"model is the global one (compare without --personal)")
        label = model.replace("personal", "personalised")
    else:
        model = label = "global"
        if model not in rec["models"]:
            raise ValueError(f"{out}: {algorithm} has no global model; compare the "
                             f"personalised models (--personal)")
    return {"out": str(out), "algorithm": algorithm, "round": rec["round"], "model": label,
            "clients": list(rec["clients"]),
            **hits_record.arrays(rec, model, str(Path(out) / hits_record.FILE))}


def checkpoint_record(out: str | Path, at_round: int | None = None, ap: bool = False,
                      log: Callable[[str], None] = print) -> dict[str, Any]:
    """The test-hits record (:mod:`fedjax_sc.run.hits`) of the run in ``out`` made from its
    checkpoint of round ``at_round`` (default: the last saved).

    Args:
      out: the run folder.
      at_round: the checkpoint's round (None: the last saved).
      ap: redo the run's Ap phase from the checkpoint (the run's settings and randomness, as
        when it ended: minutes on FDU-MTL) and record its fine-tuned models too; the Ap it
        gives is checked against the run's ``report.json`` (equal on the machine that made
        it; ``log`` says by how much it differs where another machine rounds differently).
      log: where that line goes.

    Raises:
      FileNotFoundError, ValueError, CheckpointError: as :func:`restore_run`.
    """
    c, scene, setup, step, state, client_states = restore_run(out, at_round)
    algorithm = setup.algorithm
    mode = c.ap_mode or algorithm.default_mode
    test = client_data(scene.test)
    phase = None
    if ap and c.ap:
        from fedjax_sc.run.finish import personalize_phase
        if algorithm.central is not None:
            scene = loading.whole(c, scene, log)
        train = jax.tree.map(jnp.asarray, loading.train_split(scene, c.local_vocab))
        phase = personalize_phase(c, algorithm, state, client_states, train, test,
                                  setup.root, log, scene)
        report = Path(out) / "report.json"
        saved = rundir.read_json(report).get("Ap") if report.is_file() else None
        if saved is not None and step == c.rounds:
            log(f"{out}: Ap {phase.ap(mode):.6f} redone, {saved:.6f} in report.json"
                + ("" if phase.ap(mode) == saved else
                   f" ({100 * (phase.ap(mode) - saved):+.3f} points: another machine or "
                   f"build rounds differently)"))
    return hits_record.record(scene, algorithm, global_params(setup, state.params),
                              state.params, client_states.private, test, mode, step,
                              tested_files(out), phase)


def write_run_hits(out: str | Path, ap: bool = True, log: Callable[[str], None] = print
                   ) -> Path:
    """Writes ``test_hits.json`` into the run folder ``out`` from its last checkpoint (for a
    run that ended before the record existed), the Ap phase redone unless ``ap`` is False
    (see :func:`checkpoint_record`); returns its path.

    Raises:
      FileNotFoundError, ValueError, CheckpointError: as :func:`restore_run`.
    """
    return hits_record.write(out, checkpoint_record(out, ap=ap, log=log))


def seed_runs(path: str | Path, over_seeds: bool = False) -> dict[str, Path]:
    """The runs under ``path``: ``{"": path}`` for a run directory, or ``{"seed-0": ...,
    "seed-1": ...}`` for a folder of seed runs (a ``reproduce`` store's
    ``<scene>/<method>/``) or for the exported runs ``<path>-seed<s>`` of a method
    (``results/fdu/table3/kteps`` names ``results/fdu/table3/kteps-seed0``, ...), in seed
    order.

    With ``over_seeds`` every run of the method counts, each under the seed its
    ``config.json`` records: ``path`` itself where it is a run directory, its ``seed-<s>/``
    runs and the ``<path>-seed<s>`` runs beside it. That reads the layout ``train --out
    runs/METHOD`` for seed 0 and ``runs/METHOD-seed<s>`` for the others
    (``results/fdu/beyond-50-rounds/feddyn``, ``feddyn-seed1``, ``feddyn-seed2``).

    Raises:
      FileNotFoundError: ``path`` is neither a run directory nor holds ``seed-<s>`` runs, and
        no ``<path>-seed<s>`` run exists.
      ValueError: (``over_seeds``) two of the runs record the same seed.
    """
    path = Path(path)
    is_run = (path / "config.json").is_file()
    if is_run and not over_seeds:
        return {"": path}
    prefix = f"{path.name}-seed"
    inside = {int(p.name[5:]): p for p in path.glob("seed-*")
              if (p / "config.json").is_file() and p.name[5:].isdigit()}
    beside = {int(p.name[len(prefix):]): p for p in path.parent.glob(f"{prefix}*")
              if (p / "config.json").is_file() and p.name[len(prefix):].isdigit()}
    if not over_seeds:
        found = inside or beside
    else:
        found = {}
        for run in ([path] if is_run else []) + list(inside.values()) + list(beside.values()):
            seed = int(json.loads((run / "config.json").read_text())["seed"])
            if seed in found:
                raise ValueError(f"{found[seed]} and {run} are both runs of seed {seed}: "
                                 f"--over-seeds pairs one run of each seed")
            found[seed] = run
    if not found:
        raise FileNotFoundError(f"{path}: not a run directory (no config.json), no "
                                f"seed-<s>/ runs in it and no {path.name}-seed<s> runs beside "
                                f"it")
    return {f"seed-{s}": found[s] for s in sorted(found)}


def compare(run_a: str | Path, run_b: str | Path, personal: bool = False,
            at_round: int | None = None, resamples: int = 10_000, seed: int = 0,
            level: float = 0.95, json_path: str | Path | None = None,
            log: Callable[[str], None] = print, ap: bool = False,
            over_seeds: bool = False) -> dict[str, Any]:
    """Ag(A) - Ag(B) (or Ap(A) - Ap(B) with ``ap``) of two runs, or of two methods over
    paired seeds, on the same test examples, with its paired bootstrap interval and the
    per-client differences (see the module docstring).

    Args:
      run_a, run_b: run directories, or folders of seed runs (``<store>/<scene>/<method>``:
        A's ``seed-s`` is paired with B's; the difference is the mean over the pairs and the
        interval resamples the pairs as well as the test examples,
        :func:`paired_ag_difference`). Every run must have the same clients and test
        examples.
      personal: compare personalised models (see :func:`run_hits`).
      at_round: the checkpoints' round (default: each run's last saved).
      ap: compare the Ap phase's fine-tuned models, per example the share of the n_Z
        evaluations that get it right (from the runs' records, :func:`run_hits`); the
        result's ``Ag_*`` entries then hold Ap (``metric`` says which).
      over_seeds: pair every seed run of each side, each under the seed its config
        records (:func:`seed_runs`): ``runs/feddyn`` (seed 0) with ``runs/feddyn-seed1``...
      resamples, seed, level: the bootstrap (:func:`paired_ag_difference`).
      json_path: where to write the result as JSON as well (optional).
      log: where the table goes (Markdown).

    Returns:
      ``{"a": {...}, "b": {...}, "metric": "Ag" or "Ap", "seeds": [...], "clients": [...],
      "Ag_a", "Ag_b",
      "per_client_a", "per_client_b", "per_seed_a", "per_seed_b"}`` plus the keys of
      :func:`paired_ag_difference`; accuracies and differences as fractions, Ag and the
      per-client figures as means over the seeds.

    Raises:
      ValueError: the runs were evaluated on other clients or other test examples, the
        two sides hold other seeds, or ``json_path`` is a folder.
      FileNotFoundError, ValueError: as :func:`seed_runs` and :func:`run_hits`.
    """
    check_bootstrap(resamples, level)  # before the runs are loaded
    if json_path is not None and Path(json_path).is_dir():
        raise ValueError(f"--json {json_path}: a folder; give a file name "
                         f"(--json {Path(json_path) / 'compare.json'})")
    runs_a, runs_b = seed_runs(run_a, over_seeds), seed_runs(run_b, over_seeds)
    if list(runs_a) != list(runs_b):
        name = lambda r: ", ".join(r) or "one run"
        hint = ("" if over_seeds or "" not in (*runs_a, *runs_b) else
                " (--over-seeds counts a run directory's <run>-seed<s> runs beside it too)")
        raise ValueError(f"{run_a} holds {name(runs_a)} and {run_b} holds {name(runs_b)}: a "
                         f"paired comparison needs the same seeds on both sides{hint}")
    if ap and personal:
        raise ValueError("--ap compares the fine-tuned models; --personal those before "
                         "fine-tuning: give one of them")
    pairs = [(run_hits(runs_a[s], personal, at_round, ap),
              run_hits(runs_b[s], personal, at_round, ap)) for s in runs_a]
    first = pairs[0][0]
    for s, (a, b) in zip(runs_a, pairs):
        _check_same_test(runs_a[s], runs_b[s], a, b)
        if a is not first:  # every seed on the first one's test examples
            _check_same_test(runs_a[next(iter(runs_a))], runs_a[s], first, a)
    mask = first["mask"]
    counts = mask.sum(1)
    accuracy = lambda r: np.where(counts > 0, np.where(mask, r["hits"], 0).sum(1)
                                  / np.maximum(counts, 1), np.nan)
    acc = {side: np.stack([accuracy(pair[i]) for pair in pairs])
           for i, side in enumerate(("a", "b"))}
    stats = paired_ag_difference(np.stack([a["hits"] for a, _ in pairs]),
                                 np.stack([b["hits"] for _, b in pairs]), mask, resamples,
                                 seed, level)
    side = lambda i: {"out": str(run_a if i == 0 else run_b),
                      **{k: pairs[0][i][k] for k in ("algorithm", "model")},
                      "round": [pair[i]["round"] for pair in pairs] if len(pairs) > 1
                      else pairs[0][i]["round"]}
    result = {"a": side(0), "b": side(1), "metric": "Ap" if ap else "Ag",
              "seeds": list(runs_a) if len(pairs) > 1 else [],
              "clients": first["clients"], "counts": counts.tolist(),
              "Ag_a": float(np.nanmean(acc["a"])), "Ag_b": float(np.nanmean(acc["b"])),
              "per_client_a": acc["a"].mean(0), "per_client_b": acc["b"].mean(0),
              "per_seed_a": np.nanmean(acc["a"], 1), "per_seed_b": np.nanmean(acc["b"], 1),
              **stats}
    log(format_comparison(result))
    if json_path is not None:
        ready = {k: accuracy_list(v, 6) if isinstance(v, np.ndarray) else v
                 for k, v in result.items()}
        rundir.write_text(Path(json_path), json.dumps(ready, indent=2) + "\n")
        log(f"written to {json_path}")
    return result


def _tested_files(run: Path) -> dict[str, Any]:
    """The test files a run recorded: its fingerprint's, else its test-hits record's (an
    exported run keeps only the latter)."""
    files = tested_files(run)
    if not files:
        rec = hits_record.read(run)
        files = {} if rec is None else rec.get("test_files", {})
    return files


def _check_same_test(run_a: Path, run_b: Path, a: dict[str, Any], b: dict[str, Any]) -> None:
    files_a, files_b = _tested_files(run_a), _tested_files(run_b)
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
                         f"data, test split, --max-len or --domains); a paired comparison needs "
                         f"the same ones")


def _signed_points(x: float) -> str:
    """A difference of fractions in signed points with one decimal (``n/a`` for NaN)."""
    return "n/a" if np.isnan(x) else f"{100 * x:+.1f}"


def format_difference(r: dict[str, Any]) -> str:
    """A :func:`compare` result in one table cell: ``+d (low, high)``, the difference and its
    interval in points with one decimal (``n/a`` for a figure that is NaN)."""
    return f"{_signed_points(r['diff'])} ({_signed_points(r['low'])}, {_signed_points(r['high'])})"


def format_comparison(r: dict[str, Any]) -> str:
    """Markdown: one row per client (A, B, A - B in points; means over the seeds) and the Ag
    (or Ap) row with its interval, with several seeds each pair's, then the wins and the
    number of examples the models score differently."""
    pts = lambda x: "n/a" if np.isnan(x) else f"{100 * x:.1f}"
    diff = _signed_points
    seeds = r.get("seeds") or []
    rounds = lambda s: (f"rounds {'/'.join(map(str, s['round']))}" if seeds
                        else f"round {s['round']}")
    name = lambda s: f"{s['algorithm']} ({s['model']}, {rounds(s)})"
    over = f", mean over {len(seeds)} paired seeds" if seeds else ""
    lines = [f"A = {name(r['a'])}: {r['a']['out']}", f"B = {name(r['b'])}: {r['b']['out']}", "",
             f"| client | test | A | B | A - B{over} |", "|---|---:|---:|---:|---:|"]
    for k, client in enumerate(r["clients"]):
        lines.append(f"| {client} | {r['counts'][k]} | {pts(r['per_client_a'][k])} | "
                     f"{pts(r['per_client_b'][k])} | {diff(r['per_client'][k])} |")
    level = round(100 * r["level"])
    metric = r.get("metric", "Ag")
    lines.append(f"| **{metric}** | {sum(r['counts'])} | {pts(r['Ag_a'])} | {pts(r['Ag_b'])} | "
                 f"{diff(r['diff'])} ({level}% CI {diff(r['low'])} to {diff(r['high'])}) |")
    if seeds:
        lines += ["", f"| seed | {metric} A | {metric} B | A - B |", "|---|---:|---:|---:|"]
        lines += [f"| {s} | {pts(a)} | {pts(b)} | {diff(d)} |" for s, a, b, d in
                  zip(seeds, r["per_seed_a"], r["per_seed_b"], r["per_seed"])]
        spread = np.std(np.asarray(r["per_seed"]), ddof=1)
        caption = (f"The interval: bootstrap over the {len(seeds)} seed pairs and each "
                   f"client's test examples ({r['resamples']:,} draws), so it holds the "
                   f"training seeds' spread (std of the pairs' differences "
                   f"{100 * spread:.2f} points) as well as the test sample's noise.")
    else:
        caption = (f"The interval: paired bootstrap over each client's test examples "
                   f"({r['resamples']:,} draws); it does not include the spread over training "
                   f"seeds.")
    lines += ["", f"A ahead on {r['wins']} clients, B on {r['losses']}, tied on {r['ties']}; "
              f"the models score {r['disagree']:,} test examples differently"
              f"{' (summed over the seeds)' if seeds else ''}. " + caption]
    return "\n".join(lines)
