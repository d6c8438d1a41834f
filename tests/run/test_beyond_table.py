"""examples/beyond_table.py on committed runs: one row per finished method with the paired
difference to the reference, and the convergence figure."""

import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_rows_differences_and_figure(tmp_path, monkeypatch, capsys):
    runs = ROOT / "results" / "fdu" / "beyond-slice-10-rounds"
    figure = tmp_path / "convergence.png"
    monkeypatch.setattr(sys, "argv", [
        "beyond_table.py", str(runs), "--reference", "fedavg", "--methods", "fedavg",
        "feddyn", "missing", "--run", f"fedavg={runs / 'fedavg'}", "--figure", str(figure)])
    runpy.run_path(str(ROOT / "examples" / "beyond_table.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| method | rounds | Ag r1") and len(lines) == 6  # no "missing"
    assert lines[-1].startswith("Within 0.5 points of the best Ag (75.4): feddyn.")
    feddyn = lines[3].split(" | ")
    assert feddyn[0] == "| feddyn" and feddyn[-2].startswith("+4.3 (")  # Ag - fedavg
    assert figure.stat().st_size > 10_000


def test_methods_with_more_seeds_get_mean_and_spread(tmp_path, monkeypatch, capsys):
    import json

    import numpy as np
    table3 = ROOT / "results" / "fdu" / "table3"
    runs = [f"--run={m}{'' if s == 0 else f'-seed{s}'}={table3 / f'{m}-seed{s}'}"
            for m in ("fedavg", "kteps") for s in range(3)]
    monkeypatch.setattr(sys, "argv", [
        "beyond_table.py", str(tmp_path), "--reference", "fedavg", "--methods", "fedavg",
        "kteps", *runs])
    runpy.run_path(str(ROOT / "examples" / "beyond_table.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    at = lines.index("| method | seeds | Ag | Ap | Ag - fedavg | Ap - fedavg |")
    fedavg, kteps = (line.split(" | ") for line in lines[at + 2:at + 4])
    reports = {m: [json.loads((table3 / f"{m}-seed{s}" / "report.json").read_text())
                   for s in range(3)] for m in ("fedavg", "kteps")}
    ag = [r["Ag"] for r in reports["kteps"]]
    assert kteps[:3] == ["| kteps", "3", f"{100 * np.mean(ag):.1f} +- "
                         f"{100 * np.std(ag, ddof=1):.1f}"]
    gap = np.mean([k["Ap"] - f["Ap"] for k, f in zip(reports["kteps"], reports["fedavg"])])
    assert kteps[-1].startswith(f"{100 * gap:+.1f} +- ")
    assert fedavg[0] == "| fedavg" and fedavg[-2:] == ["", " |"]
