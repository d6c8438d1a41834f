"""Population runs (seeds x grid as one program): member folders equal standalone runs,
population.json, resume, a diverged member masked, and settings that cannot vary refused."""

import dataclasses
import json
from pathlib import Path

import chex
import numpy as np
import pytest

from fedjax_sc.run import cli, members
from fedjax_sc.run.train import TrainConfig, train, train_population

TINY = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12, synthetic_test=6,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            ap_evals=2, ap_steps=2, rounds=2)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _quiet(_):
    pass


def _rounds(path):
    return [json.loads(x) for x in path.read_text().splitlines()
            if json.loads(x)["phase"] == "round"]


def test_cli_members_equal_standalone_runs(tmp_path):
    algorithm = "kteps"
    pop = tmp_path / "pop"
    assert cli.main(["train", *_flags(dict(TINY, algorithm=algorithm)), "--out", str(pop),
                     "--seeds", "0,1", "--grid", "lr=0.1,0.05"]) == 0
    index = json.loads((pop / "population.json").read_text())
    folders = [m["folder"] for m in index["members"]]
    assert folders == ["lr-0.1_seed-0", "lr-0.1_seed-1", "lr-0.05_seed-0", "lr-0.05_seed-1"]
    assert {m["status"] for m in index["members"]} == {"finished"}
    for m in index["members"]:
        saved = json.loads((pop / m["folder"] / "config.json").read_text())
        assert (saved["seed"], saved["lr"]) == (m["seed"], m["values"]["lr"])
    for m in index["members"][3:]:  # another seed and another value than member 0's
        alone = train(TrainConfig(**dict(TINY, algorithm=algorithm), seed=m["seed"],
                                  lr=m["values"]["lr"], out=str(tmp_path / m["folder"])),
                      log=_quiet)
        rows = _rounds(pop / m["folder"] / "metrics.jsonl")
        np.testing.assert_allclose([r["train_loss"] for r in rows],
                                   [r["train_loss"] for r in
                                    _rounds(tmp_path / m["folder"] / "metrics.jsonl")],
                                   rtol=1e-5)
        report = json.loads((pop / m["folder"] / "report.json").read_text())
        assert report["Ap"] == pytest.approx(alone["Ap"], abs=1e-9)
    _check_summary(pop, index)


def _check_summary(pop, index):
    """population.json summarises each grid point over its seeds (mean, sample std) and
    report.md shows it; the population's folder exports as its members, seed and grid
    values as columns."""
    import csv
    by_point = {}
    for m in index["members"]:
        report = json.loads((pop / m["folder"] / "report.json").read_text())
        by_point.setdefault(m["values"]["lr"], []).append(report["Ag"])
    for point in index["summary"]:
        ags = by_point[point["values"]["lr"]]
        assert point["seeds"] == [0, 1] and point["finished"] == 2
        assert point["Ag"]["mean"] == pytest.approx(np.mean(ags))
        assert point["Ag"]["std"] == pytest.approx(np.std(ags, ddof=1))
        assert point["Ap"]["mean"] is not None and point["Ag_last10"]["mean"] is not None
        rounds = len(_rounds(pop / index["members"][0]["folder"] / "metrics.jsonl"))
        assert point["last_rounds"] == min(rounds, 10)
    rounds = index["summary"][0]["last_rounds"]  # a short run's header says how many
    assert (f"| lr | seeds | finished | Ag | Ap | Ag, last {rounds} round"
            in (pop / "report.md").read_text())
    assert cli.main(["results", "export", str(pop), "--csv", str(pop / "m.csv")]) == 0
    rows = list(csv.DictReader((pop / "m.csv").open()))
    assert list(rows[0])[:3] == ["run", "seed", "lr"]
    assert {(r["seed"], r["lr"]) for r in rows} == {(str(m["seed"]), str(m["values"]["lr"]))
                                                    for m in index["members"]}


