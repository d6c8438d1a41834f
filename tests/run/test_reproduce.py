"""``fedjax-sc reproduce``: the tables' plans, the Markdown, the results store (skip, reuse)."""

import json

import pytest

from fedjax_sc.run.cli import main
from fedjax_sc.run.paper import tables as paper
from fedjax_sc.run.paper.reproduce import format_table, run_dir
from fedjax_sc.run.paper.table_plan import TABLE23_METHODS, TABLES, plan
from fedjax_sc.run.train import TrainConfig


@pytest.mark.parametrize("table", TABLES)
def test_every_cell_reads_a_planned_run_and_fdu_cells_carry_the_paper(table):
    runs, cells = plan(table, "fdu", 50)
    names = [r.name for r in runs]
    assert len(names) == len(set(names))
    for row in cells.values():
        for cell in row.values():
            assert cell.run in names
    # every paper figure of the table has a cell
    filled = sum(c.paper is not None for row in cells.values() for c in row.values())
    expected = {"table2": 17 * 10, "table3": 17 * 12, "table4": 18, "table5": 8,
                "table6": 6, "table7": 16, "table8": 24}[table]
    assert filled == expected
    for r in runs:  # runs that share training differ from their source in Ap settings only
        if r.shares_training_with:
            source = next(x for x in runs if x.name == r.shares_training_with)
            assert set(r.overrides) - set(source.overrides) == {"ap_lr_mult"}


def test_table2_uses_personal_accuracy_without_a_global_model_and_formats_mean_std(
        table_rows):
    runs, cells = plan("table2", "fdu", 50)
    clients = [{"client": n, "Ag": 0.8, "personal": 0.7, "Ap": 0.75}
               for n in paper.TABLE2["fdu"]["fedavg"] if n != "Avg"]
    reports = {}
    for i, seed in enumerate((0, 1)):
        for r in runs:
            no_global = r.name in ("indiv", "asp")
            reports[(r.name, seed)] = {
                "Ag": None if no_global else 0.8 + 0.02 * i, "Ap": 0.75,
                "clients": [dict(c, Ag=None if no_global else 0.8 + 0.02 * i)
                            for c in clients]}
    text = format_table("table2", TrainConfig(scene="fdu", data_dir="x", rounds=1).resolved(),
                        cells, reports, (0, 1))
    cols = list(table_rows(text)["**Avg**"].values())[1:]
    assert cols[0] == "70.0 +- 0.0 (81.1)"  # indiv: each client's own model
    assert cols[3] == "81.0 +- 1.4 (85.1)"  # fedavg: Ag, mean +- sample std over 2 seeds
    assert len(cols) == len(TABLE23_METHODS["table2"])


def test_reproduce_runs_once_reuses_training_for_ap_variants_and_skips_when_done(
        tmp_path, capsys, monkeypatch):
    from fedjax_sc.run.paper import reproduce as lib
    full_plan = lib.plan

    def kteps_only(table, scene, embed_dim, *grid):  # Table 5: KTEPS, mu 0.01 and 1 only
        runs, cells = full_plan(table, scene, embed_dim, *grid)
        keep = {"kteps", "kteps_mu-1"}
        return ([r for r in runs if r.name in keep],
                {"kteps": {k: c for k, c in cells["kteps"].items() if c.run in keep}})

    monkeypatch.setattr(lib, "plan", kteps_only)
    tiny = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "16",
            "--synthetic-test", "8", "--max-len", "8", "--embed-dim", "8", "--hidden", "4",
            "--mlp-hidden", "6", "--ap-steps", "2", "--quick", "--no-plots",
            "--out", str(tmp_path)]
    assert main(["reproduce", "table5", *tiny]) == 0
    out = capsys.readouterr().out
    assert out.count("starting") == 1 and out.count("reusing the training") == 1
    assert "no data fingerprint" not in out  # the base run's data record came with it
    base = run_dir(tmp_path, "synthetic", "kteps", 0)
    variant = run_dir(tmp_path, "synthetic", "kteps_mu-1", 0)
    assert (variant / "fingerprint.json").read_text() == (base / "fingerprint.json").read_text()
    rounds = lambda d: [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines()
                        if json.loads(x)["phase"] == "round"]
    assert rounds(base) == rounds(variant)  # same training, not retrained
    assert json.loads((variant / "report.json").read_text())["ap_settings"]["mu"] == 1.0
    md = (tmp_path / "synthetic" / "table5.md").read_text()
    assert "mu = 1" in md and "(79.0)" not in md and "Compute:" in md  # synthetic: no paper
    assert main(["reproduce", "table5", *tiny]) == 0
    out = capsys.readouterr().out
    assert out.count("skipped") == 2 and "starting" not in out
    assert main(["reproduce", "table5", *tiny, "--lr", "0.5"]) == 1  # never mixed silently
    assert "other settings" in capsys.readouterr().err


