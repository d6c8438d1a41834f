"""Members that differ only in the Ap phase's mu train once: the others copy the trained
member's rounds and redo only their own Ap phases, with the figures of standalone runs."""

import dataclasses
import json

import numpy as np
import pytest

from fedjax_sc.run import cli, members
from fedjax_sc.run.train import TrainConfig, train

TINY = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12, synthetic_test=40,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            ap_evals=2, ap_steps=4, rounds=2, algorithm="kteps")


def _flags(cfg):
    return [x for k, v in cfg.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def _rounds(path):
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["phase"] == "round"]


def test_an_ap_only_grid_trains_once_and_each_member_equals_its_standalone_run(
        tmp_path, capsys):
    pop = tmp_path / "pop"
    argv = ["train", *_flags(TINY), "--out", str(pop), "--seeds", "0,1",
            "--grid", "ap_lr_mult=0,50"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.count("round compiled") == 1  # the two seeds with mu = 0, one population
    assert out.count("(4 members in one program)") == 4  # then every Ap phase, one program
    assert "ap_lr_mult-50_seed-1: trains as ap_lr_mult-0_seed-1 does" in out
    index = json.loads((pop / "population.json").read_text())
    assert [m["status"] for m in index["members"]] == ["finished"] * 4
    sharer = pop / "ap_lr_mult-50_seed-1"
    assert json.loads((sharer / "config.json").read_text())["ap_lr_mult"] == 50
    alone = train(TrainConfig(**TINY, seed=1, ap_lr_mult=50.0, out=str(tmp_path / "alone")),
                  log=lambda _: None)
    np.testing.assert_allclose([r["train_loss"] for r in _rounds(sharer / "metrics.jsonl")],
                               [r["train_loss"] for r in
                                _rounds(tmp_path / "alone" / "metrics.jsonl")], rtol=1e-6)
    report = json.loads((sharer / "report.json").read_text())
    assert len(report["timing"]["round_seconds"]) == 2  # the copied rounds' seconds
    assert report["Ap"] == pytest.approx(alone["Ap"], abs=1e-6)
    still = json.loads((pop / "ap_lr_mult-0_seed-1" / "report.json").read_text())
    assert len(set(still["Ap_t"])) == 1 and report["Ap_t"] != still["Ap_t"]
    # --from-run: the standalone run's rounds, fine-tuned at two mu in one program, no round
    alone_files = {f: f.read_bytes() for f in (tmp_path / "alone").rglob("*") if f.is_file()}
    assert cli.main(["train", "--from-run", str(tmp_path / "alone"), "--out",
                     str(tmp_path / "forked"), "--grid", "ap_lr_mult=0,50"]) == 0
    out = capsys.readouterr().out
    assert "round compiled" not in out and out.count("(2 members in one program)") == 2
    for mu, same in (("0", still), ("50", report)):
        forked = json.loads((tmp_path / "forked" / f"ap_lr_mult-{mu}_seed-1" /
                             "report.json").read_text())
        assert forked["Ap"] == pytest.approx(same["Ap"], abs=1e-6)
    assert {f: f.read_bytes() for f in alone_files} == alone_files  # the run is not changed
    assert cli.main(["train", "--from-run", str(tmp_path / "alone"), "--out",
                     str(tmp_path / "reseeded"), "--seed", "3"]) != 0
    assert "seed" in capsys.readouterr().err and not (tmp_path / "reseeded").exists()
    assert cli.main(["train", "--from-run", str(tmp_path), "--out", str(tmp_path / "x")]) != 0
    assert "--from-run" in capsys.readouterr().err
    # a resume of the finished population redoes the Ap phases only, every member its own
    assert cli.main([*argv, "--resume"]) == 0
    again = json.loads((sharer / "report.json").read_text())
    assert again["Ap"] == pytest.approx(report["Ap"], abs=1e-6)


def test_a_member_shares_training_only_while_its_folder_holds_no_run(tmp_path):
    base = TrainConfig(**TINY, out=str(tmp_path))
    cs = members.expand(base, [0, 1], {"ap_lr_mult": [0.01, 1.0], "lambda_kt": [0.0, 0.1]})
    lead = members.shared_training(cs)
    # mu varies slowest: the mu = 1 members repeat the mu = 0.01 ones of equal seed and lambda
    assert lead == [None, None, None, None, 0, 1, 2, 3]
    own = cs[5]
    (tmp_path / "own").mkdir()
    own = dataclasses.replace(own, out=str(tmp_path / "own"))
    (tmp_path / "own" / "config.json").write_text("{}")
    assert members.shared_training([cs[1], own]) == [None, None]
    assert members.shared_training([cs[1], dataclasses.replace(own, overwrite=True)]) == \
        [None, 0]


def test_a_resume_finishes_the_trained_member_then_copies_it(tmp_path, capsys):
    """The population stopped while its trained member was in round 2: ``--resume`` resumes
    it, then the member sharing its training gets the finished rounds."""
    pop = tmp_path / "pop"
    train(TrainConfig(**{**TINY, "rounds": 1}, seed=0, out=str(pop / "ap_lr_mult-0_seed-0")),
          log=lambda _: None)
    assert cli.main(["train", *_flags(TINY), "--out", str(pop), "--seeds", "0",
                     "--grid", "ap_lr_mult=0,50", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "at round 1" in out and out.count("round compiled") == 1
    rows = [_rounds(pop / f / "metrics.jsonl") for f in ("ap_lr_mult-0_seed-0",
                                                          "ap_lr_mult-50_seed-0")]
    assert [r["round"] for r in rows[1]] == [1, 2] and rows[0] == rows[1]
    assert json.loads((pop / "ap_lr_mult-50_seed-0" / "report.json").read_text())["Ap"] > 0


def test_a_member_whose_trained_member_diverged_is_reported_diverged(tmp_path):
    from fedjax_sc.run import api
    settings = {k: v for k, v in TINY.items() if k != "algorithm"}
    reports = api.train("fedavg", out=tmp_path, log=lambda _: None, **settings,
                        grid={"lr": [0.1, 1e30], "ap_lr_mult": [0.01, 1.0]})
    assert [r is None for r in reports] == [False, False, True, True]
    status = {m["folder"]: m["status"] for m in
              json.loads((tmp_path / "population.json").read_text())["members"]}
    assert status["lr-1e+30_ap_lr_mult-1_seed-0"] == "diverged at round 1"
    assert status["lr-0.1_ap_lr_mult-1_seed-0"] == "finished"
    assert not (tmp_path / "lr-1e+30_ap_lr_mult-1_seed-0").exists()  # nothing to copy
