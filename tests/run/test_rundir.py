"""Run folders you can trust: bad inputs are refused before anything is deleted, --overwrite
removes only what a run writes, --resume refuses other data, a failed save names its round,
a torn metrics line is handled, empty clients are refused or left out of the averages."""

import dataclasses
import json
from pathlib import Path

import pytest

from fedjax_sc.run import cli, rundir
from fedjax_sc.run.train import CheckpointError, TrainConfig, train

WORDS = ("good", "bad", "film", "plot", "great", "awful", "fine", "dull")


def _quiet(_):
    pass


def write_fdu(folder: Path, domains=("apparel", "MR"), train=8, test=4) -> Path:
    """A tiny corpus in the FDU-MTL format: ``<domain>.task.{train,test}``."""
    folder.mkdir(parents=True, exist_ok=True)
    for d, domain in enumerate(domains):
        for split, n in (("train", train), ("test", test)):
            lines = [f"{i % 2}\t{WORDS[(i + d) % 8]} {WORDS[(3 * i + 1) % 8]} {domain}\n"
                     for i in range(n)]
            (folder / f"{domain}.task.{split}").write_text("".join(lines))
    return folder


def tiny(data: Path, out: Path, **kw) -> TrainConfig:
    cfg = dict(scene="fdu", data_dir=str(data), domains=("apparel", "MR"), rounds=1,
               max_len=6, vocab_size=50, embed_dim=4, hidden=3, mlp_hidden=4, batch_size=4,
               local_epochs=1, ap_evals=1, ap_steps=1, out=str(out))
    return TrainConfig(**{**cfg, **kw})


def test_an_empty_test_file_is_refused_naming_it_or_left_out_of_the_averages(tmp_path):
    data = write_fdu(tmp_path / "data")
    (data / "MR.task.test").write_text("")
    with pytest.raises(ValueError, match=r"MR\.task\.test: no examples \(client 'MR'"):
        train(tiny(data, tmp_path / "run"), log=_quiet)
    assert not (tmp_path / "run").exists()
    logs = []
    report = train(tiny(data, tmp_path / "run", allow_empty_clients=True), log=logs.append)
    mr = next(c for c in report["clients"] if c["client"] == "MR")
    apparel = next(c for c in report["clients"] if c["client"] == "apparel")
    assert mr["M"] == 0 and mr["Ag"] is None and mr["Ap"] is None
    assert report["Ag"] == apparel["Ag"] and report["Ap"] == apparel["Ap"]  # MR left out
    assert "| MR | 8 | 0 | n/a | n/a |" in (tmp_path / "run/report.md").read_text()
    assert any("MR (no test examples)" in line for line in logs)
    row = json.loads((tmp_path / "run/metrics.jsonl").read_text().splitlines()[0])
    assert row["Ag_per_client"][1] is None and row["Ag"] == apparel["Ag"]


def test_an_empty_training_file_and_a_repeated_domain_are_refused(tmp_path, capsys):
    data = write_fdu(tmp_path / "data")
    assert cli.main(["train", "--scene", "fdu", "--data-dir", str(data), "--domains", "MR",
                     "MR", "--out", str(tmp_path / "r")]) == 1
    assert "--domains: MR given more than once" in capsys.readouterr().err
    (data / "apparel.task.train").write_text("")
    with pytest.raises(ValueError, match=r"apparel\.task\.train: no examples"):
        train(tiny(data, tmp_path / "run"), log=_quiet)


