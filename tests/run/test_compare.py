"""fedjax-sc compare: paired Ag difference of two runs on the same test examples."""

import json
import shutil

import numpy as np
import pytest

from fedjax_sc.run import cli
from fedjax_sc.run.paper.compare import compare
from fedjax_sc.run.train import TrainConfig, train

TINY = dict(scene="synthetic", synthetic_clients=3, synthetic_train=12, synthetic_test=9,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            rounds=2, ap=False)


def _quiet(_):
    pass


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    out = {}
    for name in ("fedavg", "kteps", "fedper"):
        extra = {"furl_dim": 2} if name == "kteps" else {}
        out[name] = (root / name, train(TrainConfig(**TINY, **extra, algorithm=name,
                                                    out=str(root / name)), log=_quiet))
    return out


def test_compare_matches_each_runs_reported_accuracies(runs, tmp_path):
    (a_dir, a), (b_dir, b) = runs["fedavg"], runs["kteps"]
    lines = []
    r = compare(a_dir, b_dir, resamples=500, json_path=tmp_path / "c.json", log=lines.append)
    np.testing.assert_allclose(r["per_client_a"], [c["Ag"] for c in a["clients"]], atol=1e-6)
    np.testing.assert_allclose(r["per_client_b"], [c["Ag"] for c in b["clients"]], atol=1e-6)
    assert r["Ag_a"] == pytest.approx(a["Ag"]) and r["Ag_b"] == pytest.approx(b["Ag"])
    assert r["diff"] == pytest.approx(a["Ag"] - b["Ag"])
    assert r["low"] <= r["diff"] <= r["high"]
    assert r["a"]["round"] == r["b"]["round"] == 2
    text = "\n".join(lines)
    assert "| **Ag** | 27 |" in text and "95% CI" in text and "kteps (global, round 2)" in text
    saved = json.loads((tmp_path / "c.json").read_text())
    assert saved["per_client"] == pytest.approx(list(r["per_client"]))
    same = compare(a_dir, a_dir, resamples=50, log=_quiet)
    assert same["diff"] == same["low"] == same["high"] == 0 and same["disagree"] == 0


def test_compare_personalised_models_and_the_errors(runs, tmp_path, capsys):
    (p_dir, p), (a_dir, _) = runs["fedper"], runs["fedavg"]
    with pytest.raises(ValueError, match="fedper has no global model.*--personal"):
        compare(p_dir, a_dir, log=_quiet)
    with pytest.raises(ValueError, match="fedavg has no private leaves"):
        compare(p_dir, a_dir, personal=True, log=_quiet)
    r = compare(p_dir, runs["kteps"][0], personal=True, resamples=50, log=_quiet)
    np.testing.assert_allclose(r["per_client_a"], [c["personal"] for c in p["clients"]],
                               atol=1e-6)
    with pytest.raises(FileNotFoundError, match=r"no checkpoint of round 7; saved rounds: "
                                                r"\[1, 2\]"):
        compare(a_dir, a_dir, at_round=7, log=_quiet)
    other = tmp_path / "other"  # other test examples: longer reviews kept
    train(TrainConfig(**{**TINY, "max_len": 10}, out=str(other)), log=_quiet)
    with pytest.raises(ValueError, match="other test examples"):
        compare(a_dir, other, log=_quiet)
    assert cli.main(["compare", str(a_dir), str(a_dir), "--resamples", "20"]) == 0
    assert "| **Ag** |" in capsys.readouterr().out
    assert cli.main(["compare", str(a_dir), str(tmp_path / "none")]) == 1
    assert "not a run directory (no config.json), no seed-<s>/ runs in it" in (
        capsys.readouterr().err)
    assert cli.main(["compare", str(a_dir), str(a_dir), "--level", "nan"]) == 1
    assert "--level must lie in (0, 1)" in capsys.readouterr().err


