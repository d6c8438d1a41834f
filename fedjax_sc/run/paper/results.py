"""Results as data: the small files of a reproduction's runs kept in the repository, and the
tables and figures regenerated from them alone, without retraining.

``fedjax-sc results export`` copies, for each run of a table in a results store
(:func:`fedjax_sc.run.paper.reproduce.run_dir`), its ``config.json``, ``metrics.jsonl`` and, once
the run has finished, ``report.json`` and ``report.md`` into
``<dest>/<scene>/<table>/<run>-seed<s>/`` -- never checkpoints. Unfinished runs are exported
too (the rounds done so far), so progress can be committed while a run goes on.

``fedjax-sc results render`` reads such a folder and writes ``<dest>/<scene>/<table>.md``:
ours beside the paper's figures per client and on average (Tables 2-3: Ag, the paper's
Table 2, and Ap, its Table 3, from the same runs, and the gaps summarised by
:mod:`fedjax_sc.run.paper.gaps`; ``--table table2`` gives the Ag half, from Table 3's exports when
Table 2 has none of its own), the Ag curve every 10 rounds with the seconds per round, and
``<table>-convergence.png`` (Fig. 4: Ag per round, then Ap_t).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_sc.run import rundir
from fedjax_sc.run.config_file import config_from_json
from fedjax_sc.run.paper import gaps, paired
from fedjax_sc.run.paper import tables as paper
from fedjax_sc.run.paper.reproduce import format_table, run_dir, seeds_label
from fedjax_sc.run.paper.table_plan import (
    TABLE23_METHODS,
    TABLES,
    client_metric,
    plan,
    table_title,
)

SMALL_FILES = ("config.json", "metrics.jsonl", "report.json", "report.md", "test_hits.json",
               "convergence.png")
"""What a run keeps in the repository (no checkpoints, no vocabulary)."""

RUNS_OF = {"table2": "table3"}
"""Tables rendered from another table's exported runs when they have none of their own:
``reproduce table2`` trains a subset of ``table3``'s runs (the same names in the same store),
and Table 2 reads their global model's Ag."""


def results_dir(dest: str | Path, scene: str, table: str, run: str, seed: int) -> Path:
    """Where run ``run`` with seed ``seed`` of ``table`` lives under ``dest``."""
    return Path(dest) / scene / table / f"{run}-seed{seed}"


def export(store: str | Path, dest: str | Path, scene: str, table: str,
           methods: Sequence[str], seeds: Sequence[int] = (0,),
           log: Callable[[str], None] = print) -> list[Path]:
    """Copies the small files of each ``(method, seed)`` run from ``store`` to ``dest``.

    A run folder in ``dest`` is replaced as a whole (a finished run's report replaces the
    partial export). Returns the folders written.

    Raises:
      FileNotFoundError: a run has no ``metrics.jsonl`` in the store yet.
    """
    written = []
    for method in methods:
        for seed in seeds:
            source = run_dir(Path(store), scene, method, seed)
            if not (source / "metrics.jsonl").is_file():
                raise FileNotFoundError(f"{source}: no metrics.jsonl (not started?)")
            target = results_dir(dest, scene, table, method, seed)
            if target.exists():
                shutil.rmtree(target)
            target.mkdir(parents=True)
            for name in SMALL_FILES:
                if (source / name).is_file():
                    shutil.copy2(source / name, target / name)
            rounds = len(_round_rows(target))
            done = "finished" if (target / "report.json").is_file() else "unfinished"
            log(f"{method} seed {seed}: {rounds} rounds, {done} -> {target}")
            written.append(target)
    return written


def _round_rows(folder: Path) -> list[dict]:
    rows = {}
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if row.get("phase", "round") == "round":
                rows[row["round"]] = row  # a resumed run's repeated round: the last one
    return [rows[r] for r in sorted(rows)]


def exported_runs(dest: str | Path, scene: str, table: str) -> dict[tuple[str, int], Path]:
    """``{(method, seed): folder}`` of the runs exported under ``<dest>/<scene>/<table>/``
    (:func:`results_dir`), finished or not; empty when the folder is absent."""
    folder = Path(dest) / scene / table
    out = {}
    for run in sorted(folder.glob("*-seed*")) if folder.is_dir() else []:
        method, _, seed = run.name.rpartition("-seed")
        out[(method, int(seed))] = run
    return out


