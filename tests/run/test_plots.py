"""Figures of finished runs: reading metrics.jsonl, Fig. 4 curves and per-client bars."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fedjax_sc.run.paper import plots
from fedjax_sc.run.paper.tables import TABLE3

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _write_run(run_dir: Path, rows: list[dict], report: dict | None) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if report is not None:
        (run_dir / "report.json").write_text(json.dumps(report))
    return run_dir


def _ap_rows(values: dict[str, list[float]], z: int = 5) -> list[dict]:
    n = len(next(iter(values.values())))
    return [{"phase": "ap", "round": 3, "t": t, "steps": t * z,
             "Ap_t": {k: v[t] for k, v in values.items()}} for t in range(n)]


@pytest.fixture
def kteps_run(tmp_path: Path) -> Path:
    """Two-branch run: Ag per round, personal per mode, Ap mode "sp" from report.json."""
    rows = [{"phase": "round", "round": r, "Ag": ag, "train_loss": 0.5,
             "personal": {"s": ag - 0.01, "p": ag + 0.01, "sp": ag + 0.02}}
            for r, ag in ((1, 0.6), (2, 0.7), (3, 0.75))]
    rows += _ap_rows({"s": [0.7, 0.71, 0.72], "p": [0.76, 0.78, 0.79], "sp": [0.77, 0.8, 0.81]})
    return _write_run(tmp_path / "kteps", rows, {"algorithm": "kteps", "ap_mode": "sp"})


@pytest.fixture
def fedper_run(tmp_path: Path) -> Path:
    """No global model (Ag null), no report.json: the Ap mode is the Ap lines' only one."""
    rows = [{"phase": "round", "round": r, "Ag": None, "personal": {"full": acc}}
            for r, acc in ((1, 0.55), (2, 0.65), (3, 0.7))]
    rows += _ap_rows({"full": [0.7, 0.74, 0.76, 0.77]})
    return _write_run(tmp_path / "fedper", rows, report=None)


def test_read_curves(kteps_run, fedper_run):
    c = plots.read_curves(kteps_run)
    assert c["rounds"] == [1, 2, 3]
    assert c["Ag"] == [0.6, 0.7, 0.75]
    assert c["personal"] == pytest.approx([0.62, 0.72, 0.77])
    assert c["ap_steps"] == [0, 5, 10]
    assert c["Ap_t"] == [0.77, 0.8, 0.81]

    c = plots.read_curves(str(fedper_run))
    assert c["Ag"] == [None, None, None]
    assert c["personal"] == [0.55, 0.65, 0.7]
    assert c["ap_steps"] == [0, 5, 10, 15]
    assert c["Ap_t"] == [0.7, 0.74, 0.76, 0.77]


def test_read_curves_resumed_run_counts_each_round_once(tmp_path):
    rows = [{"phase": "round", "round": 1, "Ag": 0.5}, {"phase": "round", "round": 2, "Ag": 0.6},
            {"phase": "round", "round": 2, "Ag": 0.65}]
    c = plots.read_curves(_write_run(tmp_path / "r", rows, {"ap_mode": "full"}))
    assert c == {"rounds": [1, 2], "Ag": [0.5, 0.65], "personal": [None, None],
                 "ap_steps": [], "Ap_t": []}


def test_read_curves_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plots.read_curves(tmp_path)


def test_read_curves_bad_line(tmp_path):
    run = tmp_path / "bad"
    run.mkdir()
    good = json.dumps({"phase": "round", "round": 1, "Ag": 0.5})
    (run / "metrics.jsonl").write_text(f"{good}\n{good[:-5]}\n")
    with pytest.raises(ValueError, match=r"metrics\.jsonl, line 2: not valid JSON") as e:
        plots.read_curves(run)
    assert str(run / "metrics.jsonl") in str(e.value)


def test_read_curves_unknown_mode(tmp_path):
    rows = _ap_rows({"full": [0.5, 0.6]})
    run = _write_run(tmp_path / "r", rows, {"ap_mode": "sp"})
    with pytest.raises(ValueError, match="line 1: Ap_t has no mode 'sp'"):
        plots.read_curves(run)


def _assert_png(path: Path):
    assert path.is_file()
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.fixture
def drawn(monkeypatch):
    """The axes of every figure plots writes, in order."""
    pytest.importorskip("matplotlib")
    seen, save = [], plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, ax, path, title: (
        seen.append(ax), save(fig, ax, path, title))[1])
    return seen


def _lines(ax):
    """{label: (x, y)} of the axes' lines (an unlabelled one keyed by its order)."""
    return {(line.get_label() if not line.get_label().startswith("_") else i):
            (list(line.get_xdata()), [float(y) for y in line.get_ydata()])
            for i, line in enumerate(ax.get_lines())}


def test_convergence_figure(kteps_run, fedper_run, tmp_path, drawn):
    out = plots.convergence_figure({"kteps": kteps_run, "fedper": fedper_run},
                                   tmp_path / "figs" / "fig4.png", title="FDU")
    assert out == tmp_path / "figs" / "fig4.png"
    _assert_png(out)
    (ax,) = drawn
    lines = _lines(ax)
    # Ag per round; fedper has no global model: its personalised accuracy, so labelled; then
    # each method's Ap_t (the report's sp mode for kteps) from x = R on, past a dashed line
    expect = {"kteps": ([1, 2, 3], [60, 70, 75]), "fedper (personal)": ([1, 2, 3], [55, 65, 70]),
              1: ([3, 4, 5], [77, 80, 81]), 3: ([3, 4, 5, 6], [70, 74, 76, 77])}
    for key, (x, y) in expect.items():
        assert lines[key][0] == x and lines[key][1] == pytest.approx(y), key
    assert lines[4][0] == [3, 3] and ax.get_title() == "FDU"  # the switch


