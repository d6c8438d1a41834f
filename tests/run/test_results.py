"""Results as data: export a store's small files, regenerate the table from them alone."""

import json
from pathlib import Path

import numpy as np
import pytest

from fedjax_sc.run.cli import main
from fedjax_sc.run.paper.reproduce import run_dir

TINY = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "16",
        "--synthetic-test", "8", "--max-len", "8", "--embed-dim", "8", "--hidden", "4",
        "--mlp-hidden", "6", "--ap-steps", "2", "--quick", "--no-plots"]


def test_export_keeps_small_files_and_render_needs_nothing_else(tmp_path, capsys):
    store, dest = tmp_path / "store", tmp_path / "results"
    assert main(["reproduce", "table3", *TINY, "--methods", "fedavg", "fedper", "pfl_da",
                 "--out", str(store)]) == 0
    capsys.readouterr()
    export = ["results", "export", "--table", "table3", "--scene", "synthetic", "--store",
              str(store), "--methods", "fedavg", "fedper", "pfl_da", "--dest", str(dest),
              "--no-plots"]
    assert main(export) == 0
    run = dest / "synthetic" / "table3" / "fedavg-seed0"
    assert sorted(p.name for p in run.iterdir()) == ["config.json", "convergence.png",
                                                       "metrics.jsonl", "report.json",
                                                       "report.md", "test_hits.json"]
    report = json.loads((run / "report.json").read_text())
    md = (dest / "synthetic" / "table3.md").read_text()
    assert md.startswith("# Table 3 on synthetic: ours beside the paper's figures\n")
    avg = next(line for line in md.splitlines() if line.startswith("| **Avg**"))
    assert f"| {100 * report['Ag']:.1f} | n/a |" in avg  # FedPer has no global model
    assert "Upload noise sigma per run: fedavg 0.01, fedper 0.01, pfl_da 0.01." in md
    # the two-branch method's Ap in every inference mode, its own (the gated mixture) last
    pfl = json.loads((dest / "synthetic/table3/pfl_da-seed0/report.json").read_text())
    section = md.split("## Ap by inference mode")[1]
    modes = next(line for line in section.splitlines() if line.startswith("| pfl_da | "))
    assert modes == ("| pfl_da | " + " | ".join(f"{100 * pfl['Ap_modes'][m]:.1f}"
                                                 for m in ("s", "p", "sp")) + " | sp |")
    # the store can go: the table comes from the results folder alone
    for p in sorted(store.rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    assert main(["results", "render", "--table", "table3", "--scene", "synthetic",
                 "--dest", str(dest), "--no-plots"]) == 0
    assert (dest / "synthetic" / "table3.md").read_text() == md
    # Table 2 (the global models' Ag) is rendered from Table 3's runs: FedPer has no Ag
    assert main(["results", "render", "--table", "table2", "--scene", "synthetic",
                 "--dest", str(dest), "--no-plots"]) == 0
    t2 = (dest / "synthetic" / "table2.md").read_text()
    assert "## Ag^k and Ag (paper: Table 2)" in t2 and "Ap^k" not in t2
    assert t2.splitlines()[2] == "| method | rounds | seeds finished | Ag | Ag, paper |"
    assert [x.split(" | ")[0] for x in t2.splitlines()[4:6]] == ["| fedavg", "| pfl_da"]
    assert f"| {100 * report['Ag']:.1f} |" in t2
    assert "The runs are Table 3's" in t2 and not (dest / "synthetic" / "table2").exists()


def test_a_running_run_is_exported_with_its_rounds_so_far(tmp_path, capsys):
    store, dest = tmp_path / "store", tmp_path / "results"
    assert main(["reproduce", "table3", *TINY, "--methods", "fedavg", "fedper", "--out",
                 str(store)]) == 0
    for m in ("fedavg", "fedper"):  # as if still going
        (run_dir(store, "synthetic", m, 0) / "report.json").unlink()
    starting = run_dir(store, "synthetic", "kteps", 0)  # started, no round finished yet
    starting.mkdir(parents=True)
    (starting / "config.json").write_text(
        (run_dir(store, "synthetic", "fedavg", 0) / "config.json").read_text())
    (starting / "metrics.jsonl").write_text("")  # as train writes it before round 1
    capsys.readouterr()
    assert main(["results", "export", "--table", "table3", "--scene", "synthetic",
                 "--store", str(store), "--methods", "fedavg", "fedper", "kteps",
                 "--dest", str(dest)]) == 0
    out = capsys.readouterr().out
    assert "fedavg seed 0: 1 rounds, unfinished" in out
    assert "fedavg (unfinished: round 1/1)" in out and "| pending |" in out
    fedper = next(x for x in out.splitlines() if x.startswith("| fedper | 1 / 1 |"))
    assert fedper.startswith("| fedper | 1 / 1 | 0 / 1 |")  # its one seed not finished
    assert "(p) | n/a | pending |" in fedper  # personalised, marked: FedPer has no Ag
    assert "| kteps | 0 / 1 | 0 / 1 | starting |" in out
    assert (dest / "synthetic" / "table3-convergence.png").stat().st_size > 1000
    # the late-training noise column: mean and sd of Ag over the last 10 rounds
    metrics = dest / "synthetic" / "table3" / "fedavg-seed0" / "metrics.jsonl"
    first = json.loads(metrics.read_text().splitlines()[0])
    ags = [0.1, 0.1] + [0.5, 0.6, 0.7] * 3 + [0.6]  # the last 10: mean 0.6, sd 0.0816
    rows = [{**first, "round": r, "Ag": ag} for r, ag in enumerate(ags, start=1)]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["results", "render", "--table", "table3", "--scene", "synthetic",
                 "--dest", str(dest), "--no-plots"]) == 0
    assert "| 60.0 +- 8.16 (3-12) |" in capsys.readouterr().out


