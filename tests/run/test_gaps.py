"""Gaps between our Tables 2-3 and the paper's: per cell, summarised, rendered."""

import numpy as np
import pytest

from fedjax_sc.run.paper import gaps
from fedjax_sc.run.paper import tables as paper

CLIENTS = [c for c in paper.TABLE2["fdu"]["fedavg"] if c != "Avg"]


def _report(shift: float) -> dict:
    """A FedAvg report whose every Ag^k / Ap^k is the paper's plus ``shift`` points."""
    ag, ap = paper.TABLE2["fdu"]["fedavg"], paper.TABLE3["fdu"]["fedavg"]
    clients = [{"client": c, "Ag": (ag[c] + shift) / 100, "Ap": (ap[c] + shift) / 100,
                "personal": 0.5} for c in CLIENTS]
    return {"clients": clients, "Ag": (ag["Avg"] + shift) / 100,
            "Ap": (ap["Avg"] + shift) / 100}


def test_one_seed_shifted_by_one_point():
    cells = gaps.cell_gaps("fedavg", "fdu", CLIENTS, [_report(1.0)])
    assert len(cells) == 2 * (len(CLIENTS) + 1)
    np.testing.assert_allclose([c["gap"] for c in cells], 1.0, atol=1e-4)
    s = gaps.summarise(cells)
    assert s["over"] == 0 and s["mean_abs"] == pytest.approx(1.0, abs=1e-4)
    assert s["seed_std"] is None


def test_seeds_give_the_mean_and_their_spread():
    cells = gaps.cell_gaps("fedavg", "fdu", CLIENTS, [_report(1.0), _report(4.0)])
    np.testing.assert_allclose([c["gap"] for c in cells], 2.5, atol=1e-4)
    s = gaps.summarise(cells)
    assert s["over"] == len(cells) and s["bias"] == pytest.approx(2.5, abs=1e-4)
    assert s["seed_std"] == pytest.approx(np.std([1.0, 4.0], ddof=1), abs=1e-4)


def test_section_leaves_out_unfinished_methods_and_sums_up_all_cells():
    reports = {("fedavg", 0): _report(-3.0), ("fedavg", 1): _report(-3.0)}
    text = "\n".join(gaps.gap_section(["fedavg", "fedprox"], [0, 1], reports, "fdu", CLIENTS))
    assert "| fedavg | 2 | Ag -3.0, Ap -3.0 | 32 | 3.00 | 32 | -3.00 | 0.00 |" in text
    assert "Over all 34 cells" in text and "34 over 2" in text
    assert "Not finished (left out): fedprox." in text
    assert gaps.gap_section(["fedprox"], [0], {}, "fdu", CLIENTS) == []
    assert gaps.summarise([])["n"] == 0


def test_paper_pair_spread_reads_the_papers_fdu_tables(monkeypatch):
    s = gaps.paper_pair_spread("fdu")
    assert s["pairs"] >= 1 and 0 < s["low"] <= s["median"] <= s["high"]
    assert 0 <= s["most_over"] <= s["clients"] == 16
    assert gaps.paper_pair_spread("fdu", within=-1.0) is None
    # two tables whose answer is known: only the pairs within 0.5 of each other's Avg count
    ag = {"fdu": {"a": {"x": 80.0, "y": 90.0, "Avg": 85.0},
                  "b": {"x": 81.0, "y": 87.0, "Avg": 84.6},  # |d| = 1, 3: 2.0, one over 2
                  "c": {"x": 70.0, "y": 70.0, "Avg": 70.0}}}  # far from both: left out
    ap = {"fdu": {"a": {"x": 80.0, "y": 90.0, "Avg": 85.0},
                  "b": {"x": 80.5, "y": 89.5, "Avg": 85.0}}}  # |d| = 0.5, 0.5: 0.5, none over
    monkeypatch.setattr(gaps, "SOURCES", (("Ag", "table2", ag), ("Ap", "table3", ap)))
    assert gaps.paper_pair_spread("fdu") == {"pairs": 2, "low": 0.5, "high": 2.0,
                                             "median": 1.25, "most_over": 1, "clients": 2}


