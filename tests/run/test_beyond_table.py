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