def render(dest: str | Path, scene: str, table: str, plots: bool = True) -> str:
    """Writes ``<dest>/<scene>/<table>.md`` (and the convergence PNG) from the exported runs of
    a table's reproduction; returns the Markdown.

    Tables 2-3: the averages, then Ag^k and Ap^k per client beside the paper's. Tables 4-8:
    the table's grid as ``fedjax-sc reproduce`` prints it (ours (paper) per cell), with
    ``unfinished: round N/R`` for a run exported before it finished; Tables 4 and 8 then pair
    each finished cell with the setting it ablates (:mod:`fedjax_sc.run.paper.paired`). Every
    table then gets Ag by round (every 10 rounds, the late-round spread, seconds per round) and
    the figure.

    Raises:
      ValueError: an unknown table, or no exported run.
    """
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}; choose from {TABLES}")
    dest = Path(dest)
    runs, lender = exported_runs(dest, scene, table), None
    if not runs and table in RUNS_OF:  # Table 2 reads the Ag of Table 3's runs
        lender = RUNS_OF[table]
        runs = {k: v for k, v in exported_runs(dest, scene, lender).items()
                if k[0] in TABLE23_METHODS[table]}
    if not runs:
        raise ValueError(f"no exported run in {dest / scene / table}"
                         + (f" nor {dest / scene / lender}" if lender else ""))
    seeds = sorted({s for _, s in runs})
    configs = {k: rundir.read_json(v / "config.json") for k, v in runs.items()}
    reports = {k: rundir.read_json(v / "report.json") for k, v in runs.items()
               if (v / "report.json").is_file()}
    rows = {k: _round_rows(v) for k, v in runs.items()}
    c = next(iter(configs.values()))
    if table in TABLE23_METHODS:
        order = [m for m in TABLE23_METHODS[table] if any(k[0] == m for k in runs)]
        keys = ("Ag",) if table == "table2" else ("Ag", "Ap")
        lines = [f"# {table_title(table)} on {scene}: ours beside the paper's figures", "",
                 summary_table(order, seeds, reports, rows, c["rounds"], scene, keys), "",
                 _settings_line(c, seeds, table, scene, dest), "",
                 *([f"The runs are Table {lender[5:]}'s (`{dest / scene / lender}`): the same "
                    "training, read for the global model's accuracy.", ""] if lender else []),
                 _noise_line(order, seeds, configs), "",
                 *_per_client(order, seeds, reports, rows, c["rounds"], scene, keys)]
        if table == "table3":
            lines += _ap_modes(order, seeds, reports)
        names = [r["client"] for r in next(iter(reports.values()))["clients"]] if reports else []
        lines += gaps.gap_section(order, seeds, reports, scene, names, keys)
    else:
        planned, cells = plan(table, scene, c["embed_dim"])
        order = [r.name for r in planned if any(k[0] == r.name for k in runs)]
        running = {m: max(len(rows[(m, s)]) for s in seeds if (m, s) in rows)
                   for m in order if any((m, s) not in reports for s in seeds)}
        lines = [f"# {table_title(table)} on {scene}: ours beside the paper's figures", "",
                 format_table(table, config_from_json(c), cells, reports, seeds, running), "",
                 _settings_line(c, seeds, table, scene, dest), ""]
        if plots:
            lines += [_heatmap(table, scene, cells, reports, seeds, dest), ""]
        finished = {m for m in order if all((m, s) in reports for s in seeds)}
        lines += paired.paired_section(table, dest / scene / table, order, finished)
    lines += _by_round(order, seeds, reports, rows, c["rounds"])
    text = "\n".join(lines) + "\n"
    target = dest / scene / f"{table}.md"
    if plots and lender:  # the lending table's figure: the same runs
        text += f"\n![Ag per round, then Ap_t]({lender}-convergence.png)\n"
    elif plots:
        try:
            from fedjax_sc.run.paper import plots as plots_lib
            png = plots_lib.convergence_figure(
                _figure_runs(order, seeds, runs, reports),
                dest / scene / f"{table}-convergence.png",
                title=f"{scene}: Ag per round, then Ap_t "
                      f"({seeds_label(seeds)})")
            text += f"\n![Ag per round, then Ap_t]({png.name})\n"
        except ModuleNotFoundError as e:
            text += f"\nFigure skipped: {e}\n"
    rundir.write_text(target, text)
    return text