def test_compare_over_paired_seeds_means_the_pairs_and_widens_the_interval(runs, tmp_path):
    (a0_dir, a0), (b_dir, b) = runs["fedavg"], runs["kteps"]
    a1 = train(TrainConfig(**TINY, seed=1, out=str(tmp_path / "fedavg-1")), log=_quiet)
    side_a, side_b = tmp_path / "A", tmp_path / "B"  # reproduce's <scene>/<method>/seed-<s>
    for side, runs_ in ((side_a, (a0_dir, tmp_path / "fedavg-1")), (side_b, (b_dir, b_dir))):
        side.mkdir()
        for s, run in enumerate(runs_):
            (side / f"seed-{s}").symlink_to(run)
    lines = []
    r = compare(side_a, side_b, resamples=400, json_path=tmp_path / "s.json",
                log=lines.append)
    pairs = [a0["Ag"] - b["Ag"], a1["Ag"] - b["Ag"]]
    assert r["seeds"] == ["seed-0", "seed-1"]
    assert r["per_seed"] == pytest.approx(pairs) and r["diff"] == pytest.approx(np.mean(pairs))
    assert r["Ag_a"] == pytest.approx((a0["Ag"] + a1["Ag"]) / 2)
    np.testing.assert_allclose(r["per_client_a"], np.mean(
        [[c["Ag"] for c in x["clients"]] for x in (a0, a1)], 0), atol=1e-6)
    assert r["low"] <= r["diff"] <= r["high"]
    text = "\n".join(lines)
    assert "fedavg (global, rounds 2/2)" in text and "mean over 2 paired seeds" in text
    assert "| seed-1 |" in text and "training seeds' spread" in text
    assert json.loads((tmp_path / "s.json").read_text())["per_seed"] == pytest.approx(pairs)
    (side_b / "seed-1").unlink()
    with pytest.raises(ValueError, match="holds seed-0, seed-1 and .* holds seed-0: a paired"):
        compare(side_a, side_b, log=_quiet)
    with pytest.raises(ValueError, match="holds seed-0 and .* holds one run"):
        compare(side_b, b_dir, log=_quiet)


def test_over_seeds_pairs_a_run_and_its_seed_runs_beside_it_by_their_configs(runs, tmp_path,
                                                                              capsys):
    """``train --out runs/m`` for seed 0 and ``runs/m-seed<s>`` for the others: with
    --over-seeds the run itself joins its -seed<s> runs, each under its config's seed, and the
    figures are those of the same runs as a folder of seed-<s> runs."""
    (a0_dir, _), (b_dir, _) = runs["fedavg"], runs["kteps"]
    a1_dir, b1_dir = tmp_path / "fedavg-seed1", tmp_path / "kteps-seed1"
    train(TrainConfig(**TINY, seed=1, out=str(a1_dir)), log=_quiet)
    train(TrainConfig(**TINY, furl_dim=2, seed=1, algorithm="kteps", out=str(b1_dir)),
          log=_quiet)
    for name, run in (("fedavg", a0_dir), ("kteps", b_dir)):
        shutil.copytree(run, tmp_path / name)  # beside its seed-1 run
    folders = {}
    for name, seed_runs in (("A", (a0_dir, a1_dir)), ("B", (b_dir, b1_dir))):
        folders[name] = tmp_path / name
        folders[name].mkdir()
        for s, run in enumerate(seed_runs):
            (folders[name] / f"seed-{s}").symlink_to(run)
    r = compare(tmp_path / "fedavg", tmp_path / "kteps", over_seeds=True, resamples=300,
                log=_quiet)
    same = compare(folders["A"], folders["B"], resamples=300, log=_quiet)
    assert r["seeds"] == ["seed-0", "seed-1"]
    for key in ("diff", "low", "high", "Ag_a", "Ag_b"):
        assert r[key] == same[key]
    assert r["per_seed"] == same["per_seed"]
    # without the flag a run directory is one run, and the refusal names the flag
    with pytest.raises(ValueError, match=r"holds one run and .* holds seed-0, seed-1: .*"
                                         r"--over-seeds"):
        compare(tmp_path / "fedavg", folders["B"], log=_quiet)
    # a seed-<s> name whose config records another seed: the config decides, and two runs
    # of one seed are refused by name
    shutil.copytree(a0_dir, tmp_path / "fedavg-seed2")
    with pytest.raises(ValueError, match=r"fedavg.* and .*fedavg-seed2 are both runs of "
                                         r"seed 0"):
        compare(tmp_path / "fedavg", tmp_path / "kteps", over_seeds=True, log=_quiet)
    assert cli.main(["compare", str(tmp_path / "kteps"), str(tmp_path / "kteps"),
                     "--over-seeds", "--resamples", "20"]) == 0
    assert "mean over 2 paired seeds" in capsys.readouterr().out