def test_unknown_table_and_table8_scene_are_rejected():
    with pytest.raises(ValueError, match="unknown table"):
        plan("table9", "fdu", 50)
    with pytest.raises(ValueError, match="FDU"):
        plan("table8", "iyy", 50)


def test_methods_trains_only_the_named_runs_and_shows_the_others_as_not_run(tmp_path, capsys,
                                                                           table_rows):
    tiny = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "16",
            "--synthetic-test", "8", "--max-len", "8", "--embed-dim", "8", "--hidden", "4",
            "--mlp-hidden", "6", "--ap-steps", "2", "--quick", "--no-plots",
            "--out", str(tmp_path)]
    assert main(["reproduce", "table6", *tiny, "--methods", "kteps"]) == 0
    out = capsys.readouterr().out
    assert out.count("starting") == 1 and "kteps_star seed" not in out
    assert not run_dir(tmp_path, "synthetic", "kteps_star", 0).exists()
    rows = {k: list(v.values())[1:] for k, v in
            table_rows((tmp_path / "synthetic" / "table6.md").read_text()).items()}
    assert rows["kteps_star"] == ["not run"] * 3
    assert all(float(v) > 0 for v in rows["kteps"])  # run: real figures, not placeholders
    # --status trains nothing and names what is left
    assert main(["reproduce", "table6", *tiny, "--status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(x.startswith("kteps seed 0: finished, Ag ") and ", Ap " in x for x in lines)
    assert "kteps_star seed 0: not started" in lines and lines[-1] == "not finished: kteps_star"
    assert not run_dir(tmp_path, "synthetic", "kteps_star", 0).exists()
    # a finished run of a method not named is read from the store, not retrained
    assert main(["reproduce", "table6", *tiny, "--methods", "kteps_star"]) == 0
    out = capsys.readouterr().out
    assert out.count("starting") == 1 and "== kteps seed" not in out
    md = (tmp_path / "synthetic" / "table6.md").read_text()
    assert "not run" not in md
    assert main(["reproduce", "table6", *tiny, "--methods", "fedavg"]) == 1
    assert "has no run 'fedavg'" in capsys.readouterr().err


def test_seeds_of_a_row_train_as_one_population_unless_capped(tmp_path, capsys):
    tiny = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "16",
            "--synthetic-test", "8", "--max-len", "8", "--embed-dim", "8", "--hidden", "4",
            "--mlp-hidden", "6", "--ap-steps", "2", "--quick", "--no-plots", "--seeds", "2",
            "--methods", "kteps"]
    assert main(["reproduce", "table6", *tiny, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert "== kteps seed 0 + kteps seed 1: one population" in out
    assert main(["reproduce", "table6", *tiny, "--out", str(tmp_path / "b"),
                 "--population-size", "1"]) == 0
    out = capsys.readouterr().out
    assert "one population" not in out and out.count("starting") == 2
    for seed in (0, 1):  # a member's folder is the run it would be alone
        a, b = (json.loads((run_dir(tmp_path / d, "synthetic", "kteps", seed)
                            / "report.json").read_text()) for d in "ab")
        assert a["Ap"] == pytest.approx(b["Ap"], abs=1e-6)
        losses = [[json.loads(x)["train_loss"] for x in (run_dir(tmp_path / d, "synthetic",
                                                                  "kteps", seed)
                                                          / "metrics.jsonl").open()
                   if json.loads(x)["phase"] == "round"] for d in "ab"]
        assert losses[0] == pytest.approx(losses[1], rel=1e-5)  # the same training
    assert main(["reproduce", "table6", *tiny, "--out", str(tmp_path / "a")]) == 0
    assert capsys.readouterr().out.count("skipped") == 2