def test_a_grid_table_renders_from_results_with_a_running_run(tmp_path, capsys):
    # Table 7 at d = 8: the default band (2, 6) is the store's kteps_star run
    store, dest = tmp_path / "store", tmp_path / "results"
    assert main(["reproduce", "table7", *TINY, "--methods", "kteps_star", "--out",
                 str(store)]) == 0
    capsys.readouterr()
    assert main(["results", "export", "--table", "table7", "--scene", "synthetic", "--store",
                 str(store), "--methods", "kteps_star", "--dest", str(dest), "--no-plots"]) == 0
    report = json.loads((dest / "synthetic" / "table7" / "kteps_star-seed0" / "report.json")
                        .read_text())
    row = lambda text: next(x for x in text.splitlines() if x.startswith("| d2 = 6 (0.75 d) |"))
    cells = row((dest / "synthetic" / "table7.md").read_text()).split(" | ")
    # columns: Ag d1 = 1, 2, 3, 6, then Ap d1 = 1, 2, 3, 6
    assert cells[2] == f"{100 * report['Ag']:.1f}" and cells[6] == f"{100 * report['Ap']:.1f}"
    assert cells[1] == "not run"
    (dest / "synthetic" / "table7" / "kteps_star-seed0" / "report.json").unlink()  # as if going
    capsys.readouterr()
    assert main(["results", "render", "--table", "table7", "--scene", "synthetic",
                 "--dest", str(dest), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert row(text).count("unfinished: round 1/1") == 2
    assert "| kteps_star | " in text  # Ag by round


def test_later_seeds_train_and_export_alone_beside_an_exported_seed_0(tmp_path, capsys,
                                                                      monkeypatch):
    # seed 0 exported from one store; seed 1 trained in another (as on a later machine)
    first, later, dest = tmp_path / "first", tmp_path / "later", tmp_path / "results"
    export = ["results", "export", "--table", "table3", "--scene", "synthetic", "--methods",
              "fedavg", "--dest", str(dest), "--no-plots"]
    assert main(["reproduce", "table3", *TINY, "--methods", "fedavg", "--out", str(first)]) == 0
    assert main([*export, "--store", str(first)]) == 0
    assert main(["reproduce", "table3", *TINY, "--methods", "fedavg", "--seeds", "1",
                 "--first-seed", "1", "--out", str(later)]) == 0
    assert not run_dir(later, "synthetic", "fedavg", 0).exists()  # seed 0 not retrained
    seed1 = json.loads((run_dir(later, "synthetic", "fedavg", 1) / "config.json").read_text())
    assert seed1["seed"] == 1
    capsys.readouterr()
    assert main([*export, "--store", str(later), "--first-seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "fedavg seed 1: 1 rounds, finished" in out
    assert sorted(p.name for p in (dest / "synthetic" / "table3").iterdir()) == [
        "fedavg-seed0", "fedavg-seed1"]
    ags = [100 * json.loads((dest / f"synthetic/table3/fedavg-seed{s}/report.json")
                            .read_text())["Ag"] for s in (0, 1)]
    avg = next(x for x in out.splitlines() if x.startswith("| fedavg | 1 / 1 |"))
    assert avg.startswith("| fedavg | 1 / 1 | 2 / 2 | ")
    assert f"{np.mean(ags):.1f} +- {np.std(ags, ddof=1):.1f}" in avg
    assert "seeds 0, 1" in out
    assert "| fedavg, seed 0 | " in out and "| fedavg, seed 1 | " in out  # Ag by round
    # the figure averages a method's finished seeds, as the cells do
    from fedjax_sc.run.paper import plots
    drawn = []
    monkeypatch.setattr(plots, "convergence_figure",
                        lambda runs, path, title: drawn.append((runs, title)) or Path(path))
    render = ["results", "render", "--table", "table3", "--scene", "synthetic", "--dest",
              str(dest)]
    assert main(render) == 0
    table = dest / "synthetic" / "table3"
    assert drawn.pop() == ({"fedavg": [table / "fedavg-seed0", table / "fedavg-seed1"]},
                           "synthetic: Ag per round, then Ap_t (seeds 0, 1)")
    capsys.readouterr()
    # seed 1 still going: the cells are seed 0's, and the heading says so
    (dest / "synthetic" / "table3" / "fedavg-seed1" / "report.json").unlink()
    assert main(["results", "render", "--table", "table3", "--scene", "synthetic",
                 "--dest", str(dest), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "| fedavg (seed 0; seed 1 unfinished: round 1/1) |" in out
    avg = next(x for x in out.splitlines() if x.startswith("| fedavg | 1 / 1 |"))
    assert avg.startswith(f"| fedavg | 1 / 1 | 1 / 2 | {ags[0]:.1f} |")
    assert main(render) == 0
    assert drawn.pop()[0] == {"fedavg": [table / "fedavg-seed0"]}
    # seed 0 is not in the later store: exporting it from there names the missing folder
    assert main([*export, "--store", str(later)]) == 1
    assert "seed-0: no metrics.jsonl" in capsys.readouterr().err
    assert main([*export, "--store", str(later), "--first-seed", "-1"]) == 1


def test_a_run_on_an_accelerator_names_it_beside_its_seconds():
    from fedjax_sc.run.paper.results import _accelerator
    assert _accelerator({"environment": {"device": "gpu: NVIDIA H200 x 1"}}) == " (NVIDIA H200)"
    assert _accelerator({"environment": {"device": "cpu: cpu x 1"}}) == ""
    assert _accelerator({}) == ""  # a report older than the environment record


def test_table4_pairs_each_finished_cell_with_the_settings_it_ablates(tmp_path, capsys):
    from fedjax_sc.run.paper.compare import compare
    store, dest = tmp_path / "store", tmp_path / "results"
    cells = ["kteps_l1-0_l2-0", "kteps_l1-0.001_l2-0", "kteps"]
    assert main(["reproduce", "table4", *TINY, "--methods", *cells, "--out", str(store)]) == 0
    assert main(["results", "export", "--table", "table4", "--scene", "synthetic", "--store",
                 str(store), "--methods", *cells, "--dest", str(dest), "--no-plots"]) == 0
    text = (dest / "synthetic" / "table4.md").read_text()
    section = text.split("## Each cell against")[1].split("## Ag by round")[0]
    rows = [x.split(" | ") for x in section.splitlines() if x.startswith("| kteps")]
    assert [r[:2] for r in rows] == [["| kteps_l1-0_l2-0", "kteps"],
                                     ["| kteps_l1-0.001_l2-0", "kteps_l1-0_l2-0"],
                                     ["| kteps_l1-0.001_l2-0", "kteps"]]  # and no kteps - (0, 0)
    folder = dest / "synthetic" / "table4"
    for r in rows:
        for ap, cell in ((False, r[2]), (True, r[3].removesuffix(" |"))):
            c = compare(folder / r[0][2:], folder / r[1], ap=ap, log=lambda _: None)
            assert cell == (f"{100 * c['diff']:+.1f} ({100 * c['low']:+.1f}, "
                            f"{100 * c['high']:+.1f})")
    capsys.readouterr()
    (folder / "kteps-seed0" / "report.json").unlink()  # as if still training: not paired
    assert main(["results", "render", "--table", "table4", "--scene", "synthetic",
                 "--dest", str(dest), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "| kteps_l1-0.001_l2-0 | kteps_l1-0_l2-0 |" in out and "| kteps |" not in out.split(
        "## Each cell against")[1].split("## Ag by round")[0]


def test_table8_pairs_a_cell_with_its_architecture_at_lambda1_0():
    from fedjax_sc.run.paper.paired import BASELINES
    from fedjax_sc.run.paper.table_plan import plan
    names = [r.name for r in plan("table8", "fdu", 50)[0]]
    assert {BASELINES["table8"](n) for n in names} == {
        ("arch_a_l1-0",), ("arch_b_l1-0",), ("arch_c_l1-0",)}
    assert all(b in names for b in ("arch_a_l1-0", "arch_b_l1-0", "arch_c_l1-0"))
    assert set(BASELINES["table4"]("x")) <= {r.name for r in plan("table4", "fdu", 50)[0]}


def test_a_table2_average_of_own_models_leaves_out_a_client_without_test_rows():
    from fedjax_sc.run.paper.table_plan import client_metric
    report = {"clients": [{"client": "a", "personal": 0.8}, {"client": "b", "personal": None},
                          {"client": "c", "personal": 0.6}]}
    assert client_metric("table2", "indiv", "Avg")(report) == pytest.approx(0.7)
    assert client_metric("table2", "indiv", "b")(report) is None
