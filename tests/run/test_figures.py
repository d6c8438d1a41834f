"""The run figure: Ag per round and Ap_t, every client faint behind the mean; a method
without a global model plots its personalised model; nothing to draw gives no file."""

import json

import pytest

from fedjax_sc.run.plumbing import figures

pytest.importorskip("matplotlib")


def _metrics(folder, ag):
    rows = [{"phase": "round", "round": r, "Ag": 0.5 + 0.1 * r if ag else None,  # FedPer: null
             "Ag_per_client": [0.4 + 0.1 * r, 0.6 + 0.1 * r] if ag else None,
             "personal": {"full": 0.55 + 0.1 * r}, "personal_per_client": [0.5, 0.6]}
            for r in (1, 2, 3)]
    rows += [{"phase": "ap", "round": 3, "t": t, "steps": 10 * t, "Ap_t": {"full": 0.8},
              "Ap_t_per_client": [0.75, 0.85]} for t in (0, 1)]
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("ag", [True, False])
def test_a_run_figure_is_drawn_from_its_metrics(tmp_path, ag, monkeypatch):
    _metrics(tmp_path / "run", ag)
    drawn = []
    write = figures.write
    monkeypatch.setattr(figures, "write", lambda fig, path: (drawn.append(fig),
                                                             write(fig, path))[1])
    path = figures.run_figure(tmp_path / "run")
    assert path == tmp_path / "run" / figures.FIGURE and path.read_bytes()[:4] == b"\x89PNG"
    rounds, ap = drawn[0].axes
    # left: Ag (or, without a global model, the personalised model) per round, the mean
    # bold over every client's faint line; right: Ap_t against the fine-tuning step
    assert rounds.get_ylabel() == ("Ag (global model), %" if ag else "personalised model, %")
    *faint, mean = rounds.get_lines()
    assert list(mean.get_xdata()) == [1, 2, 3] and mean.get_linewidth() == 2.0
    expect = [50 + 10 * r if ag else 55 + 10 * r for r in (1, 2, 3)]
    assert mean.get_ydata() == pytest.approx(expect)
    clients = ([[40 + 10 * r for r in (1, 2, 3)], [60 + 10 * r for r in (1, 2, 3)]] if ag
               else [[50.0] * 3, [60.0] * 3])
    assert [y for line in faint for y in line.get_ydata()] == pytest.approx(
        [y for client in clients for y in client])
    *faint, mean = ap.get_lines()
    assert ap.get_ylabel() == "Ap_t, %" and list(mean.get_xdata()) == [0, 10]
    assert mean.get_ydata() == pytest.approx([80.0, 80.0])
    assert [y for line in faint for y in line.get_ydata()] == pytest.approx([75, 75, 85, 85])


def test_a_run_without_rounds_draws_nothing(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    assert figures.run_figure(tmp_path) is None and not (tmp_path / figures.FIGURE).exists()
