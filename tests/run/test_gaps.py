"""Gaps between our Tables 2-3 and the paper's: per cell, summarised, rendered."""

import numpy as np
import pytest

from fedjax_sc.run import gaps, paper

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


def test_paper_pair_spread_reads_the_papers_fdu_tables():
    s = gaps.paper_pair_spread("fdu")
    assert s["pairs"] >= 1 and 0 < s["low"] <= s["median"] <= s["high"]
    assert 0 <= s["most_over"] <= s["clients"] == 16
    assert gaps.paper_pair_spread("fdu", within=-1.0) is None
