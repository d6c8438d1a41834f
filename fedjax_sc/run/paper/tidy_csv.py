"""A run's ``metrics.jsonl`` as tidy data (``fedjax-sc results export RUN [RUN ...] --csv
FILE``): one CSV row per measurement, for pandas, R or a spreadsheet. A population's folder
(``train --seeds/--grid --out DIR``) stands for its members, each row carrying the member's
seed and grid values."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedjax_sc.run import rundir
from fedjax_sc.run.members import read_index
from fedjax_sc.run.plumbing.tracking import round_figures

CSV_COLUMNS = ("run", "seed", "phase", "round", "t", "client", "metric", "value")
"""The columns of :func:`metrics_csv` (one measurement per row: tidy data); a population's
grid settings follow ``seed``, one column each."""


def _runs(runs: Sequence[str | Path]) -> list[tuple[str, Path, Any, dict[str, Any]]]:
    """``(label, folder, seed, grid values)`` of every run; a population's folder (one with
    ``population.json`` and no ``metrics.jsonl``) stands for its members."""
    out = []
    for run in runs:
        folder = Path(run)
        index = folder / "population.json"
        if index.is_file() and not (folder / "metrics.jsonl").exists():
            for m in read_index(index)["members"]:
                out.append((str(folder / m["folder"]), folder / m["folder"], m["seed"],
                            m["values"]))
            continue
        config = folder / "config.json"
        seed = rundir.read_json(config).get("seed", "") if config.is_file() else ""
        out.append((str(run), folder, seed, {}))
    return out


def metrics_csv(runs: Sequence[str | Path], path: str | Path) -> int:
    """Writes the runs' ``metrics.jsonl`` as one tidy CSV (Python's ``csv`` module), one measurement
    per row: ``run`` (the folder as given, or a population member's), ``seed``, the population's
    grid settings (one column each, empty for a run outside one), ``phase`` (``round`` / ``ap``),
    ``round``, ``t`` (the Ap evaluation, empty for rounds), ``client`` (its name, or ``all`` for a
    mean over clients), ``metric`` (every top-level number of the row,
    :func:`~fedjax_sc.run.plumbing.tracking.round_figures`: ``Ag``, ``train_loss``, ``seconds``,
    the cross-device ``Ag_pooled``/``Ag_unseen``...; ``personal_<mode>``, an aux term, ``server_<name>``,
    ``upload_sent_bytes``, ``local_steps`` with heterogeneous clients...; ``Ap_t_<mode>`` in
    the Ap phase) and ``value`` (accuracies as fractions).
    ``pandas.read_csv(path).pivot_table(...)`` gives any view.

    Returns:
      The number of rows written.

    Raises:
      FileNotFoundError: a run without ``metrics.jsonl``; ValueError: a damaged line
        (``file:line``).
    """
    rows: list[tuple] = []
    members = _runs(runs)
    grid = list(dict.fromkeys(k for *_, values in members for k in values))
    for run, folder, seed, values in members:
        settings = (seed, *(values.get(k, "") for k in grid))
        metrics = folder / "metrics.jsonl"
        if not metrics.is_file():
            raise FileNotFoundError(f"{metrics}: no such file (not a run folder?)")
        names = _client_names(folder)
        for lineno, line in enumerate(metrics.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{metrics}:{lineno}: not valid JSON ({e.msg})") from None
            phase, rnd, t = r.get("phase", "round"), r.get("round"), r.get("t", "")
            add = lambda client, metric, value: rows.append(  # noqa: E731
                (run, *settings, phase, rnd, t, client, metric, value))
            if phase == "ap":
                for mode, value in (r.get("Ap_t") or {}).items():
                    add("all", f"Ap_t_{mode}", value)
                for k, value in enumerate(r.get("Ap_t_per_client") or []):
                    add(_name(names, k), "Ap_t", value)
                continue
            for metric, value in round_figures(r).items():
                add("all", metric, value)
            for mode, value in (r.get("personal") or {}).items():
                add("all", f"personal_{mode}", value)
            for metric, value in (r.get("aux") or {}).items():
                if value is not None:  # no client trained in the round
                    add("all", metric, value)
            for metric, value in (r.get("server") or {}).items():
                add("all", f"server_{metric}", value)
            # every client's evaluation and communication figures; the round's clients'
            # training figures (a sampled round lists them in "clients")
            for key, metric in (("Ag_per_client", "Ag"), ("personal_per_client", "personal")):
                for k, value in enumerate(r.get(key) or []):
                    add(_name(names, k), metric, value)
            for key, metric in (("train_loss_per_client", "train_loss"),
                                ("local_steps_per_client", "local_steps")):
                for k, value in enumerate(r.get(key) or []):
                    if value is not None:  # a client that ran no step
                        add(_name(names, k, r.get("clients")), metric, value)
            for metric, values in (r.get("aux_per_client") or {}).items():
                for k, value in enumerate(values):
                    if value is not None:
                        add(_name(names, k, r.get("clients")), metric, value)
            comm = r.get("communication") or {}
            for metric in ("download_MB_mean", "upload_sent_MB_mean", "upload_sent_over_dense"):
                if metric in comm:
                    add("all", metric, comm[metric])
            for metric in ("download_bytes", "upload_sent_bytes"):
                for k, value in enumerate(comm.get(metric) or []):
                    add(_name(names, k), metric, value)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS[:2] + tuple(grid) + CSV_COLUMNS[2:])
        writer.writerows(rows)
    return len(rows)


def _client_names(folder: Path) -> list[str]:
    """The clients' names from the run's report (empty without one)."""
    report = folder / "report.json"
    if not report.exists():
        return []
    return [c["client"] for c in rundir.read_json(report).get("clients", [])]


def _name(names: list[str], k: int, sampled: list[int] | None = None) -> str:
    """Client ``k`` of a round's per-client lists (``sampled``: the round's client ids)."""
    index = sampled[k] if sampled is not None and k < len(sampled) else k
    return names[index] if index < len(names) else str(index)