def grid_values(cells: dict, reports: dict, seeds: Sequence[int]
                ) -> tuple[dict[str, dict[str, dict[str, float | None]]],
                           dict[str, dict[str, dict[str, float | None]]]]:
    """A grid table's cells (:func:`fedjax_sc.run.paper.table_plan.plan`, columns named ``"<metric>
    <setting>"``) as ``(ours, paper)``, each ``{metric: {row: {setting: percent}}}``: ours the
    mean over ``seeds`` where every seed has a report, else None."""
    ours: dict = {}
    paper: dict = {}
    for row, by_column in cells.items():
        for column, cell in by_column.items():
            metric, _, setting = column.partition(" ")
            values = [cell.metric(reports[(cell.run, s)]) for s in seeds
                      if (cell.run, s) in reports]
            done = len(values) == len(seeds) and all(v is not None for v in values)
            ours.setdefault(metric, {}).setdefault(row, {})[setting] = (
                100 * float(np.mean(values)) if done else None)
            paper.setdefault(metric, {}).setdefault(row, {})[setting] = cell.paper
    return ours, paper


def _heatmap(table: str, scene: str, cells: dict, reports: dict, seeds: Sequence[int],
             dest: Path) -> str:
    """The grid's heatmap beside the paper's (``<table>-heatmap.png``), as a Markdown line."""
    try:
        from fedjax_sc.run.paper import plots as plots_lib
    except ModuleNotFoundError as e:
        return f"Heatmap skipped: {e}"
    ours, paper = grid_values(cells, reports, seeds)
    blank = any(v is None for rows in ours.values() for row in rows.values()
                for v in row.values())
    try:
        png = plots_lib.grid_heatmap(ours, paper, dest / scene / f"{table}-heatmap.png",
                                     title=f"{table_title(table)} on {scene} "
                                           f"({seeds_label(seeds)}"
                                           f"{'; blank: not run yet' if blank else ''})")
    except ModuleNotFoundError as e:
        return f"Heatmap skipped: {e}"
    return f"![{table} as heatmaps, ours beside the paper's]({png.name})"


def _figure_runs(order: Sequence[str], seeds: Sequence[int], runs: dict, reports: dict
                 ) -> dict[str, list[Path]]:
    """Per method, the runs its curve averages: its finished seeds, as the table's cells do;
    a method with none finished, its running seeds."""
    out = {}
    for m in order:
        mine = [s for s in seeds if (m, s) in runs]
        done = [s for s in mine if (m, s) in reports]
        out[m] = [runs[(m, s)] for s in (done or mine)]
    return out


def _settings_line(c: dict, seeds: Sequence[int], table: str, scene: str, dest: Path) -> str:
    return (f"Ours: {c['rounds']} rounds, GloVe d = {c.get('embed_dim')} "
            f"({c.get('embeddings')}), batch {c.get('batch_size')}, LR {c.get('lr')}, "
            f"{c.get('local_epochs')} local epochs, L = {c.get('max_len')}, n_Z = "
            f"{c.get('ap_evals')}, z = {c.get('ap_steps')}, mu = {c.get('ap_lr_mult')}; "
            f"{seeds_label(seeds)}"
            + (f"; PCA {'centred' if c.get('pca_center', True) else 'uncentred'} on "
               f"{'the local-vocabulary rows' if c.get('local_vocab', True) else 'the whole table'}"
               f", upload noise sigma {c.get('upload_noise')}" if table == "table7" else "")
            + ". Paper: 50 "
            f"rounds, 200d GloVe. Regenerate: `fedjax-sc results render --table {table} "
            f"--scene {scene}" + ("" if dest == Path("results") else f" --dest {dest}")
            + "`.")


def _noise_line(order: Sequence[str], seeds: Sequence[int], configs: dict) -> str:
    """Each run's upload noise sigma (Sec. 5.2's default for the federated methods, none for
    the methods that upload nothing; runs made before that default show 0.0)."""
    cells = []
    for m in order:
        sigmas = sorted({configs[(m, s)].get("upload_noise") for s in seeds if (m, s) in configs},
                        key=str)
        cells.append(f"{m} {'/'.join(str(x) for x in sigmas)}")
    return "Upload noise sigma per run: " + ", ".join(cells) + "."