def test_member_params_equal_standalone_and_resume_is_exact(tmp_path):
    cfgs = members.expand(TrainConfig(**TINY, algorithm="fedper", out=str(tmp_path / "p")),
                          [3, 4], {"momentum": [0.9, 0.5]})
    full = train_population(cfgs, log=_quiet)
    cut = members.expand(TrainConfig(**dict(TINY, rounds=1), algorithm="fedper", ap=False,
                                     out=str(tmp_path / "c")), [3, 4], {"momentum": [0.9, 0.5]})
    train_population(cut, log=_quiet)
    resumed = train_population(
        members.expand(TrainConfig(**TINY, algorithm="fedper", resume=True,
                                   out=str(tmp_path / "c")), [3, 4], {"momentum": [0.9, 0.5]}),
        log=_quiet)
    for a, b in zip(full, resumed):
        chex.assert_trees_all_equal((a["params"], a["private"]), (b["params"], b["private"]))
    alone = train(TrainConfig(**TINY, algorithm="fedper", seed=4, momentum=0.5,
                              out=str(tmp_path / "alone")), log=_quiet)
    chex.assert_trees_all_close((full[3]["params"], full[3]["private"]),
                                (alone["params"], alone["private"]), rtol=1e-5, atol=1e-6)


def test_a_diverged_member_is_masked_and_the_others_finish(tmp_path):
    cfgs = members.expand(TrainConfig(**TINY, out=str(tmp_path)), None, {"lr": [0.1, 1e30]})
    reports = train_population(cfgs, log=_quiet, index=tmp_path / "population.json",
                               grid=["lr"])
    assert reports[0] is not None and reports[1] is None
    status = [m["status"] for m in
              json.loads((tmp_path / "population.json").read_text())["members"]]
    assert status[0] == "finished" and status[1].startswith("diverged at round 1")
    assert not (tmp_path / "lr-1e+30_seed-0" / "report.json").exists()
    assert len(_rounds(tmp_path / "lr-0.1_seed-0" / "metrics.jsonl")) == 2


def test_resume_trains_again_a_member_that_diverged_in_round_1_and_keeps_the_others(
        tmp_path, capsys):
    from fedjax_sc.run import api
    run = lambda **extra: api.train("fedavg", out=tmp_path, grid={"lr": [0.1, 1e30]},  # noqa
                                    log=_quiet, **dict(TINY, rounds=1, ap=False), **extra)
    run()
    good, bad = tmp_path / "lr-0.1_seed-0", tmp_path / "lr-1e+30_seed-0"
    assert (bad / "config.json").exists() and not list(bad.glob("checkpoints/[0-9]*"))
    files = {f for f in good.rglob("*") if f.is_file()}
    saved = {f: f.read_bytes() for f in files if "checkpoints" in f.parts}
    capsys.readouterr()
    reports = run(resume=True)  # once refused: "... holds no checkpoint"
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("fedjax-sc:")]
    assert err == ["fedjax-sc: " + members.restart_note(["lr-1e+30_seed-0"], population=True)]
    assert reports[0] is not None and reports[1] is None  # it diverged again
    assert {f for f in files if not f.exists()} == set()  # the finished member's files stay
    assert {f: f.read_bytes() for f in saved} == saved
    assert len(_rounds(good / "metrics.jsonl")) == 1 and (good / "report.json").exists()
    status = [m["status"] for m in
              json.loads((tmp_path / "population.json").read_text())["members"]]
    assert status == ["finished", "diverged at round 1"]


