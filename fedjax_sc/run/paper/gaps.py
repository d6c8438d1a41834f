"""How far our Tables 2-3 are from the paper's, cell by cell, and how far our own seeds are
from each other on the same cells.

A cell is one client's Ag^k (the paper's Table 2) or Ap^k (its Table 3), or their average
(Eq. 15 of Li et al. 2021, "Preliminary Steps Towards Federated Sentiment Classification").
A per-client cell rests on one client's test set (400 reviews per FDU-MTL domain) and, in
the paper, on one training run: two runs of one model differ there by more than their
averages do. So the gaps are summarised apart for the averages and for the per-client cells,
and, with several seeds, beside the spread of our own seeds on the same cells (the standard
deviation over seeds of each cell, averaged over the cells): a per-client gap within that
spread is what another seed could give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedjax_sc.run.paper import tables as paper
from fedjax_sc.run.paper.table_plan import client_metric

THRESHOLD = 2.0
"""Points of accuracy above which a gap is counted (and, in docs/results.md, explained)."""

SOURCES = (("Ag", "table2", paper.TABLE2), ("Ap", "table3", paper.TABLE3))


def cell_gaps(method: str, scene: str, clients: Sequence[str], reports: Sequence[dict],
              metrics: Sequence[str] = ("Ag", "Ap")) -> list[dict[str, Any]]:
    """Every Table 2-3 cell of ``method`` that both we and the paper have.

    Args:
      method: a Table 2-3 method name.
      scene: ``fdu`` or ``iyy`` (the paper's tables).
      clients: the client names of the runs (the rows; ``Avg`` is added).
      reports: the finished runs' ``report.json`` contents, one per seed.
      metrics: which of ``Ag`` (Table 2) and ``Ap`` (Table 3).

    Returns:
      One dict per cell: ``metric`` (``Ag``/``Ap``), ``client`` (or ``Avg``), ``ours``
      (mean over seeds, points), ``paper`` (points), ``gap`` (ours - paper, points) and
      ``seed_std`` (standard deviation over seeds, points; None with one seed).
    """
    cells = []
    for metric, table, source in SOURCES:
        if metric not in metrics:
            continue
        theirs = source.get(scene, {}).get(method, {})
        for client in [*clients, "Avg"]:
            values = [client_metric(table, method, client)(r) for r in reports]
            values = [100.0 * v for v in values if v is not None]
            if theirs.get(client) is None or not values:
                continue
            ours = float(np.mean(values))
            cells.append({"metric": metric, "client": client, "ours": ours,
                          "paper": float(theirs[client]), "gap": ours - theirs[client],
                          "seed_std": (float(np.std(values, ddof=1)) if len(values) > 1
                                       else None)})
    return cells


def summarise(cells: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``cells`` (of :func:`cell_gaps`) summarised: ``n``, ``mean_abs`` (points), ``over``
    (cells with |gap| > :data:`THRESHOLD`), ``bias`` (mean signed gap) and ``seed_std``
    (mean over cells of the seeds' standard deviation; None with one seed). Empty: ``n`` 0
    and None elsewhere."""
    if not cells:
        return {"n": 0, "mean_abs": None, "over": 0, "bias": None, "seed_std": None}
    gaps = np.asarray([c["gap"] for c in cells])
    stds = [c["seed_std"] for c in cells if c["seed_std"] is not None]
    return {"n": len(cells), "mean_abs": float(np.abs(gaps).mean()),
            "over": int((np.abs(gaps) > THRESHOLD).sum()), "bias": float(gaps.mean()),
            "seed_std": float(np.mean(stds)) if stds else None}


def client_offsets(cells: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Each client's offset: the median gap (points) over every per-client cell of that
    client in ``cells`` (of :func:`cell_gaps`, any number of methods and metrics; ``Avg``
    cells are left out). A gap every method shares on one domain (say ours +2.5 on one, -2.7
    on another, whatever the method) belongs to the common setup (word vectors, vocabulary,
    tokenisation), not to a method; the median keeps one method far off (a row
    whose every cell is 10 points under) from moving it. Clients in first-seen order."""
    by_client: dict[str, list[float]] = {}
    for c in cells:
        if c["client"] != "Avg":
            by_client.setdefault(c["client"], []).append(c["gap"])
    return {k: float(np.median(v)) for k, v in by_client.items()}


def less_offsets(cells: Sequence[dict[str, Any]],
                 offsets: dict[str, float]) -> list[dict[str, Any]]:
    """The per-client ``cells`` with each gap less its client's offset
    (:func:`client_offsets`): what is left to the methods. ``Avg`` cells are dropped."""
    return [{**c, "gap": c["gap"] - offsets[c["client"]]} for c in cells
            if c["client"] != "Avg"]


def paper_pair_spread(scene: str, within: float = 0.5) -> dict[str, Any] | None:
    """The paper's own per-client spread: over every pair of methods in one of its Tables 2-3
    whose averages are within ``within`` points, the mean absolute per-client difference.

    Returns:
      ``{"pairs", "low", "high", "median"}`` (points; ``low``/``high`` the smallest and
      largest pair's mean absolute difference) and ``"most_over"`` (the most clients of one
      pair over :data:`THRESHOLD`, of ``"clients"``); None when no pair qualifies.
    """
    spreads, over, clients = [], 0, 0
    for _, _, source in SOURCES:
        table = source.get(scene, {})
        names = list(table)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                if abs(table[a]["Avg"] - table[b]["Avg"]) > within:
                    continue
                d = np.asarray([table[a][c] - table[b][c] for c in table[a]
                                if c != "Avg" and c in table[b]])
                spreads.append(float(np.abs(d).mean()))
                over, clients = max(over, int((np.abs(d) > THRESHOLD).sum())), len(d)
    if not spreads:
        return None
    return {"pairs": len(spreads), "low": min(spreads), "high": max(spreads),
            "median": float(np.median(spreads)), "most_over": over, "clients": clients}


def gap_section(order: Sequence[str], seeds: Sequence[int], reports: dict, scene: str,
                clients: Sequence[str], metrics: Sequence[str] = ("Ag", "Ap")) -> list[str]:
    """Markdown lines: per finished method and over all of them, the gaps of the averages
    and of the per-client cells (:func:`summarise`) of ``metrics``. Methods with no finished
    seed are left out (named)."""
    fmt = lambda v, signed=False: "n/a" if v is None else (f"{v:+.2f}" if signed else f"{v:.2f}")
    head = ["| method | seeds | Avg cells: gaps | per-client cells | mean abs gap | "
            f"over {THRESHOLD:g} | mean gap | seeds' std |",
            "|---|---:|---|---:|---:|---:|---:|---:|"]
    lines, every, left_out = [], [], []
    for m in order:
        done = [reports[(m, s)] for s in seeds if (m, s) in reports]
        if not done:
            left_out.append(m)
            continue
        cells = cell_gaps(m, scene, clients, done, metrics)
        avg = ", ".join(f"{c['metric']} {c['gap']:+.1f}" for c in cells if c["client"] == "Avg")
        per = summarise([c for c in cells if c["client"] != "Avg"])
        every += cells
        lines.append(f"| {m} | {len(done)} | {avg or 'n/a'} | {per['n']} | "
                     f"{fmt(per['mean_abs'])} | {per['over']} | {fmt(per['bias'], True)} | "
                     f"{fmt(per['seed_std'])} |")
    if not lines:
        return []
    per = summarise([c for c in every if c["client"] != "Avg"])
    avg = summarise([c for c in every if c["client"] == "Avg"])
    both = summarise(every)
    lines.append(f"| **all** | | {avg['n']} cells: mean abs {fmt(avg['mean_abs'])}, "
                 f"{avg['over']} over {THRESHOLD:g} | {per['n']} | {fmt(per['mean_abs'])} | "
                 f"{per['over']} | {fmt(per['bias'], True)} | {fmt(per['seed_std'])} |")
    text = ["## Gaps to the paper (points; ours - paper)", "", *head, *lines, "",
            f"Over all {both['n']} cells (averages and per-client, {' and '.join(metrics)}): "
            f"mean absolute gap {fmt(both['mean_abs'])}, {both['over']} over {THRESHOLD:g}. "
            "A per-client cell rests on one client's test set and one training run; the seeds' "
            "std is the spread of our own seeds on the same cells."]
    offsets = client_offsets(every)
    if offsets and len(lines) > 2:  # two methods or more (lines: one a method, then all)
        left = summarise(less_offsets(every, offsets))
        text.append("Per client, the median gap over every method's cells (an offset the "
                    "methods share on that domain, so the common setup's, not a method's): "
                    + ", ".join(f"{k} {v:+.1f}".replace("-0.0", "+0.0")
                                for k, v in offsets.items())
                    + f". Each per-client cell less its client's offset: mean absolute gap "
                    f"{fmt(left['mean_abs'])}, {left['over']} over {THRESHOLD:g}.")
    spread = paper_pair_spread(scene)
    if spread:
        text.append(f"The paper's own spread: its {spread['pairs']} pairs of methods whose "
                    f"averages are within 0.5 points differ per client by {spread['low']:.2f}"
                    f" to {spread['high']:.2f} (median {spread['median']:.2f}) on mean "
                    f"absolute value, up to {spread['most_over']} of {spread['clients']} "
                    f"clients by more than {THRESHOLD:g}.")
    if left_out:
        text.append(f"Not finished (left out): {', '.join(left_out)}.")
    return text + [""]
