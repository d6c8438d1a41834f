"""One command per paper table: run every method a table needs, then print our figures beside
the paper's (Li et al. 2021, Sec. 5.4-5.6, Tables 2-8, Fig. 4).

``fedjax-sc reproduce TABLE --scene fdu [--seeds N] [--quick] [--methods M ...]`` keeps a
results store under
``--out``: one directory per run, ``<out>/<scene>/<run>/seed-<s>/``, each a complete
``fedjax-sc train`` run directory (``config.json``, ``metrics.jsonl``, ``checkpoints/``,
``report.json``). A finished run (a report for the requested rounds) is skipped, an interrupted one
resumed, so tables share runs (Table 2's KTEPS is Table 4's lambda1 = lambda2 = 0.01 cell, its
KTEPS* Table 7's cell of the default band) and an interrupted reproduction continues where it
stopped. Runs that differ from another run only in the Ap phase (Table 5's mu) copy that run's last
checkpoint and redo the Ap phase alone. ``--methods`` trains only the named runs (Tables 2-3: the
methods; other tables: the run names :func:`plan` gives); the table still shows every other run the
store already holds finished, and ``not run`` for the rest.

The table (Markdown, ``<out>/<scene>/<table>.md``) holds our mean +- std over the seeds (in
percent) next to the paper's number in parentheses (:mod:`fedjax_sc.run.paper.tables`). Tables 2-3
also get a Fig. 4-style convergence plot and a per-client bar chart (PNG, with matplotlib,
``pip install 'fedjax_sc[plots]'``).

Presets: ``--quick`` = 1 round, n_Z = 5 Ap evaluations, 1 seed (a first look, minutes per
run on a CPU); the full preset = the scene's paper settings (FDU 50 rounds, IYY 20; n_Z = 25)
and 3 seeds. Every ``train`` option applies to every run.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from fedjax_sc.algorithms.noise import PAPER_SIGMA
from fedjax_sc.core import personalize
from fedjax_sc.run import members, rundir
from fedjax_sc.run.paper.table_plan import (
    TABLE7_D1,
    TABLE7_FRACTIONS,
    TABLE23_METHODS,
    Cell,
    Run,
    client_metric,
    plan,
    table_title,
)
from fedjax_sc.run.plumbing import processes
from fedjax_sc.run.registry import NO_UPLOAD
from fedjax_sc.run.train import TrainConfig, config_diff, train_population

QUICK = {"rounds": 1, "ap_evals": 5, "seeds": 1}
FULL_SEEDS = 3


def run_dir(out: Path, scene: str, run: str, seed: int) -> Path:
    """Where run ``run`` with seed ``seed`` lives in the store."""
    return out / scene / run / f"seed-{seed}"


def finished(where: Path, c: TrainConfig) -> dict | None:
    """The report of a complete run in ``where`` (rounds and Ap as ``c`` asks), else None.

    Raises:
      ValueError: ``where`` holds a run trained with other settings than ``c`` (the store
        never mixes them silently: choose another ``--out``).
    """
    if (where / "config.json").exists():
        diff = config_diff(rundir.read_json(where / "config.json"), c)
        if diff:
            raise ValueError(f"{where} holds a run with other settings {diff}; use another "
                             f"--out for these settings")
    path = where / "report.json"
    if not path.exists():
        return None
    report = rundir.read_json(path)
    ok = report.get("rounds") == c.rounds and (not c.ap or report.get("Ap") is not None)
    if ok and c.ap:
        s = report.get("ap_settings", {})
        ok = (s.get("n_Z"), s.get("z"), s.get("mu")) == (c.ap_evals, c.ap_steps, c.ap_lr_mult)
    return report if ok else None


def reproduce(table: str, base: TrainConfig, out: str | Path, seeds: Sequence[int],
              log: Callable[[str], None] = print, plots: bool = True,
              methods: Sequence[str] | None = None, d1s: Sequence[int] = TABLE7_D1,
              fractions: Sequence[float] = TABLE7_FRACTIONS,
              population_size: int | None = None, status: bool = False) -> str:
    """Runs (or resumes, or skips) every run of ``table`` for every seed; returns the Markdown.

    The runs to train that share a program (the seeds of a row; Table 4's lambda grid, Table
    5's mu values, Table 8's lambda_1 values of an architecture) train as populations
    (:func:`fedjax_sc.run.members.groups`), each run still in its own folder of the store.

    Args:
      table: one of :data:`~fedjax_sc.run.paper.table_plan.TABLES`.
      base: settings shared by all runs (scene, data, rounds, embeddings...); each run sets
        its own ``algorithm`` and settings, ``seed``, ``out`` and ``resume``.
      out: the store's root.
      seeds: the seeds (mean +- std over them).
      log: progress lines.
      plots: write the PNG figures of Tables 2-3 (skipped with a note without matplotlib).
      methods: the runs to train (Tables 2-3: method names; others: run names of
        :func:`plan`); None = all. The others are read from the store when finished there
        with the same settings and shown as ``not run`` otherwise.
      d1s, fractions: Table 7's grid (see :func:`plan`).
      population_size: the most runs trained as one population (None: as many as fit in
        memory, :func:`fedjax_sc.run.members.fitting`).
      status: train nothing: return one line per run and seed (``finished``, ``round r of
        R`` or ``not started``), then the runs not finished, space-separated (for
        ``--methods``).

    Several processes (:mod:`fedjax_sc.run.plumbing.processes`): every process calls this with the
    same arguments and trains every run with the others; process 0 writes the store and logs.

    Raises:
      ValueError: an unknown table, a name in ``methods`` that the table has no run for, or
        invalid settings (from the runs' configs).
      RuntimeError: a run that ended without a complete report.
    """
    log = processes.primary_log(log)
    out = Path(out)
    c0 = base.resolved()
    runs, cells = plan(table, c0.scene, c0.embed_dim, d1s, fractions)
    names = [r.name for r in runs]
    unknown = [m for m in (methods or ()) if m not in names]
    if unknown:
        raise ValueError(f"--methods: {table} has no run {', '.join(map(repr, unknown))}; "
                         f"choose from {' '.join(names)}")
    reports: dict[tuple[str, int], dict] = {}
    pending: list[tuple[Run, TrainConfig]] = []
    for seed in seeds:
        for run in runs:
            noise = paper_noise(base, run.overrides["algorithm"])
            c = dataclasses.replace(base, **run.overrides, **noise, seed=seed,
                                    out=str(run_dir(out, c0.scene, run.name, seed)),
                                    resume=False, overwrite=False).resolved()
            report = finished(Path(c.out), c)
            if report is not None:
                reports[(run.name, seed)] = report
                if methods is None or run.name in methods:
                    log(f"== {run.name} seed {seed}: finished in {c.out}, skipped")
            elif methods is None or run.name in methods:
                pending.append((run, c))
    if status:
        return _status(runs, seeds, reports, out, c0.scene, c0.rounds, methods)
    processes.barrier("reproduce: store read")  # before process 0 changes it
    # runs that reuse another's training (Table 5's mu) go once that one has finished
    for reuse in (False, True):
        batch = [_prepare(r, c, log) for r, c in pending
                 if bool(r.shares_training_with) == reuse]
        for group in members.groups(batch, population_size):
            log(f"== {' + '.join(_label(c) for c in group)}: "
                + ("one population" if len(group) > 1 else
                   "resuming" if group[0].resume else "starting"))
            train_population(group, log=log)
    for run, c in pending:
        report = finished(Path(c.out), c)
        if report is None:
            raise RuntimeError(f"{c.out}: the run ended without a complete report")
        reports[(run.name, c.seed)] = report
    if c0.scene == "synthetic" and table in TABLE23_METHODS and reports:
        names = [r["client"] for r in next(iter(reports.values()))["clients"]]
        cells = {row: {m: cell._replace(metric=client_metric(table, m, row)) for m, cell in
                       next(iter(cells.values())).items()} for row in [*names, "Avg"]}
    text = format_table(table, c0, cells, reports, seeds)
    target = out / c0.scene / f"{table}.md"
    target.parent.mkdir(parents=True, exist_ok=True)
    done = [r for r in runs if all((r.name, s) in reports for s in seeds)]
    if plots and table in TABLE23_METHODS and done:
        text += "\n\n" + _figures(table, c0, done, cells, reports, seeds, out)
    text += "\n\n" + cost_line(out, c0, done, seeds)
    rundir.write_text(target, text + "\n")
    log(text)
    return text


def _status(runs: Sequence[Run], seeds: Sequence[int], reports: dict, out: Path, scene: str,
            rounds: int, methods: Sequence[str] | None) -> str:
    """``reproduce(status=True)``: each run's state in the store, then those to train."""
    lines, todo = [], []
    for run in runs:
        if methods is not None and run.name not in methods:
            continue
        for seed in seeds:
            report = reports.get((run.name, seed))
            done = rundir.last_round(run_dir(out, scene, run.name, seed))
            if report is not None:
                state = "finished" + "".join(f", {k} {100 * report[k]:.1f}" for k in ("Ag", "Ap")
                                             if report.get(k) is not None)
            else:
                state = "not started" if done is None else f"round {done} of {rounds}"
                todo += [] if run.name in todo else [run.name]
            lines.append(f"{run.name} seed {seed}: {state}")
    return "\n".join(lines + [f"not finished: {' '.join(todo) or '(none)'}"])


def paper_noise(base: TrainConfig, algorithm: str) -> dict[str, float]:
    """``{"upload_noise": 0.01}`` for a method that uploads when ``base`` leaves the noise to
    its default: the paper's tables are made with the paper's noise on every scene (Sec. 5.2;
    the fdu and iyy scenes preset it anyway), also the synthetic one; ``{}`` otherwise."""
    if base.upload_noise is not None or algorithm in NO_UPLOAD:
        return {}
    return {"upload_noise": PAPER_SIGMA}


def _prepare(run: Run, c: TrainConfig, log: Callable[[str], None]) -> TrainConfig:
    """``c`` set to resume when its folder holds part of the run; a run that shares the
    training of another (only its Ap settings differ) first gets that run's checkpoints
    (copied by process 0 of several; every process calls this)."""
    where = Path(c.out)
    if not (where / "config.json").exists() and run.shares_training_with:
        source = where.parent.parent / run.shares_training_with / where.name
        if (source / "report.json").exists() and (source / "checkpoints").exists():
            log(f"== {run.name} seed {c.seed}: reusing the training of {source}")
            rundir.copy_training(source, where)
    processes.barrier(f"reproduce: {where} prepared")
    started = (where / "config.json").exists()
    saved = started and rundir.last_round(where) is not None
    # a run stopped before its first checkpoint starts afresh (its files are replaced)
    return dataclasses.replace(c, resume=saved, overwrite=started and not saved)


def _label(c: TrainConfig) -> str:
    return f"{Path(c.out).parent.name} seed {c.seed}"


def format_table(table: str, c: TrainConfig, cells: dict[str, dict[str, Cell]],
                 reports: dict[tuple[str, int], dict], seeds: Sequence[int],
                 running: dict[str, int] | None = None) -> str:
    """Markdown: ``ours (paper)`` per cell, ours = mean +- std over seeds in percent;
    ``unfinished: round N/R`` where a run without every seed's report has reached round N
    (``running``: run name -> rounds done), ``not run`` where ``reports`` lacks a seed of any
    other cell's run, ``n/a`` where the run has no such figure (e.g. Ag of a method without a
    global model)."""
    running = running or {}
    columns = list(next(iter(cells.values())))
    n = len(seeds)
    head = (f"{table_title(table)} on {c.scene}: ours (paper), ours = mean"
            f"{' +- std' if n > 1 else ''} over {n} seed{'s' if n > 1 else ''}; "
            f"{c.rounds} rounds, d = {c.embed_dim} ({c.embeddings}), n_Z = {c.ap_evals}. "
            f"Paper: d = 200 GloVe, FDU 50 / IYY 20 rounds, n_Z = 25.")
    lines = [head, "", "| | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    for row, by_column in cells.items():
        out = []
        for col in columns:
            cell = by_column[col]
            if any((cell.run, s) not in reports for s in seeds):
                mark = (f"unfinished: round {running[cell.run]}/{c.rounds}"
                        if cell.run in running else "not run")
                out.append(mark + ("" if cell.paper is None else f" ({cell.paper})"))
                continue
            values = [cell.metric(reports[(cell.run, s)]) for s in seeds]
            values = [100 * v for v in values if v is not None]
            ours = ("n/a" if not values else f"{np.mean(values):.1f}" +
                    (f" +- {np.std(values, ddof=1):.1f}" if len(values) > 1 else ""))
            out.append(ours + ("" if cell.paper is None else f" ({cell.paper})"))
        lines.append(f"| {'**Avg**' if row == 'Avg' else row} | " + " | ".join(out) + " |")
    return "\n".join(lines)


def seeds_label(seeds: Sequence[int]) -> str:
    """``seed 0`` or ``seeds 0, 1, 2``: how tables and figures name their seeds."""
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def _figures(table, c, runs, cells, reports, seeds, out: Path) -> str:
    try:
        from fedjax_sc.run.paper import plots
        seed = seeds[0]
        curves = {r.name: [run_dir(out, c.scene, r.name, s) for s in seeds] for r in runs}
        conv = plots.convergence_figure(
            curves, out / c.scene / f"{table}-convergence.png",
            title=f"{c.scene}: Ag per round, then Ap_t "
                  f"({seeds_label(seeds)})")
        done = [r.name for r in runs]
        ours = {m: {row: by_col[m].metric(reports[(m, seed)])
                    for row, by_col in cells.items() if row != "Avg"} for m in done}
        ours = {m: {k: v for k, v in d.items() if v is not None} for m, d in ours.items()}
        theirs = {m: {row: by_col[m].paper for row, by_col in cells.items()
                      if by_col[m].paper is not None} for m in done}
        bars = plots.per_client_figure(ours, out / c.scene / f"{table}-per-client.png",
                                       title=f"{table} on {c.scene} (seed {seed}); markers: "
                                       f"paper", paper=theirs or None)
        return f"Figures: {conv}, {bars}"
    except ModuleNotFoundError as e:
        return f"Figures skipped: {e}"


def cost_line(out: Path, c: TrainConfig, runs: Sequence[Run], seeds: Sequence[int]) -> str:
    """The measured compute time of the table's runs (rounds + Ap phase, from their metrics
    and reports) and an estimate for the full paper settings (scene preset rounds, n_Z = 25,
    3 seeds) at the same speed."""
    from fedjax_sc.run import config
    spent, full = 0.0, 0.0
    n_z = personalize.DEFAULT_NUM_EVALS  # the paper's n_Z
    full_rounds = config.SCENE_DEFAULTS[c.scene]["rounds"]
    trained = {r.name for r in runs if r.shares_training_with is None}
    for r in runs:
        for s in seeds:
            where = run_dir(out, c.scene, r.name, s)
            rounds = [json.loads(line) for line in (where / "metrics.jsonl").read_text()
                      .splitlines() if line.strip()]
            secs = [x["seconds"] for x in rounds if x.get("phase", "round") == "round"]
            report = rundir.read_json(where / "report.json")
            ap = report.get("timing", {}).get("ap_seconds", 0.0)
            if r.name in trained:
                spent += sum(secs)
                full += float(np.mean(secs)) * full_rounds * FULL_SEEDS / len(seeds) if secs else 0
            spent += ap
            full += ap * n_z / max(c.ap_evals, 1) * FULL_SEEDS / len(seeds)
    return (f"Compute: {spent / 60:.1f} min of rounds and Ap phases for this table "
            f"(compile and evaluation not counted); the full settings ({full_rounds} rounds, "
            f"n_Z = {n_z}, {FULL_SEEDS} seeds) would take about {full / 3600:.1f} h at this "
            f"speed.")