def test_settings_that_change_the_program_are_refused(tmp_path, capsys):
    a = TrainConfig(**TINY, out=str(tmp_path / "a")).resolved()
    b = TrainConfig(**dict(TINY, hidden=5), out=str(tmp_path / "b")).resolved()
    with pytest.raises(ValueError, match="must share hidden"):
        members.check_members([a, b])
    with pytest.raises(ValueError, match="share an output folder"):
        members.check_members([a, a])
    assert cli.main(["train", "--out", str(tmp_path / "x"), "--grid", "hidden=3,4"]) == 1
    assert "'hidden' cannot vary within a population" in capsys.readouterr().err
    assert cli.main(["train", "--out", str(tmp_path / "x"), "--seeds", "0,x"]) == 1
    assert "--seeds '0,x'" in capsys.readouterr().err
    assert cli.main(["train", "--out", str(tmp_path / "x"), "--seed", "2", "--seeds", "0,1"]) == 1
    assert "--seed and --seeds" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_a_setting_the_grid_varies_is_refused_where_it_is_also_given(tmp_path, capsys):
    """Each member takes the grid's value, so a flag (or keyword, or algorithm option) that
    sets the same name would be dropped without a word: refused, before anything is written.
    A --config file's value is the run's starting point, not a second setting: a grid may
    vary it."""
    from fedjax_sc.run import api
    out = tmp_path / "x"
    for flags, told in ((["--lr", "0.3", "--grid", "lr=0.1,0.2"], "--lr and --grid lr="),
                        (["--grid", "lambda-kt=0,0.01", "--lambda-kt", "0.1", "--algorithm",
                          "kteps"], "--lambda-kt and --grid lambda_kt="),
                        (["--seeds", "0,1", "--seed", "0"], "--seed and --seeds")):
        assert cli.main(["train", "--out", str(out), *flags]) == 1
        assert told in capsys.readouterr().err
    with pytest.raises(ValueError, match="--lr and --grid lr="):
        api.train("fedavg", out=out, lr=0.3, grid={"lr": [0.1, 0.2]}, **TINY)
    with pytest.raises(ValueError, match="--algorithm-option q and --grid q="):
        api.train(f"{EXAMPLES / 'qffl.py'}:qffl", out=out, grid=["q=0,1"],
                  algorithm_options={"q": 1.0}, **TINY)
    assert not out.exists()
    members.refuse_set_twice(["lr"], [0, 1], {"scene", "rounds"})  # a config's lr: no error


