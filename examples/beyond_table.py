"""The table of results/fdu/beyond.md from a folder of runs, one per method (the run folder's
name is the method): Ag and Ap at the last round, Ag at rounds 1 and 5, seconds per round
(median), the MB a client sends and receives per round, and the paired bootstrap difference
to each reference run (``fedjax-sc compare``: test-sample noise only, one seed).

    python examples/beyond_table.py ~/fedjax_runs/beyond --reference fedavg kteps \\
        --methods fedavg fedper scaffold feddyn moon ditto fedrep fedbabu apfl per_fedavg \\
        fedrod pfedme

``--run NAME=PATH`` names a run folder outside ``runs`` (e.g. the paper's methods' committed
runs: ``--run fedavg=results/fdu/table3/fedavg-seed0``). ``--figure PATH`` also draws every
listed method's convergence (Ag per round, then Ap_t) in one PNG
(:func:`fedjax_sc.run.paper.plots.convergence_figure`).

A method with more seeds than seed 0 (run folders ``METHOD-seed1``, ``METHOD-seed2``, ... in
``runs`` or named by ``--run``) gets a second table: Ag and Ap as mean +- std (ddof 1) over
its seeds, and the mean over seeds of its difference to each reference at the same seed (the
seeds both have), the spread over initialisations that one seed's bootstrap leaves out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from fedjax_sc.run.paper.compare import compare, format_difference


def pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f}"


def difference(run: Path, reference: Path, ap: bool) -> str:
    """``+d (low, high)`` in points, or n/a where either run lacks the figure."""
    try:
        r = compare(run, reference, ap=ap, log=lambda _: None)
    except (ValueError, OSError):
        return "n/a"
    return format_difference(r)


def row(name: str, run: Path, references: list[Path]) -> str:
    report = json.loads((run / "report.json").read_text())
    rounds = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
              if r.get("phase") == "round"]
    seconds = sorted(r["seconds"] for r in rounds)[len(rounds) // 2]
    comm = report["communication"]
    fifth = rounds[min(4, len(rounds) - 1)]["Ag"]
    cells = [name, str(len(rounds)), pct(rounds[0]["Ag"]), pct(fifth), pct(report["Ag"]),
             pct(report.get("Ap")), f"{seconds:.1f}",
             f"{comm['upload_sent_MB_mean']:.2f} / {comm['download_MB_mean']:.2f}"]
    for ref in references:
        same = ref.resolve() == run.resolve()
        cells += ["" if same else difference(run, ref, False),
                  "" if same else difference(run, ref, True)]
    return "| " + " | ".join(cells) + " |"


def near_best(reports: dict[str, dict], margin: float = 0.005) -> str:
    """One line per metric: the methods within ``margin`` (0.5 points) of the best Ag and
    Ap, the ones whose seeds 1-2 the comparison needs before it can rank them."""
    lines = []
    for key in ("Ag", "Ap"):
        scores = {m: r[key] for m, r in reports.items() if r.get(key) is not None}
        if scores:
            best = max(scores.values())
            near = [m for m, v in sorted(scores.items(), key=lambda x: -x[1])
                    if v >= best - margin]
            lines.append(f"Within 0.5 points of the best {key} ({pct(best)}): {', '.join(near)}.")
    return " ".join(lines)


def seeds_table(methods: list[str], references: list[str], where) -> list[str]:
    """The over-seeds table's lines (none when no method has a seed beyond 0): one row per
    method with two or more finished seeds; ``where(name)`` is a run folder's path."""
    def finished(m: str) -> dict[int, dict]:
        out, s = {}, 0
        while (report := where(m if s == 0 else f"{m}-seed{s}") / "report.json").exists():
            out[s], s = json.loads(report.read_text()), s + 1
        return out

    def spread(values: list[float], signed: bool = False) -> str:
        mean = f"{100 * np.mean(values):{'+' if signed else ''}.1f}"
        return mean + (f" +- {100 * np.std(values, ddof=1):.1f}" if len(values) > 1 else "")

    seeds = {m: finished(m) for m in dict.fromkeys(methods + references)}
    rows = []
    for m in methods:
        if len(seeds[m]) < 2:
            continue
        cells = [m, str(len(seeds[m]))]
        cells += [spread([r[k] for r in seeds[m].values()]) for k in ("Ag", "Ap")]
        for ref in references:
            for k in ("Ag", "Ap"):
                both = [s for s in seeds[m] if s in seeds[ref]]
                cells.append("" if ref == m or not both else spread(
                    [seeds[m][s][k] - seeds[ref][s][k] for s in both], signed=True))
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    head = ["method", "seeds", "Ag", "Ap"]
    for r in references:
        head += [f"Ag - {r}", f"Ap - {r}"]
    return ["", "Over seeds (mean +- std; a difference: the mean over the seeds both have):",
            "", "| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * (len(head) - 2)] + rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", type=Path, help="the folder holding one run folder per method")
    p.add_argument("--methods", nargs="+", required=True)
    p.add_argument("--reference", nargs="*", default=["fedavg"],
                   help="the methods every row is compared with")
    p.add_argument("--run", action="append", default=[], metavar="NAME=PATH",
                   help="a method's run folder outside RUNS")
    p.add_argument("--figure", type=Path, metavar="PNG",
                   help="also draw the listed methods' convergence curves into this file")
    args = p.parse_args()
    named = {}
    for spec in args.run:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            p.error(f"--run {spec!r}: give NAME=PATH")
        named[name] = Path(path)
    where = lambda m: named.get(m, args.runs / m)  # noqa: E731
    refs = [where(r) for r in args.reference]
    head = ["method", "rounds", "Ag r1", "Ag r5", "Ag", "Ap", "s / round", "MB up / down"]
    for r in args.reference:
        head += [f"Ag - {r}", f"Ap - {r}"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * 2 + "---:|" * (len(head) - 2))
    done = [m for m in args.methods if (where(m) / "report.json").exists()]
    for m in done:
        print(row(m, where(m), refs))
    print("\n" + near_best({m: json.loads((where(m) / "report.json").read_text())
                            for m in done}))
    for line in seeds_table(done, args.reference, where):
        print(line)
    if args.figure and done:
        from fedjax_sc.run.paper.plots import convergence_figure
        convergence_figure({m: where(m) for m in done}, args.figure,
                           "FDU-MTL: Ag per round, then Ap_t (seed 0)")


if __name__ == "__main__":
    main()