def _example(name, *args, monkeypatch, capsys) -> str:
    """What examples/``name`` prints, run in this process as ``python examples/name args``
    (a fresh interpreter would import JAX and compile again)."""
    import runpy
    from pathlib import Path

    script = Path(__file__).parents[2] / "examples" / name
    monkeypatch.setattr("sys.argv", [str(script), *map(str, args)])
    runpy.run_path(str(script), run_name="__main__")
    return capsys.readouterr().out


def test_private_embedding_check_reads_the_runs_own_figures(tmp_path, monkeypatch, capsys):
    """examples/private_embedding_global_check.py: its ``server`` column is the run's Ag and
    its ``own`` column the personalised accuracy the run logged (each client's own tables)."""
    out = tmp_path / "fusion"
    train(TrainConfig(**{**TINY, "embed_dim": 4}, algorithm="fedfusion", out=str(out),
                      upload_noise=0.01),  # the paper's sigma: gamma moves past 0.0005
          log=_quiet)
    printed = _example("private_embedding_global_check.py", out, monkeypatch=monkeypatch,
                       capsys=capsys)
    table = [line.split("|")[1:-1] for line in printed.splitlines() if line.startswith("| d")]
    last = json.loads((out / "metrics.jsonl").read_text().splitlines()[-1])
    server = [float(r[1]) for r in table]
    own = [float(r[3]) for r in table]
    np.testing.assert_allclose(server, np.round(100 * np.asarray(last["Ag_per_client"]), 1))
    np.testing.assert_allclose(own, np.round(100 * np.asarray(last["personal_per_client"]), 1))
    # examples/fusion_weights.py on the same run: multi's per-channel gamma, near its start
    # (0) after the run's rounds, since the server keeps it on a momentum of 0.9
    line = _example("fusion_weights.py", out, monkeypatch=monkeypatch,
                    capsys=capsys).strip().splitlines()[-1]
    assert "(multi): gamma" in line and f"over {2 * TINY['hidden']} channel(s)" in line, line
    top = float(line.split("max ")[1].split()[0])
    assert 0.0 < abs(top) < 0.1, line
    with pytest.raises(SystemExit, match="no checkpoint of round 999"):
        _example("fusion_weights.py", out, 999, monkeypatch=monkeypatch, capsys=capsys)


def _copy_without_checkpoints(run, dest):
    shutil.copytree(run, dest, ignore=shutil.ignore_patterns("checkpoints"))
    return dest