def _per_client(order: Sequence[str], seeds: Sequence[int], reports: dict, rows: dict,
                rounds: int, scene: str, keys: Sequence[str] = ("Ag", "Ap")) -> list[str]:
    """Tables 2-3: Ag^k and Ap^k (``keys``) per client, ours (paper)."""
    clients = [r["client"] for r in (next(iter(reports.values()))["clients"] if reports else
                                     [])] or list(paper.TABLE2.get(scene, {}).get("fedavg", {}))
    clients = [x for x in clients if x != "Avg"] + ["Avg"]
    heads = []
    for m in order:
        finished = [s for s in seeds if (m, s) in reports]
        going = [s for s in seeds if (m, s) in rows and (m, s) not in reports]
        if going and finished:  # the cells are the finished seeds'; say which, and the rest
            heads.append(f"{m} (seed{'s' if len(finished) > 1 else ''} "
                         f"{', '.join(map(str, finished))}; " + "; ".join(
                             f"seed {s} unfinished: round {len(rows[(m, s)])}/{rounds}"
                             for s in going) + ")")
        elif going:
            heads.append(f"{m} (unfinished: round {max(len(rows[(m, s)]) for s in going)}"
                         f"/{rounds})")
        else:
            heads.append(m)
    lines = []
    for key, title, source in (("Ag", "Ag^k and Ag (paper: Table 2)", paper.TABLE2),
                               ("Ap", "Ap^k and Ap (paper: Table 3)", paper.TABLE3)):
        if key not in keys:
            continue
        lines += [f"## {title}", "", "| client | " + " | ".join(heads) + " |",
                  "|---|" + "---:|" * len(order)]
        for client in clients:
            cells = []
            for m in order:
                theirs = source.get(scene, {}).get(m, {}).get(client)
                ours = _ours(m, client, key, seeds, reports, rows, clients)
                cells.append(ours + ("" if theirs is None else f" ({theirs})"))
            name = "**Avg**" if client == "Avg" else client
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines + ["A cell is the mean (+- std) over the method's finished seeds. A run with "
                    "no finished seed shows its latest round's Ag^k (personalised accuracy "
                    "before fine-tuning, marked (p), for a method without a global model) and "
                    "no Ap yet; 'starting': the run exists but has no finished round.", ""]


def _ap_modes(order: Sequence[str], seeds: Sequence[int], reports: dict) -> list[str]:
    """Ap of every inference mode (Table 6's s / p / sp) for the methods that have more than
    one (two-branch models: KTEPS, KTEPS*, PFL-DA), mean (+- std) over the finished seeds."""
    modes = ("s", "p", "sp")
    lines = []
    for m in order:
        done = [reports[(m, s)] for s in seeds if (m, s) in reports]
        if not done or len(done[0].get("Ap_modes") or {}) < 2:
            continue
        cells = []
        for mode in modes:
            values = [100 * r["Ap_modes"][mode] for r in done
                      if (r.get("Ap_modes") or {}).get(mode) is not None]
            cells.append("n/a" if not values else f"{np.mean(values):.1f}" + (
                f" +- {np.std(values, ddof=1):.1f}" if len(values) > 1 else ""))
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {done[0].get('ap_mode')} |")
    if not lines:
        return []
    return ["## Ap by inference mode (the paper's Table 6 modes)", "",
            "| method | s (shared branch) | p (private branch) | sp (both) | Table 3's mode |",
            "|---|---:|---:|---:|---|", *lines, "",
            "Every mode is scored on the same fine-tuned models; Table 3 reports the method's "
            "own mode (KTEPS: sp, Remark 4; PFL-DA: its gated mixture).", ""]


def _by_round(order: Sequence[str], seeds: Sequence[int], reports: dict, rows: dict,
              rounds: int) -> list[str]:
    """Ag every 10 rounds, its spread over the last 10 rounds, seconds per round, Ap phase."""
    lines = ["## Ag by round (every 10 rounds) and seconds per round", "",
             "| run | " + " | ".join(f"round {r}" for r in _every(rounds)) +
             " | last 10 rounds, mean +- sd | s / round (median) | Ap phase, s |",
             "|---|" + "---:|" * (len(_every(rounds)) + 3)]
    for m in order:
        for s in seeds:
            if (m, s) not in rows:
                continue
            by_round = {r["round"]: r for r in rows[(m, s)]}
            cells = []
            for r in _every(rounds):
                row = by_round.get(r)
                value = None if row is None else _headline(row)
                cells.append("" if value is None else f"{100 * value:.1f}"
                             + (" (p)" if row.get("Ag") is None else ""))
            tail = [v for v in map(_headline, rows[(m, s)][-10:]) if v is not None]
            cells.append(f"{100 * np.mean(tail):.1f} +- {100 * np.std(tail, ddof=1):.2f} "
                         f"({rows[(m, s)][-len(tail)]['round']}-{rows[(m, s)][-1]['round']})"
                         if len(tail) > 1 else "")
            secs = [r["seconds"] for r in rows[(m, s)]]
            ap_s = reports.get((m, s), {}).get("timing", {}).get("ap_seconds")
            label = m if len([t for t in seeds if (m, t) in rows]) == 1 else f"{m}, seed {s}"
            lines.append(f"| {label} | " + " | ".join(cells) + " | "
                         + (f"{np.median(secs):.0f}" if secs else "")
                         + _accelerator(reports.get((m, s), {})) + " | "
                         + ("" if ap_s is None else f"{ap_s:.0f}") + " |")
    return lines + ["", "(p): no global model; the clients' personalised accuracy before "
                    "fine-tuning. A blank cell: the run has not reached that round yet. Last 10 "
                    "rounds: the mean and standard deviation of Ag over the rounds named, a "
                    "measure of how much one round's figure moves by chance late in training. "
                    "Seconds: on a CPU, unless an accelerator is named."]