@pytest.mark.parametrize("flag", ["--lr", "--momentum", "--prox-mu", "--ap-lr-mult"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_float_flags_are_refused_up_front(tmp_path, capsys, flag, value):
    assert cli.main(["train", "--algorithm", "fedprox", f"{flag}={value}", "--out",
                     str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err
    assert f"{flag} must be a finite number" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_resume_on_changed_data_is_refused_and_vocab_kept(tmp_path):
    data = write_fdu(tmp_path / "data")
    out = tmp_path / "run"
    train(tiny(data, out, ap=False), log=_quiet)
    vocab = (out / "vocab.json").read_text()
    saved = json.loads((out / "fingerprint.json").read_text())
    assert set(saved["files"]) == {"apparel.task.train", "apparel.task.test",
                                   "MR.task.train", "MR.task.test"}
    with (data / "MR.task.train").open("a") as f:  # another review: other size, other words
        f.write("1\tsplendid marvellous\n")
    with pytest.raises(ValueError, match=r"MR\.task\.train changed \(\d+ -> \d+ bytes\); "
                                         r"the vocabulary differs"):
        train(tiny(data, out, rounds=2, resume=True), log=_quiet)
    assert (out / "vocab.json").read_text() == vocab  # nothing overwritten
    assert json.loads((out / "fingerprint.json").read_text()) == saved
    # same size, other content: still refused
    write_fdu(data)
    text = (data / "apparel.task.test").read_text()
    (data / "apparel.task.test").write_text(text.replace("0\t", "1\t", 1))
    with pytest.raises(ValueError, match=r"apparel\.task\.test changed \(same size"):
        train(tiny(data, out, rounds=2, resume=True), log=_quiet)
    # a run from before fingerprints: its vocab.json is compared, then it is recorded
    write_fdu(data)
    (out / "fingerprint.json").unlink()
    logs = []
    train(tiny(data, out, rounds=2, resume=True, ap=False), log=logs.append)
    assert any("no data fingerprint" in line for line in logs)
    assert json.loads((out / "fingerprint.json").read_text()) == saved


def test_overwrite_deletes_only_what_a_run_writes_and_only_after_the_inputs_check(tmp_path,
                                                                                 capsys):
    data = write_fdu(tmp_path / "data")
    out = tmp_path / "run"
    train(tiny(data, out, ap=False), log=_quiet)
    before = sorted(p.name for p in out.iterdir())
    # bad new inputs: the old run is untouched
    with pytest.raises(FileNotFoundError, match="books.task.train not found"):
        train(tiny(data, out, domains=("books", "MR"), overwrite=True), log=_quiet)
    with pytest.raises(ValueError, match="glove-6b-50d gives d = 50"):
        train(tiny(data, out, embeddings="glove-6b-50d", overwrite=True), log=_quiet)
    assert sorted(p.name for p in out.iterdir()) == before
    # a folder that also holds the user's files is refused, nothing deleted
    (out / "notes.txt").write_text("mine")
    (out / "plots").mkdir()
    assert cli.main(["train", "--scene", "fdu", "--data-dir", str(data), "--domains",
                     "apparel", "MR", "--rounds", "1", "--out", str(out), "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert "holds files a run does not write (notes.txt, plots)" in err
    assert (out / "notes.txt").read_text() == "mine" and (out / "config.json").exists()
    (out / "notes.txt").unlink()
    (out / "plots").rmdir()
    (out / "probe-MR-good.json").write_text("{}")  # written by fedjax-sc probe: a run file
    train(tiny(data, out, rounds=2, ap=False, overwrite=True), log=_quiet)
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(r)["round"] for r in rows] == [1, 2]
    assert not (out / "probe-MR-good.json").exists()


def test_remove_run_never_touches_other_files(tmp_path):
    for name in rundir.RUN_FILES[:-1]:
        (tmp_path / name).write_text("x")
    (tmp_path / "checkpoints" / "1").mkdir(parents=True)
    (tmp_path / ".report.json.tmp-4242").write_text("x")  # a run killed mid-write
    assert rundir.foreign_entries(tmp_path) == []
    rundir.remove_run(tmp_path)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "config.json").write_text("x")
    (tmp_path / "data.csv").write_text("x")
    (tmp_path / ".data.csv.tmp-1").write_text("x")  # not a run's file: kept
    with pytest.raises(FileExistsError, match="data.csv"):
        rundir.remove_run(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".data.csv.tmp-1", "config.json",
                                                          "data.csv"]


def test_a_failed_checkpoint_save_is_reported_at_its_round(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp
    data = write_fdu(tmp_path / "data")
    real_save = ocp.CheckpointManager.save

    def save(self, step, *args, **kwargs):
        if step == 2:
            raise OSError(28, "No space left on device")
        return real_save(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "save", save)
    logs = []
    with pytest.raises(CheckpointError, match=r"^round 2: saving the checkpoint to .* failed "
                                              r"\(OSError: \[Errno 28\] No space left"):
        train(tiny(data, tmp_path / "run", rounds=3), log=logs.append)
    assert any(line.startswith("round   1/3") for line in logs)
    assert not any(line.startswith("round   2/3") for line in logs)  # never shown as done
    monkeypatch.setattr(ocp.CheckpointManager, "save", real_save)
    logs = []
    train(tiny(data, tmp_path / "run", rounds=3, resume=True, ap=False), log=logs.append)
    assert any("resumed" in line and "round 1" in line for line in logs)
    rounds = [json.loads(r)["round"] for r in
              (tmp_path / "run/metrics.jsonl").read_text().splitlines()]
    assert rounds == [1, 2, 3]


def test_cli_turns_os_errors_into_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    args = ["train", "--synthetic-clients", "2", "--synthetic-train", "8", "--synthetic-test",
            "4", "--max-len", "6", "--embed-dim", "4", "--hidden", "3", "--mlp-hidden", "4",
            "--rounds", "1", "--no-ap", "--out", str(tmp_path / "file" / "run")]
    assert cli.main(args) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("fedjax-sc: error: ")
    assert str(tmp_path / "file") in err and "Traceback" not in err


def test_a_torn_last_metrics_line_is_dropped_and_a_damaged_one_named(tmp_path):
    data = write_fdu(tmp_path / "data")
    out = tmp_path / "run"
    train(tiny(data, out, rounds=2, ap=False), log=_quiet)
    path = out / "metrics.jsonl"
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[1][:25])  # killed mid-write
    logs = []
    assert [r["round"] for r in rundir.read_metrics(path, 2, logs.append)] == [1, 2]
    assert logs and f"{path}:3: dropping a torn last line" in logs[0]
    path.write_text(lines[1] + "\n")  # round 1's line lost
    logs = []
    assert [r["round"] for r in rundir.read_metrics(path, 2, logs.append)] == [2]
    assert logs == [f"warning: {path} lacks round 1 of the 2 the checkpoint holds: its "
                    f"figures stay unrecorded (the report's per-round figures and convergence "
                    f"curve skip them)"]
    path.write_text(lines[0][:25] + "\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match=f"{path}:1: not valid JSON"):
        train(tiny(data, out, rounds=3, resume=True), log=_quiet)


def test_latin1_lines_are_reported_per_domain(tmp_path):
    data = write_fdu(tmp_path / "data")
    with (data / "MR.task.train").open("ab") as f:
        f.write(b"1\tcaf\xe9 good\n0\tna\xefve bad\n")
    logs = []
    report = train(tiny(data, tmp_path / "run", ap=False), log=logs.append)
    assert "lines not valid UTF-8, decoded as latin-1: MR 2" in logs
    assert report["latin1_lines"] == {"MR": 2}
    assert [c["latin1_lines"] for c in report["clients"]] == [0, 2]
    saved = json.loads((tmp_path / "run/report.json").read_text())
    assert saved["latin1_lines"] == {"MR": 2}


def test_help_states_the_real_default_of_on_off_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    text = capsys.readouterr().out
    assert "(default: True)" not in text and "(default: None)" not in text
    assert "(default: 0.9)" in text  # options with a value keep argparse's default


def test_part_of_a_run_without_config_is_neither_reused_nor_lost(tmp_path):
    data = write_fdu(tmp_path / "data")
    out = tmp_path / "run"
    (out / "checkpoints" / "1").mkdir(parents=True)  # a run killed before its config.json
    with pytest.raises(FileExistsError, match="part of a run .checkpoints. but no config.json"):
        train(tiny(data, out, ap=False), log=_quiet)
    train(tiny(data, out, ap=False, overwrite=True), log=_quiet)
    assert (out / "config.json").exists()
    assert [json.loads(r)["round"] for r in (out / "metrics.jsonl").read_text().splitlines()] == [1]


def test_the_same_data_folder_spelt_another_way_resumes(tmp_path, monkeypatch):
    data = write_fdu(tmp_path / "data")
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path)
    rounds = lambda: [json.loads(r)["round"]  # noqa: E731
                      for r in (out / "metrics.jsonl").read_text().splitlines()]
    train(tiny("data", out, ap=False), log=_quiet)  # relative
    assert json.loads((out / "config.json").read_text())["data_dir"] == str(data.resolve())
    lines = []
    train(tiny(str(data) + "/", out, rounds=2, resume=True, ap=False), log=lines.append)
    assert rounds() == [1, 2] and any("resumed" in line and "round 1" in line for line in lines)
    old = json.loads((out / "config.json").read_text())  # a run that stored "data" as typed
    old["data_dir"] = "data"
    (out / "config.json").write_text(json.dumps(old))
    train(tiny(data, out, rounds=3, resume=True, ap=False), log=_quiet)
    assert rounds() == [1, 2, 3]  # resumed at round 2, not trained again from round 1


def test_compare_and_probe_refuse_data_that_changed_since_training(tmp_path):
    from fedjax_sc.run.paper.compare import compare
    data, other = write_fdu(tmp_path / "data"), write_fdu(tmp_path / "other")
    text = (other / "MR.task.test").read_text()
    (other / "MR.task.test").write_text(text.replace("0\t", "1\t", 1))  # other test labels
    train(tiny(data, tmp_path / "a", ap=False), log=_quiet)
    train(tiny(other, tmp_path / "b", ap=False), log=_quiet)
    with pytest.raises(ValueError, match=r"tested on other texts: MR\.task\.test differ"):
        compare(tmp_path / "a", tmp_path / "b", log=_quiet)
    (data / "MR.task.test").write_text(text.replace("0\t", "1\t", 1))  # changed after training
    # the runs' test-hits records hold the labels they were tested on: no data is read
    assert compare(tmp_path / "a", tmp_path / "a", resamples=10, log=_quiet)["diff"] == 0
    (tmp_path / "a" / "test_hits.json").unlink()  # from the checkpoint: the data is checked
    with pytest.raises(ValueError, match=r"was trained on other data than .*MR\.task\.test "
                                         r"changed"):
        compare(tmp_path / "a", tmp_path / "a", log=_quiet)


def test_resume_compares_only_the_options_the_runs_algorithm_reads():
    from fedjax_sc.run.config_file import config_diff
    saved = lambda c: json.loads(json.dumps(dataclasses.asdict(c)))
    for algorithm, changed, read in (("pfl_da", {"fusion": "conv"}, False),
                                     ("fedavg", {"asp_schedule": "sum", "prox_mu": 1.0}, False),
                                     ("fedfusion", {"fusion": "conv"}, True),
                                     ("fedprox", {"prox_mu": 1.0}, True),
                                     ("arch_b", {"lambda_kt": 0.5}, True),
                                     ("pfl_da", {"lr": 0.5}, True)):
        old = saved(TrainConfig(algorithm=algorithm, **changed))
        diff = config_diff(old, TrainConfig(algorithm=algorithm))
        assert bool(diff) == read and (not read or set(diff) == set(changed)), algorithm


@pytest.mark.parametrize("name", __import__("fedjax_sc.run.registry",
                                            fromlist=["ALGORITHMS"]).ALGORITHMS)
def test_every_algorithm_builds_from_only_the_options_it_is_said_to_read(name):
    # build_algorithm hands a builder only the options registry.READ_BY grants its algorithm
    # (a KeyError otherwise), so what resume compares is what the build reads
    from fedjax_sc.run.registry import build_algorithm
    alg = build_algorithm(name, vocab_size=12, num_classes=2, embed_dim=4, num_clients=2)
    assert alg.name == name


def test_a_folder_saved_by_orbaxs_standard_handler_restores_verified(tmp_path):
    # checkpoints are written without orbax's copy of host arrays; the files stay the standard
    # ones, so a folder of the earlier code (StandardSave) resumes
    import chex
    import jax
    import numpy as np
    import orbax.checkpoint as ocp

    from fedjax_sc.run import setup
    data = write_fdu(tmp_path / "data")
    run = tmp_path / "run"
    train(tiny(data, run, rounds=1, ap=False, algorithm="fedper"), log=_quiet)
    saved = setup.restore_run(run)
    tree = setup._checkpoint_tree(saved.state, saved.client_states)
    old = ocp.CheckpointManager(tmp_path / "standard")
    old.save(1, args=ocp.args.StandardSave(tree))
    old.wait_until_finished()
    (tmp_path / "standard" / setup.DIGESTS).write_text(
        json.dumps({"1": setup.tree_digest(tree)}))
    state, clients = setup.restore_checkpoint(setup.checkpoint_manager(tmp_path / "standard"),
                                              1, saved.setup.state, saved.setup.client_states)
    chex.assert_trees_all_equal((state, clients), (saved.state, saved.client_states))
    private = jax.tree.leaves(clients.private)  # FedPer's classifier, per client, on the host
    assert private and all(isinstance(x, np.ndarray) for x in private)


def test_an_orbax_without_the_no_copy_option_still_checkpoints(tmp_path, monkeypatch):
    # an orbax whose NumpyHandler takes no deepcopy_host_arrays (older releases, as on one
    # accelerator image) keeps its default copy: the checkpoints are the same files
    import chex
    import numpy as np
    import orbax.checkpoint as ocp

    from fedjax_sc.run import setup
    original = ocp.type_handlers.NumpyHandler

    class Older(original):
        def __init__(self, **kwargs):
            if "deepcopy_host_arrays" in kwargs:
                raise TypeError("NumpyHandler.__init__() got an unexpected keyword argument "
                                "'deepcopy_host_arrays'")
            super().__init__(**kwargs)

    monkeypatch.setattr(ocp.type_handlers, "NumpyHandler", Older)
    tree = {"host": np.arange(6, dtype=np.float32).reshape(2, 3), "ids": np.arange(4)}
    ckpt = setup.checkpoint_manager(tmp_path / "ckpt", create=True)
    ckpt.save(1, args=ocp.args.PyTreeSave(tree))
    ckpt.wait_until_finished()
    restored = ocp.CheckpointManager(tmp_path / "ckpt").restore(
        1, args=ocp.args.StandardRestore(tree))
    chex.assert_trees_all_equal(restored, tree)


def test_copy_training_leaves_no_half_run_when_cut_short(tmp_path, monkeypatch):
    source = tmp_path / "source"
    (source / "checkpoints" / "1").mkdir(parents=True)
    for name in ("config.json", "metrics.jsonl", "vocab.json"):
        (source / name).write_text(name)
    real = rundir.shutil.copy

    def cut(src, dst):  # the process dies while copying config.json
        if Path(src).name == "config.json":
            raise KeyboardInterrupt
        return real(src, dst)

    monkeypatch.setattr(rundir.shutil, "copy", cut)
    where = tmp_path / "member"
    with pytest.raises(KeyboardInterrupt):
        rundir.copy_training(source, where)
    assert not where.exists() or rundir.run_files(where) == []
    monkeypatch.setattr(rundir.shutil, "copy", real)
    rundir.copy_training(source, where)  # the same command again: a whole copy
    assert rundir.run_files(where) == ["checkpoints", "config.json", "metrics.jsonl",
                                       "vocab.json"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("kept")
    rundir.copy_training(source, mine)
    assert sorted(p.name for p in mine.iterdir()) == ["checkpoints", "config.json",
                                                      "metrics.jsonl", "notes.txt", "vocab.json"]


def test_a_run_stopped_between_round_1s_line_and_its_checkpoint_starts_again(tmp_path,
                                                                           capsys):
    """metrics.jsonl gets round r's line before checkpoint r is written; a stop between the
    two in round 1 leaves a line and no checkpoint: --resume trains it again from round 0
    (the line is written anew), where it once refused for want of a checkpoint."""
    data = write_fdu(tmp_path / "d")
    out = tmp_path / "run"
    train(tiny(data, out, rounds=2, ap=False), log=_quiet)
    lines = (out / "metrics.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    for f in ("report.json", "report.md", "convergence.png"):
        (out / f).unlink(missing_ok=True)
    import shutil
    shutil.rmtree(out / "checkpoints")
    (out / "checkpoints/1.orbax-checkpoint-tmp-1234").mkdir(parents=True)
    (out / "metrics.jsonl").write_text(lines[0] + "\n" + '{"phase": "round", "rou')
    assert rundir.never_trained(out)
    assert not rundir.never_trained(tmp_path / "d")  # no config.json
    flags = ["train", "--scene", "fdu", "--data-dir", str(data), "--domains", "apparel", "MR",
             "--max-len", "6", "--vocab-size", "50", "--embed-dim", "4", "--hidden", "3",
             "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--no-ap",
             "--rounds", "2", "--out", str(out), "--resume"]
    assert cli.main(flags) == 0
    assert "(round 1 never completed): trained again from round 0" in capsys.readouterr().out
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows if r["phase"] == "round"] == [1, 2]
    assert rows[0]["train_loss"] == first["train_loss"]
    (out / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")  # round 2 was recorded
    shutil.rmtree(out / "checkpoints")
    assert not rundir.never_trained(out)
