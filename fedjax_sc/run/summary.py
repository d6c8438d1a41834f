"""A population that summarises itself: per grid point, the mean and spread over its seeds.

Every time ``population.json`` is written (:func:`fedjax_sc.run.members.write_index`), the
members' finished runs are read back and summarised in ``DIR/report.md`` and under
``"summary"`` in ``population.json``: for each grid point (each set of ``--grid`` values), the
seeds, how many finished, and the mean and sample standard deviation over those seeds of

* ``Ag``: the global model's accuracy after the last round (Li et al. 2021, Eq. 14),
* ``Ap``: the personalisation phase's accuracy (Eq. 16),
* ``Ag_last10``: each seed's mean Ag over its last 10 rounds (fewer in a shorter run), a
  figure less sensitive to where one round's noise happened to fall.

A member that has not finished (running, diverged) counts in ``seeds`` but not in the
figures. Accuracies are fractions in ``population.json`` and percentages in report.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_sc.run import rundir

LAST = 10
"""The rounds ``Ag_last10`` averages."""
FIGURES = ("Ag", "Ap", "Ag_last10")
"""The summarised figures, in report.md's column order."""


def _member(folder: Path) -> dict[str, float | None] | None:
    """A finished member's figures (None while it has no report.json)."""
    if not (folder / "report.json").is_file():
        return None
    report = rundir.read_json(folder / "report.json")
    rounds = []
    if (folder / "metrics.jsonl").is_file():
        for line in (folder / "metrics.jsonl").read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("phase", "round") == "round" and row.get("Ag") is not None:
                rounds.append(row["Ag"])
    return {"Ag": report.get("Ag"), "Ap": report.get("Ap"),
            "Ag_last10": float(np.mean(rounds[-LAST:])) if rounds else None,
            "last_rounds": min(len(rounds), LAST)}


def _spread(values: list[float]) -> dict[str, float | None] | None:
    if not values:
        return None
    return {"mean": float(np.mean(values)),
            "std": float(np.std(values, ddof=1)) if len(values) > 1 else None}


def summarize(root: str | Path, index: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary of the population ``index`` (population.json's content) under ``root``.

    Returns:
      One dict per grid point, in the members' order: ``values``, ``seeds``, ``finished``
      (the number of seeds with a report), per figure of :data:`FIGURES` ``{"mean",
      "std"}`` (std None for one seed) or None where no seed has it, and ``last_rounds``,
      the fewest rounds a finished seed's ``Ag_last10`` averages (None: none finished).
    """
    points: dict[str, dict[str, Any]] = {}
    for m in index["members"]:
        key = json.dumps(m["values"], sort_keys=True)
        point = points.setdefault(key, {"values": m["values"], "seeds": [], "runs": []})
        point["seeds"].append(m["seed"])
        got = _member(Path(root) / m["folder"])
        if got is not None:
            point["runs"].append(got)
    summary = []
    for point in points.values():
        runs = point.pop("runs")
        summary.append({**point, "finished": len(runs), **{
            f: _spread([r[f] for r in runs if r[f] is not None]) for f in FIGURES},
            "last_rounds": min((r["last_rounds"] for r in runs), default=None)})
    return summary


def markdown(summary: list[dict[str, Any]], grid: list[str]) -> str:
    """report.md of a population: one row per grid point, figures as ``mean +- std`` (%)."""
    def cell(s):
        if s is None:
            return "n/a"
        return f"{100 * s['mean']:.1f}" + ("" if s["std"] is None else
                                           f" +- {100 * s['std']:.1f}")

    # a shorter run averages its rounds so far: the header says how many (the fewest)
    last = min((p["last_rounds"] for p in summary if p.get("last_rounds")), default=LAST)
    head = list(grid) + ["seeds", "finished", "Ag", "Ap",
                         f"Ag, last {last} round{'s' if last != 1 else ''}"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in summary:
        lines.append("| " + " | ".join(
            [str(p["values"][g]) for g in grid] + [",".join(map(str, p["seeds"])),
                                                    str(p["finished"])]
            + [cell(p[f]) for f in FIGURES]) + " |")
    return ("Mean +- sample standard deviation over the seeds that finished, per grid point "
            "(accuracies in %).\n\n" + "\n".join(lines) + "\n")


def write(index_path: str | Path, index: dict[str, Any]) -> dict[str, Any]:
    """``index`` with its ``"summary"``; writes the population's report.md beside it."""
    root = Path(index_path).parent
    summary = summarize(root, index)
    rundir.write_text(root / "report.md", markdown(summary, index.get("grid", [])))
    return {**index, "summary": summary}