def _accelerator(report: dict) -> str:
    """`` (NVIDIA H200)`` for a run that trained on an accelerator (its report's
    ``environment.device``, ``"gpu: NVIDIA H200 x 1"``), else ``""``."""
    device = report.get("environment", {}).get("device", "")
    platform, _, kind = device.partition(":")
    return "" if not kind or platform.strip() == "cpu" else f" ({kind.split(' x ')[0].strip()})"


def summary_table(order: Sequence[str], seeds: Sequence[int], reports: dict, rows: dict,
                  rounds: int, scene: str, keys: Sequence[str] = ("Ag", "Ap")) -> str:
    """The averages only: per method, rounds done (the furthest seed), seeds finished of
    those exported, Ag and Ap (``keys``; ours, mean +- std over the finished seeds) beside
    the paper's Tables 2-3 (the README's results table)."""
    source = {"Ag": paper.TABLE2, "Ap": paper.TABLE3}
    lines = ["| method | rounds | seeds finished | " + " | ".join(f"{k} | {k}, paper" for k in keys)
             + " |", "|---|---:|---:|" + "---:|---:|" * len(keys)]
    fmt = lambda v: "n/a" if v is None else f"{v}"
    for m in order:
        done = max(len(rows.get((m, s), [])) for s in seeds)
        finished = sum((m, s) in reports for s in seeds)
        cells = [f"{_ours(m, 'Avg', k, seeds, reports, rows, ['Avg'])} | "
                 f"{fmt(source[k].get(scene, {}).get(m, {}).get('Avg'))}" for k in keys]
        lines.append(f"| {m} | {done} / {rounds} | {finished} / "
                     f"{sum((m, s) in rows for s in seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _every(rounds: int) -> list[int]:
    return [r for r in range(10, rounds + 1, 10)] or [rounds]


def _headline(row: dict) -> float | None:
    """A round's Ag, or its personalised accuracy for a method without a global model."""
    return row["Ag"] if row.get("Ag") is not None else _personal(row)


def _personal(row: dict) -> float | None:
    personal = row.get("personal") or {}
    return next(iter(personal.values()), None)


def _ours(method: str, client: str, key: str, seeds: Sequence[int], reports: dict,
          rows: dict, clients: Sequence[str]) -> str:
    """A cell: mean (+- std) over the finished seeds, ``n/a`` where the method has no such
    figure; for a run still going, its latest round's Ag^k (Ag table) or ``pending``."""
    table = "table2" if key == "Ag" else "table3"
    done = [s for s in seeds if (method, s) in reports]
    if not done:
        latest = [rows[(method, s)][-1] for s in seeds if rows.get((method, s))]
        if not latest:
            return "starting" if any((method, s) in rows for s in seeds) else "not run"
        if key == "Ap":
            return "pending"
        row = latest[0]
        per_client = (row.get("Ag_per_client") if row.get("Ag") is not None
                      else row.get("personal_per_client")) or []
        if client == "Avg":
            value = _headline(row)
        else:
            value = per_client[clients.index(client)] if per_client else None
        mark = "" if row.get("Ag") is not None else " (p)"
        return "n/a" if value is None else f"{100 * value:.1f}{mark}"
    values: list[Any] = [client_metric(table, method, client)(reports[(method, s)])
                         for s in done]
    values = [100 * v for v in values if v is not None]
    if not values:
        return "n/a"
    mean = f"{np.mean(values):.1f}"
    return mean + (f" +- {np.std(values, ddof=1):.1f}" if len(values) > 1 else "")