def test_runs_record_their_test_hits_and_compare_reads_them_without_checkpoints(
        runs, tmp_path, capsys):
    (a_dir, a), b_dir, (p_dir, p) = runs["fedavg"], runs["kteps"][0], runs["fedper"]
    record = json.loads((a_dir / "test_hits.json").read_text())
    assert record["round"] == 2 and list(record["models"]) == ["global"]
    assert [sum(map(int, record["models"]["global"][c["client"]])) / len(record["labels"][
        c["client"]]) for c in a["clients"]] == pytest.approx([c["Ag"] for c in a["clients"]])
    fedper = json.loads((p_dir / "test_hits.json").read_text())
    assert list(fedper["models"]) == ["personal (full)"]  # no global model
    # the record as the checkpoint makes it: the same file
    kept = (a_dir / "test_hits.json").read_text()
    (a_dir / "test_hits.json").unlink()
    assert cli.main(["results", "hits", str(a_dir)]) == 0
    assert (a_dir / "test_hits.json").read_text() == kept
    # from the checkpoints (no record) and from the records alone (no checkpoints): the same
    from_ckpt = {}
    for name, run in (("a", a_dir), ("b", b_dir)):
        bare = tmp_path / f"ckpt-{name}"
        shutil.copytree(run, bare)
        (bare / "test_hits.json").unlink()
        from_ckpt[name] = bare
    r1 = compare(from_ckpt["a"], from_ckpt["b"], resamples=300, log=_quiet)
    r2 = compare(_copy_without_checkpoints(a_dir, tmp_path / "x-seed0"),
                 _copy_without_checkpoints(b_dir, tmp_path / "y-seed0"), resamples=300,
                 log=_quiet)
    for k in ("diff", "low", "high", "Ag_a", "Ag_b", "disagree"):
        assert r1[k] == pytest.approx(r2[k]), k
    np.testing.assert_allclose(r1["per_client"], r2["per_client"])
    # exported runs named by their method's prefix pair by seed as a store's folders do
    r3 = compare(tmp_path / "x", tmp_path / "y", resamples=300, log=_quiet)
    assert r3["diff"] == pytest.approx(r2["diff"]) and r3["seeds"] == []
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        compare(tmp_path / "x-seed0", tmp_path / "y-seed0", at_round=1, log=_quiet)
    # neither a record nor a checkpoint (exported before the record existed): says both
    (tmp_path / "x-seed0" / "test_hits.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"x-seed0: no test_hits.json and no "
                                                r"checkpoint to make it from"):
        compare(tmp_path / "x-seed0", tmp_path / "y-seed0", log=_quiet)
    assert not (tmp_path / "x-seed0" / "checkpoints").exists()  # reading writes nothing
    # a personalised record read back: FedPer against KTEPS's personalised models
    r4 = compare(_copy_without_checkpoints(p_dir, tmp_path / "p"), b_dir, personal=True,
                 resamples=50, log=_quiet)
    np.testing.assert_allclose(r4["per_client_a"], [c["personal"] for c in p["clients"]],
                               atol=1e-6)
    with pytest.raises(ValueError, match="fedper has no global model"):
        compare(tmp_path / "p", b_dir, log=_quiet)
    assert cli.main(["results", "hits"]) == 1
    assert "name the run folders" in capsys.readouterr().err


def test_ap_compares_from_the_records_and_the_checkpoint_redoes_the_ap_phase(tmp_path,
                                                                            capsys):
    with_ap = {**TINY, "ap": True, "ap_evals": 2, "ap_steps": 1}
    reports = {}
    for name in ("fedavg", "kteps"):
        extra = {"furl_dim": 2} if name == "kteps" else {}
        reports[name] = train(TrainConfig(**with_ap, **extra, algorithm=name,
                                          out=str(tmp_path / name)), log=_quiet)
    record = json.loads((tmp_path / "kteps" / "test_hits.json").read_text())
    assert record["ap"]["mode"] == "sp" and record["ap"]["evaluations"] == 2
    lines = []
    r = compare(tmp_path / "kteps", tmp_path / "fedavg", ap=True, resamples=200,
                log=lines.append)
    assert r["metric"] == "Ap"
    assert r["Ag_a"] == pytest.approx(reports["kteps"]["Ap"])
    assert r["Ag_b"] == pytest.approx(reports["fedavg"]["Ap"])
    np.testing.assert_allclose(r["per_client_a"], [c["Ap"] for c in reports["kteps"]["clients"]],
                               atol=1e-6)
    assert r["low"] <= r["diff"] <= r["high"]
    assert "| **Ap** |" in "\n".join(lines) and "Ap (sp), fine-tuned" in "\n".join(lines)
    # the Ap phase redone from the checkpoint gives the record training wrote
    kept = (tmp_path / "kteps" / "test_hits.json").read_text()
    (tmp_path / "kteps" / "test_hits.json").unlink()
    with pytest.raises(ValueError, match="results hits"):
        compare(tmp_path / "kteps", tmp_path / "fedavg", ap=True, log=_quiet)
    assert cli.main(["results", "hits", str(tmp_path / "kteps")]) == 0
    assert "redone" in capsys.readouterr().out
    assert (tmp_path / "kteps" / "test_hits.json").read_text() == kept
    assert cli.main(["compare", str(tmp_path / "kteps"), str(tmp_path / "fedavg"), "--ap",
                     "--personal"]) == 1
    assert "give one of them" in capsys.readouterr().err


def test_a_json_path_that_is_a_folder_is_refused_before_the_runs_are_read(tmp_path):
    with pytest.raises(ValueError, match=r"--json .*: a folder; give a file name"):
        compare(tmp_path / "a", tmp_path / "b", json_path=tmp_path)