def test_a_population_never_replaces_files_it_did_not_write(tmp_path, capsys):
    """A population writes population.json and report.md at its --out: a folder where those
    are the user's, or that holds a single run, is refused before anything is written."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "report.md").write_text("my own notes")
    args = ["train", *_flags(dict(TINY, rounds=1)), "--no-ap", "--seeds", "0,1", "--out"]
    assert cli.main([*args, str(mine)]) == 1
    assert capsys.readouterr().err.strip() == (
        f"fedjax-sc: error: {mine / 'report.md'} was not written by a population (no "
        f"population.json of one beside it) and a population would replace it: move it or "
        f"choose another --out")
    assert sorted(p.name for p in mine.iterdir()) == ["report.md"]
    assert (mine / "report.md").read_text() == "my own notes"
    single = tmp_path / "single"
    assert cli.main(["train", *_flags(dict(TINY, rounds=1)), "--no-ap", "--out",
                     str(single)]) == 0
    before = sorted(p.name for p in single.iterdir())
    capsys.readouterr()
    assert cli.main([*args, str(single)]) == 1
    assert "holds a single run (config.json)" in capsys.readouterr().err
    assert sorted(p.name for p in single.iterdir()) == before
    from fedjax_sc.run import rundir  # a second population into a root in use: refused
    busy = tmp_path / "busy"
    with rundir.locked(busy):
        assert cli.main([*args, str(busy)]) == 1
        assert f"{busy} is in use by pid" in capsys.readouterr().err
        assert sorted(p.name for p in busy.iterdir()) == [rundir.LOCK]


def test_grid_and_expand():
    assert members.parse_grid(["lr=0.01,0.05", "lambda-kt=0,1e-3"]) == {
        "lr": [0.01, 0.05], "lambda_kt": [0.0, 0.001]}
    for bad, msg in (("lr", "NAME=V1"), ("lr=a", "numbers"), ("lr=1,1", "repeated")):
        with pytest.raises(ValueError, match=msg):
            members.parse_grid([bad])
    cfgs = members.expand(TrainConfig(out="d"), [0, 1], {"lr": [0.1, 0.2], "lambda_kt": [0, 1]})
    assert [c.out for c in cfgs][:3] == ["d/lr-0.1_lambda_kt-0_seed-0",
                                         "d/lr-0.1_lambda_kt-0_seed-1",
                                         "d/lr-0.1_lambda_kt-1_seed-0"]
    assert members.varied([c.resolved() for c in cfgs]) == ["lr", "lambda_kt"]
    with pytest.raises(ValueError, match="--ap-lr-mult must be >= 0"):
        members.expand(TrainConfig(out="d"), None, {"ap_lr_mult": [-1.0]})


def _flags(cfg):
    out = []
    for k, v in cfg.items():
        out += [f"--{k.replace('_', '-')}", str(v)]
    return out


def test_members_sample_their_own_clients_as_their_standalone_runs(tmp_path):
    cfg = dict(TINY, synthetic_clients=4, clients_per_round=2, rounds=3, ap=False)
    train_population(members.expand(TrainConfig(**cfg, out=str(tmp_path / "p")), [0, 1], {}),
                     log=_quiet)
    train(TrainConfig(**cfg, seed=1, out=str(tmp_path / "a")), log=_quiet)
    pop, alone = _rounds(tmp_path / "p" / "seed-1" / "metrics.jsonl"), _rounds(
        tmp_path / "a" / "metrics.jsonl")
    assert [r["clients"] for r in pop] == [r["clients"] for r in alone]
    assert [r["clients"] for r in pop] != [r["clients"] for r in
                                           _rounds(tmp_path / "p" / "seed-0" / "metrics.jsonl")]
    np.testing.assert_allclose([r["train_loss"] for r in pop],
                               [r["train_loss"] for r in alone], rtol=1e-5)


def test_a_saved_run_reruns_from_its_config_exactly_and_flags_override(tmp_path, capsys):
    first = tmp_path / "first"
    assert cli.main(["train", *_flags(dict(TINY, algorithm="fedper", lr=0.2, seed=3)),
                     "--out", str(first)]) == 0
    config = str(first / "config.json")
    assert cli.main(["train", "--config", config, "--out", str(tmp_path / "again")]) == 0
    a, b = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("first", "again"))
    assert (a["Ap"], a["clients"]) == (b["Ap"], b["clients"])
    import jax
    assert a["environment"]["jax"] == jax.__version__  # what an exact rerun needs to match
    assert _rounds(first / "metrics.jsonl")[-1]["train_loss"] == _rounds(
        tmp_path / "again" / "metrics.jsonl")[-1]["train_loss"]
    assert cli.main(["train", "--config", config, "--rounds", "1", "--no-ap",
                     "--out", str(tmp_path / "short")]) == 0
    saved = json.loads((tmp_path / "short" / "config.json").read_text())
    assert (saved["rounds"], saved["ap"], saved["lr"], saved["seed"]) == (1, False, 0.2, 3)
    assert cli.main(["train", "--config", str(tmp_path / "none.json")]) == 1
    assert "--config" in capsys.readouterr().err


def test_results_export_csv_is_tidy_and_holds_every_figure(tmp_path, capsys):
    import csv
    run = tmp_path / "run"
    assert cli.main(["train", *_flags(dict(TINY, algorithm="kteps")), "--out", str(run)]) == 0
    assert (run / "convergence.png").stat().st_size > 0  # every run draws its figure
    assert "![Ag per round, then Ap_t](convergence.png)" in (run / "report.md").read_text()
    target = tmp_path / "m.csv"
    assert cli.main(["results", "export", str(run), "--csv", str(target)]) == 0
    rows = list(csv.DictReader(target.open()))
    assert list(rows[0]) == ["run", "seed", "phase", "round", "t", "client", "metric", "value"]
    assert {r["seed"] for r in rows} == {"0"}
    last = _rounds(run / "metrics.jsonl")[-1]
    ag = [r for r in rows if (r["round"], r["client"], r["metric"]) == ("2", "all", "Ag")]
    assert float(ag[0]["value"]) == last["Ag"]
    clients = json.loads((run / "report.json").read_text())["clients"]
    per_client = {r["client"]: float(r["value"]) for r in rows
                  if (r["phase"], r["round"], r["metric"]) == ("round", "2", "Ag")
                  and r["client"] != "all"}
    assert per_client == dict(zip([c["client"] for c in clients], last["Ag_per_client"]))
    assert {r["metric"] for r in rows} >= {"train_loss", "kt", "div", "Ap_t", "Ap_t_sp"}
    assert cli.main(["results", "export", "--csv", str(target)]) == 1
    assert "results export RUN" in capsys.readouterr().err


def test_tensorboard_event_files_hold_the_metrics(tmp_path):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="the tensorboard reader is not installed")
    run = tmp_path / "run"
    assert cli.main(["train", *_flags(dict(TINY, algorithm="kteps")), "--out", str(run),
                     "--tensorboard"]) == 0
    events = event_accumulator.EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    rows = _rounds(run / "metrics.jsonl")
    ag = {e.step: e.value for e in events.Scalars("Ag")}
    assert ag == pytest.approx({r["round"]: r["Ag"] for r in rows})
    assert {"train_loss", "aux/kt", "aux/div", "personal/sp", "Ag_per_client/d0",
            "train_loss_per_client/d1", "Ap_t/sp", "upload_sent_MB_mean"} <= tags
    assert len(events.Scalars("Ap_t/sp")) == TINY["ap_evals"] + 1


def test_the_members_ap_phase_is_one_program_and_equals_each_standalone_ap(tmp_path):
    """A grid over mu (the Ap phase's LR multiplier) and lambda_kt: the members fine-tune in
    one compiled program, each with its own traced LR and loss weight, and each member's Ap
    curve is its standalone run's."""
    pop, lines = tmp_path / "pop", []
    base = TrainConfig(**dict(TINY, algorithm="kteps", synthetic_test=40, ap_steps=4),
                       out=str(pop))
    cs = members.expand(base, [0], {"lambda_kt": [0.0, 0.1], "ap_lr_mult": [0.0, 50.0]})
    reports = train_population(cs, log=lines.append)
    assert sum("(4 members in one program)" in line for line in lines) == 4
    for still, moved in ((0, 1), (2, 3)):  # mu = 0 keeps the model; mu = 50 moves it
        assert len(set(reports[still]["Ap_t"])) == 1
        assert reports[moved]["Ap_t"] != reports[still]["Ap_t"]
    for j, (c, report) in enumerate(zip(cs[1:3], reports[1:3])):
        alone = train(dataclasses.replace(c, out=str(tmp_path / f"alone-{j}")), log=_quiet)
        np.testing.assert_allclose(report["Ap_t"], alone["Ap_t"], atol=1e-6)
        assert report["Ap"] == pytest.approx(alone["Ap"], abs=1e-6)


def test_a_members_memory_bound_counts_its_clients_or_asks_for_the_size():
    # 4 synthetic clients: 3 copies of the params for each client and the server's
    small = TrainConfig(synthetic_clients=4).resolved()
    assert members.member_bytes(small) * 2 == members.member_bytes(
        dataclasses.replace(small, synthetic_clients=9))
    # a table scene's clients are its data's: no bound without reading it
    table = dataclasses.replace(small, scene="table")
    with pytest.raises(ValueError, match="--population-size"):
        members.member_bytes(table)
    assert members.member_bytes(dataclasses.replace(table, clients_per_round=4)) == (
        members.member_bytes(small))


@pytest.mark.parametrize("text", ['{"grid": []}', "[1, 2]", '{"members": {}}', "{"])
def test_a_file_that_is_not_a_populations_index_is_named(tmp_path, text):
    index = tmp_path / "population.json"
    index.write_text(text)
    with pytest.raises(ValueError, match=f"^{index}"):
        members.read_index(index)
    from fedjax_sc.run.paper.tidy_csv import metrics_csv  # its members are not guessed
    with pytest.raises(ValueError, match=f"^{index}"):
        metrics_csv([tmp_path], tmp_path / "m.csv")
