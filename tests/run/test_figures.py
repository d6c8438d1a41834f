"""The run figure: Ag per round and Ap_t, every client faint behind the mean; a method
without a global model plots its personalised model; nothing to draw gives no file."""

import json

import pytest

from fedjax_sc.run.plumbing import figures

pytest.importorskip("matplotlib")


def _metrics(folder, ag):
    rows = [{"phase": "round", "round": r, "Ag": ag and 0.5 + 0.1 * r,
             "Ag_per_client": ag and [0.4 + 0.1 * r, 0.6 + 0.1 * r],
             "personal": {"full": 0.55 + 0.1 * r}, "personal_per_client": [0.5, 0.6]}
            for r in (1, 2, 3)]
    rows += [{"phase": "ap", "round": 3, "t": t, "steps": 10 * t, "Ap_t": {"full": 0.8},
              "Ap_t_per_client": [0.75, 0.85]} for t in (0, 1)]
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("ag", [True, False])
def test_a_run_figure_is_drawn_from_its_metrics(tmp_path, ag):
    _metrics(tmp_path / "run", ag)
    path = figures.run_figure(tmp_path / "run")
    assert path == tmp_path / "run" / figures.FIGURE and path.read_bytes()[:4] == b"\x89PNG"


def test_a_run_without_rounds_draws_nothing(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("")
    assert figures.run_figure(tmp_path) is None and not (tmp_path / figures.FIGURE).exists()