def test_per_client_figure(tmp_path, drawn):
    ours = {"kteps": {"apparel": 0.85, "baby": 0.9, "Avg": 0.875},
            "fedper": {"apparel": 0.86, "baby": 0.87}}
    out = plots.per_client_figure(ours, tmp_path / "bars.png", title="Ap^k",
                                  paper=TABLE3["fdu"])
    _assert_png(out)
    (ax,) = drawn
    # one bar per method and client (Avg left out), fractions in percent, side by side
    bars = sorted((round(b.get_x() + b.get_width() / 2, 3), b.get_height()) for b in ax.patches)
    assert [h for _, h in bars] == pytest.approx([85, 86, 90, 87])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["apparel", "baby"]
    marks = sorted(y for line in ax.get_lines() for y in line.get_ydata())
    assert marks == sorted(TABLE3["fdu"][m][c] for m in ("kteps", "fedper")
                           for c in ("apparel", "baby"))
    _assert_png(plots.per_client_figure(TABLE3["iyy"], tmp_path / "paper.png"))
    assert len(drawn[1].patches) == len(TABLE3["iyy"]) * (len(TABLE3["iyy"]["fedavg"]) - 1)


def test_missing_matplotlib(monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'fedjax_sc\[plots\]'"):
        plots.per_client_figure({"a": {"x": 0.5}}, tmp_path / "x.png")


def test_mean_curves_average_the_seeds_where_all_have_the_point(tmp_path):
    def run(name, ags, ap):
        rows = [{"phase": "round", "round": r, "Ag": a} for r, a in enumerate(ags, 1)]
        return _write_run(tmp_path / name, rows + _ap_rows({"full": ap}), {"ap_mode": "full"})

    a = run("s0", [0.5, 0.6, 0.7], [0.7, 0.8])
    b = run("s1", [0.7, 0.8], [0.9, 0.6, 0.5])  # one round fewer (running), one Ap_t more
    c = plots.mean_curves([a, str(b)])
    assert c["rounds"] == [1, 2] and c["runs"] == [2]
    assert c["Ag"] == pytest.approx([0.6, 0.7])
    assert (c["Ag_lo"], c["Ag_hi"]) == ([0.5, 0.6], [0.7, 0.8])
    assert c["personal"] == [None, None]
    assert c["Ap_t"] == pytest.approx([0.8, 0.7]) and c["ap_steps"] == [0, 5]
    assert (c["Ap_t_lo"], c["Ap_t_hi"]) == ([0.7, 0.6], [0.9, 0.8])
    assert plots.mean_curves([a]) == {**plots.read_curves(a), "runs": [1],
                                      **{k + s: plots.read_curves(a)[k] for k in
                                         ("Ag", "personal", "Ap_t") for s in ("_lo", "_hi")}}
    with pytest.raises(ValueError, match="at least one run"):
        plots.mean_curves([])


def test_convergence_figure_with_seeds(kteps_run, fedper_run, tmp_path, drawn):
    out = plots.convergence_figure({"kteps": [kteps_run, kteps_run], "fedper": [fedper_run]},
                                   tmp_path / "seeds.png")
    _assert_png(out)
    (ax,) = drawn
    lines = _lines(ax)
    # the seeds' mean, labelled with their number; their min-max band shaded (Ag and Ap_t)
    x, y = lines["kteps, mean of 2 (min-max shaded)"]
    assert x == [1, 2, 3] and y == pytest.approx([60, 70, 75])
    assert "fedper (personal)" in lines and len(ax.collections) == 2


def test_grid_heatmap_reads_a_grid_tables_cells(tmp_path):
    """Table 4's plan as heatmaps: a finished cell is ours in percent, one not run is blank
    (None), the paper's figures sit beside."""
    from fedjax_sc.run.paper.results import grid_values
    from fedjax_sc.run.paper.table_plan import plan
    _, cells = plan("table4", "fdu", 50)
    reports = {("kteps", 0): {"Ag": 0.851, "Ap": 0.856}}
    ours, paper = grid_values(cells, reports, [0])
    assert ours["Ag"]["lambda1 = 0.01"]["lambda2 = 0.01"] == pytest.approx(85.1)
    assert ours["Ap"]["lambda1 = 0"]["lambda2 = 0"] is None
    assert paper["Ag"]["lambda1 = 0.01"]["lambda2 = 0.01"] == 85.7
    png = plots.grid_heatmap(ours, paper, tmp_path / "t4.png", title="Table 4")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_grid_heatmaps_title_says_blank_only_while_a_cell_is_not_run(tmp_path, monkeypatch):
    from fedjax_sc.run.paper import results
    from fedjax_sc.run.paper.table_plan import plan
    titles = []
    monkeypatch.setattr(plots, "grid_heatmap",
                        lambda ours, paper, path, title: titles.append(title) or path)
    _, cells = plan("table8", "fdu", 50)
    every = {(cell.run, 0): {"Ag": 0.85, "Ap": 0.84} for row in cells.values()
             for cell in row.values()}
    one_missing = dict(list(every.items())[1:])
    for reports in (one_missing, every):
        results._heatmap("table8", "fdu", cells, reports, [0], tmp_path)
    assert titles[0].endswith("; blank: not run yet)") and titles[1].endswith("(seed 0)"), titles
