"""The gap figures docs/results.md quotes: how far the exported Tables 2-3 runs are from the
paper's cells (Li et al. 2021, "Preliminary Steps Towards Federated Sentiment
Classification", Tables 2 and 3; Ag and Ap as its Eq. 15), and how far our seeds are from
each other.

    python examples/gap_figures.py [--results results] [--scene fdu] [--set-aside fedfusion:Ag]

Prints, in points of accuracy (ours - paper):

- the averages (Table 2's Ag and Table 3's Ap per method): how many are within 1.5 and 2.0,
  the mean absolute gap, and the same without the rows ``--set-aside`` names;
- every cell (averages and per-client): the mean absolute gap;
- the per-client cells of the methods no ``--set-aside`` row belongs to: mean absolute gap,
  count over 2.0, mean signed gap;
- each client's offset (the median gap over every method's cells of that client,
  ``gaps.client_offsets``) and the per-client cells less it, with and without the
  ``--set-aside`` rows, beside the raw per-client cells;
- per method with two seeds or more, per metric, the mean absolute difference of a client's
  cell between two seeds (every pair of seeds pooled), how many such differences are over
  2.0, and the mean over cells of the seeds' standard deviation.

Reads ``<results>/<scene>/table3/<method>-seed<S>/report.json`` as ``fedjax-sc results
export`` writes them; the mechanism is ``fedjax_sc.run.paper.gaps`` (the gap section of
``table3.md``), this script only slices it.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from fedjax_sc.run import rundir
from fedjax_sc.run.paper import gaps
from fedjax_sc.run.paper.results import exported_runs
from fedjax_sc.run.paper.table_plan import TABLE23_METHODS, client_metric


def _reports(results: str, scene: str) -> dict[str, list[dict]]:
    """``{method: [report, ...]}`` in seed order, finished runs only."""
    out: dict[str, list[dict]] = {}
    for (method, _), run in sorted(exported_runs(results, scene, "table3").items()):
        if (run / "report.json").is_file():
            out.setdefault(method, []).append(rundir.read_json(run / "report.json"))
    return out


def _line(label: str, cells: list[dict]) -> str:
    s = gaps.summarise(cells)
    if not s["n"]:
        return f"{label}: no cell"
    return (f"{label}: {s['n']} cells, mean abs {s['mean_abs']:.2f}, "
            f"{s['over']} over {gaps.THRESHOLD:g}, mean {s['bias']:+.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="the exported results folder")
    parser.add_argument("--scene", default="fdu", choices=("fdu", "iyy"))
    parser.add_argument("--set-aside", nargs="*", default=[], metavar="METHOD:METRIC",
                        help="rows whose gap is explained apart (e.g. fedfusion:Ag)")
    args = parser.parse_args()
    reports = _reports(args.results, args.scene)
    if not reports:
        raise SystemExit(f"error: no finished run under {Path(args.results) / args.scene}/table3")
    aside = set()
    for item in args.set_aside:
        method, _, metric = item.partition(":")
        if metric not in ("Ag", "Ap"):
            raise SystemExit(f"error: --set-aside {item!r}: expected METHOD:Ag or METHOD:Ap")
        aside.add((method, metric))
    names = [r["client"] for r in next(iter(reports.values()))[0]["clients"]]
    order = [m for m in TABLE23_METHODS["table3"] if m in reports]
    cells = [{**c, "method": m} for m in order
             for c in gaps.cell_gaps(m, args.scene, names, reports[m])]
    kept = lambda c: (c["method"], c["metric"]) not in aside
    avg = [c for c in cells if c["client"] == "Avg"]
    per = [c for c in cells if c["client"] != "Avg"]
    a = np.abs([c["gap"] for c in avg])
    mean = lambda v: f"{np.mean(v):.2f}" if len(v) else "n/a"
    print(f"averages: {len(a)}, {(a <= 1.5).sum()} within 1.5, {(a <= 2.0).sum()} within 2.0; "
          f"mean abs {mean(a)}, without the rows set aside "
          f"{mean(np.abs([c['gap'] for c in avg if kept(c)]))}")
    for c in avg:
        if abs(c["gap"]) > 1.5:
            print(f"  over 1.5: {c['method']} {c['metric']} {c['gap']:+.1f}")
    print(f"every cell: {len(cells)}, mean abs {mean(np.abs([c['gap'] for c in cells]))}")
    aside_methods = {m for m, _ in aside}
    print(_line("per-client, methods with no row set aside",
                [c for c in per if c["method"] not in aside_methods]))
    offsets = gaps.client_offsets(per)
    print("offsets: " + ", ".join(f"{k} {v:+.1f}".replace("-0.0", "+0.0")
                                 for k, v in offsets.items()))
    print(_line("per-client, raw", per))
    print(_line("per-client less offsets", gaps.less_offsets(per, offsets)))
    print(_line("per-client less offsets, without the rows set aside",
                gaps.less_offsets([c for c in per if kept(c)], offsets)))
    for m in order:
        if len(reports[m]) < 2:
            continue
        for table, metric in (("table2", "Ag"), ("table3", "Ap")):
            values = np.asarray([[100.0 * client_metric(table, m, k)(r) for k in names]
                                 for r in reports[m]])  # (seeds, clients)
            diffs = np.abs(np.concatenate([values[i] - values[j] for i, j in
                                           itertools.combinations(range(len(values)), 2)]))
            print(f"seeds of {m} ({len(values)}), {metric}: per-client difference mean abs "
                  f"{diffs.mean():.2f}, {(diffs > gaps.THRESHOLD).sum()} of {diffs.size} over "
                  f"{gaps.THRESHOLD:g}; seeds' std per cell "
                  f"{values.std(axis=0, ddof=1).mean():.2f}")


if __name__ == "__main__":
    main()