def _shifted(method: str, shift: dict[str, float]) -> dict:
    """``method``'s report whose Ag^k / Ap^k are the paper's plus ``shift[client]`` points."""
    ag, ap = paper.TABLE2["fdu"][method], paper.TABLE3["fdu"][method]
    return {"clients": [{"client": c, "Ag": (ag[c] + shift[c]) / 100,
                         "Ap": (ap[c] + shift[c]) / 100} for c in CLIENTS]}


def test_an_offset_every_method_shares_on_a_domain_is_the_clients_and_the_rest_the_methods():
    domain = {c: (3.0 if c == CLIENTS[0] else 0.0) for c in CLIENTS}  # +3 on one domain
    far = {c: domain[c] - 10.0 for c in CLIENTS}  # a method 10 points under everywhere
    cells = [cell for m, shift in (("fedavg", domain), ("fedprox", domain), ("fedmmd", domain),
                                   ("kteps", far))
             for cell in gaps.cell_gaps(m, "fdu", CLIENTS, [_shifted(m, shift)])]
    offsets = gaps.client_offsets(cells)
    assert list(offsets) == CLIENTS  # the median over 8 cells each: the far method ignored
    assert offsets[CLIENTS[0]] == pytest.approx(3.0, abs=1e-4)
    assert all(abs(offsets[c]) < 1e-4 for c in CLIENTS[1:])
    left = gaps.less_offsets(cells, offsets)
    assert len(left) == 4 * 2 * len(CLIENTS)  # no Avg cell
    np.testing.assert_allclose(sorted({round(c["gap"], 3) for c in left}), [-10.0, 0.0],
                               atol=1e-3)
    reports = {(m, 0): _shifted(m, domain) for m in ("fedavg", "fedprox")}
    text = "\n".join(gaps.gap_section(["fedavg", "fedprox"], [0], reports, "fdu", CLIENTS))
    assert f"{CLIENTS[0]} +3.0, {CLIENTS[1]} +0.0" in text
    assert "less its client's offset: mean absolute gap 0.00, 0 over 2." in text
    one = "\n".join(gaps.gap_section(["fedavg"], [0], reports, "fdu", CLIENTS))
    assert "median gap over every method" not in one  # one method: nothing to share


def test_gap_figures_example_slices_the_exported_runs(tmp_path, monkeypatch, capsys):
    """examples/gap_figures.py on exported runs whose cells are the paper's plus known
    shifts: FedAvg +1 (seeds 0, 1: +1 and +3 on the Ap cells only), FedProx -3 set aside."""
    import json
    import runpy
    from pathlib import Path

    folder = tmp_path / "fdu" / "table3"
    shifted = {("fedavg", 0): 1.0, ("fedavg", 1): 1.0, ("fedprox", 0): -3.0}
    for (m, seed), shift in shifted.items():
        report = _shifted(m, {c: shift for c in CLIENTS})
        report["Ag"] = (paper.TABLE2["fdu"][m]["Avg"] + shift) / 100
        report["Ap"] = (paper.TABLE3["fdu"][m]["Avg"] + shift) / 100
        if seed == 1:  # the second seed 2 points above on every Ap^k
            for r in report["clients"]:
                r["Ap"] += 0.02
        run = folder / f"{m}-seed{seed}"
        run.mkdir(parents=True)
        (run / "report.json").write_text(json.dumps(report))
    (folder / "fedmmd-seed0").mkdir()  # not finished: no report, read as absent
    script = Path(__file__).parents[2] / "examples" / "gap_figures.py"
    monkeypatch.setattr("sys.argv", [str(script), "--results", str(tmp_path),
                                     "--set-aside", "fedprox:Ag", "fedprox:Ap"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "averages: 4, 2 within 1.5, 2 within 2.0; mean abs 2.00, without the rows set " \
        "aside 1.00" in out and "over 1.5: fedprox Ag -3.0" in out
    assert "per-client, methods with no row set aside: 32 cells, mean abs 1.50" in out
    assert "per-client, raw: 64 cells, mean abs 2.25, 32 over 2, mean -0.75" in out
    assert "without the rows set aside: 32 cells" in out
    assert "seeds of fedavg (2), Ag: per-client difference mean abs 0.00, 0 of 16" in out
    assert "seeds of fedavg (2), Ap: per-client difference mean abs 2.00" in out
    monkeypatch.setattr("sys.argv", [str(script), "--results", str(tmp_path / "none")])
    with pytest.raises(SystemExit, match="no finished run"):
        runpy.run_path(str(script), run_name="__main__")
