"""Table 7 of Li et al. 2021: KTEPS* over a grid of PCA bands (Sec. 5.6.3).

``fedjax-sc table7`` runs ``kteps_star`` once per (d1, d2), d2 = round(fraction x d), each in
its own directory ``<out>/d1-<d1>_d2-<d2>``; a run whose ``report.json`` is complete for the
requested rounds is skipped, a run with checkpoints is resumed, so an interrupted grid continues
where it stopped. It then prints and writes ``<out>/table7.md``: Ag and Ap per band, ours beside
the paper's (d = 200 in the paper; the bands are compared by their fraction of d).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

from fedjax_sc.run.paper import TABLE7
from fedjax_sc.run.train import TrainConfig, train


def band_dir(out: Path, d1: int, d2: int) -> Path:
    """Where the run of band (d1, d2) lives."""
    return out / f"d1-{d1}_d2-{d2}"


def run_grid(base: TrainConfig, out: str | Path, d1s: Sequence[int] = (1, 2, 3, 6),
             fractions: Sequence[float] = (1.0, 0.75),
             log: Callable[[str], None] = print) -> str:
    """Runs (or resumes, or skips) every band and returns the Markdown table.

    Args:
      base: the settings shared by all runs (``algorithm`` is forced to ``kteps_star``;
        ``pca_band``, ``out``, ``resume`` are set per run).
      out: the grid's folder.
      d1s: first components kept (paper: 1, 2, 3, 6).
      fractions: d2 / d (paper: 200 / 200 and 150 / 200).
      log: progress lines.

    Raises:
      ValueError: a band with d1 > d2, or a fraction outside (0, 1].
    """
    out = Path(out)
    c = dataclasses.replace(base, algorithm="kteps_star", pca_band=None).resolved()
    bands = []
    for f in fractions:
        if not 0 < f <= 1:
            raise ValueError(f"--d2-fraction must lie in (0, 1], got {f}")
        d2 = max(1, math.floor(f * c.embed_dim + 0.5))
        for d1 in d1s:
            if not 1 <= d1 <= d2:
                raise ValueError(f"band d1 = {d1}, d2 = {d2} (fraction {f} of d = "
                                 f"{c.embed_dim}) is empty")
            bands.append((f, d1, d2))
    results = {}
    for f, d1, d2 in bands:
        where = band_dir(out, d1, d2)
        report = _finished(where, c.rounds)
        if report is None:
            resume = (where / "config.json").exists()
            log(f"== band d1 = {d1}, d2 = {d2}: {'resuming' if resume else 'starting'} "
                f"{where}")
            run = dataclasses.replace(c, pca_band=(d1, d2), out=str(where), resume=resume)
            train(run, log=log)
            report = _finished(where, c.rounds)
        else:
            log(f"== band d1 = {d1}, d2 = {d2}: finished in {where}, skipped")
        results[(f, d1)] = report
    table = format_grid(results, c, d1s, fractions)
    (out / "table7.md").write_text(table + "\n")
    log(table)
    return table


def _finished(where: Path, rounds: int) -> dict | None:
    path = where / "report.json"
    if not path.exists():
        return None
    report = json.loads(path.read_text())
    return report if report.get("rounds") == rounds else None


def format_grid(results: dict, c: TrainConfig, d1s: Sequence[int],
                fractions: Sequence[float]) -> str:
    """Markdown: one row per d2, Ag and Ap per d1, ``ours (paper)`` in percent."""
    paper = TABLE7.get(c.scene, {})
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}"
    head = ("| d2 | " + " | ".join(f"Ag d1={d1}" for d1 in d1s) + " | "
            + " | ".join(f"Ap d1={d1}" for d1 in d1s) + " |")
    lines = [f"KTEPS* on {c.scene}, d = {c.embed_dim}, {c.rounds} rounds; ours (paper, d = "
             f"200, 50 rounds)", "", head, "|---|" + "---:|" * (2 * len(d1s))]
    for f in fractions:
        d2 = max(1, math.floor(f * c.embed_dim + 0.5))
        cells = []
        for metric in ("Ag", "Ap"):
            for d1 in d1s:
                ours = results.get((f, d1), {}).get(metric)
                theirs = paper.get(metric, {}).get(f, {}).get(d1)
                cells.append(pct(ours) + ("" if theirs is None else f" ({theirs})"))
        lines.append(f"| {d2} ({f:g} d) | " + " | ".join(cells) + " |")
    return "\n".join(lines)
