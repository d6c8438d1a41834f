"""A user's algorithm's own settings: ``--algorithm-option NAME=VALUE`` reaches its builder as
``context.options``, is recorded and checked on resume, varies in a population with
``--grid NAME=...`` (traced, one program), and is refused where nothing would read it."""

import json

import pytest

from fedjax_sc.algorithms.context import ReadOptions, parse_option
from fedjax_sc.run import cli
from fedjax_sc.run.config import TrainConfig

SCALED = '''
import fedjax_sc as fsc

def scaled(context):
    """FedAvg with its loss times context.options["q"] (q = 0: nothing trains)."""
    q = context.options.get("q", 1.0)
    base = fsc.fedavg(context.text_classifier(), context.learning_rate, context.momentum)
    loss = base.client_loss

    def scaled_loss(params, batch, rng, start):
        value, aux = loss(params, batch, rng, start)
        return q * value, aux

    return base._replace(name="scaled", client_loss=scaled_loss)
'''
TINY = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "12",
        "--synthetic-test", "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3",
        "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--rounds", "2",
        "--no-ap"]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    path = tmp_path_factory.mktemp("own") / "scaled.py"
    path.write_text(SCALED)
    return f"{path}:scaled"


def _losses(run):
    return [json.loads(line)["train_loss"] for line in (run / "metrics.jsonl").open()
            if json.loads(line).get("phase") == "round"]


def test_parse_option_reads_ints_floats_and_strings():
    assert parse_option("k=5") == ("k", 5) and isinstance(parse_option("k=5")[1], int)
    assert parse_option("q=1e-3") == ("q", 0.001)
    assert parse_option("mode=fast") == ("mode", "fast")
    for bad in ("q", "=1", "2q=1", "q=nan", "q=inf"):
        with pytest.raises(ValueError, match="--algorithm-option"):
            parse_option(bad)
    options = ReadOptions({"a": 1, "b": 2})
    assert options.get("a") == 1 and options.unread == ["b"]


def test_get_holds_a_given_option_to_its_defaults_kind():
    options = ReadOptions({"alpha": 3, "typo": "0.1x", "on": "false", "k": 5, "mode": "fast"})
    assert options.get("alpha", 0.5) == 3.0 and isinstance(options.get("alpha", 0.5), float)
    assert options.get("k", 1) == 5 and isinstance(options.get("k", 1), int)
    assert options.get("on", True) is False and options.get("mode", "slow") == "fast"
    assert options.get("absent", 0.25) == 0.25
    with pytest.raises(ValueError, match=r"^--algorithm-option typo=0.1x: a number expected "
                                         r"\(the builder's default is 0.1\)$"):
        options.get("typo", 0.1)
    with pytest.raises(ValueError, match="true or false expected"):
        options.get("mode", False)
    numbers = ReadOptions({"k": 2.5, "n": 4.0, "flag": 1.0, "on": True})
    assert numbers.get("k", 1) == 2.5  # a default written 1 for a float setting
    assert numbers.get("on", 0.5) is True
    assert numbers.get("n", 1) == 4 and isinstance(numbers.get("n", 1), int)
    assert numbers.get("flag", False) is True
    assert options.unread == []


def test_an_option_reaches_the_builder_and_is_checked_on_resume(tmp_path, spec, capsys):
    run = tmp_path / "q0"
    assert cli.main(["train", "--algorithm", spec, *TINY, "--algorithm-option", "q=0",
                     "--out", str(run)]) == 0
    assert json.loads((run / "config.json").read_text())["algorithm_options"] == {"q": 0}
    assert _losses(run) == [0.0, 0.0]  # q = 0: the loss, and so every update, is zero
    again = tmp_path / "again"  # --config: the option travels with the run's configuration
    assert cli.main(["train", "--config", str(run / "config.json"), "--out", str(again)]) == 0
    assert json.loads((again / "config.json").read_text())["algorithm_options"] == {"q": 0}
    assert cli.main(["train", "--algorithm", spec, *TINY, "--rounds", "3", "--resume",
                     "--algorithm-option", "q=0.5", "--out", str(run)]) == 1
    assert "'algorithm_options': ({'q': 0}, {'q': 0.5})" in capsys.readouterr().err


def test_an_option_nothing_reads_is_refused(tmp_path, spec, capsys):
    assert cli.main(["train", "--algorithm", spec, *TINY, "--algorithm-option", "qq=0",
                     "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert "--algorithm-option qq: " in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="--algorithm-option qq: "):  # before any corpus
        TrainConfig(algorithm=spec, scene="fdu", data_dir=str(tmp_path / "absent"),
                    algorithm_options={"qq": 0}).resolved()


@pytest.mark.parametrize("flags, message", [
    (["q=0", "--algorithm-option", "q=1"], "q given more than once"),
    (["q"], "write NAME=VALUE"),
])
def test_a_malformed_option_is_a_usage_error(tmp_path, spec, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--algorithm", spec, *TINY, "--algorithm-option", *flags,
                  "--out", str(tmp_path / "run")])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["train", "--clients-per-rounds", "3"], "unrecognized arguments: --clients-per-rounds 3 "
     "(`fedjax-sc train --help` lists the options)"),
    (["compare"], "fedjax-sc compare: error: the following arguments are required"),
    (["bogus"], "(`fedjax-sc --help` lists the options)"),
])
def test_a_usage_error_is_one_line_pointing_to_its_subcommands_help(capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and says in err[0], err


def test_a_built_in_algorithm_refuses_options(tmp_path, capsys):
    assert cli.main(["train", "--algorithm", "fedavg", *TINY, "--algorithm-option", "q=0",
                     "--out", str(tmp_path / "run")]) == 1
    assert "fedavg's settings have flags of their own" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("algorithm, flags, says", [
    ("fedavg", ["--prox-mu", "0.1"], "--prox-mu is not read by --algorithm fedavg (only by "
     "fedprox, fedprox_kc)"),
    ("arch_c", ["--lambda-div", "0.5"], "--lambda-div is not read by --algorithm arch_c "
     "(only by kteps, kteps_star)"),
    ("fedavg", ["--grid", "moon_mu=1,5"], "--moon-mu is not read by --algorithm fedavg"),
    ("fedavg", ["--grid", "moon-mu=1,5"], "--moon-mu is not read by --algorithm fedavg"),
    ("SPEC", ["--temperature", "2"], "--temperature is not read by --algorithm "),
    ("SPEC", ["--grid", "prox_mu=0.5,1"], "leave it out (an option of your algorithm's own, "
     "--algorithm-option or --grid NAME=..., needs a name other than the library's prox_mu)"),
    ("fedavg", ["--server-lr", "0.5"], "--server-lr is read only with --server-opt"),
    ("fedavg", ["--grid", "server_momentum=0.5,0.9"], "--server-momentum is read only with "
     "--server-opt"),
])
def test_a_flag_the_algorithm_does_not_read_is_refused(tmp_path, spec, capsys, algorithm,
                                                       flags, says):
    algorithm = spec if algorithm == "SPEC" else algorithm
    assert cli.main(["train", "--algorithm", algorithm, *TINY, *flags,
                     "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "run").exists()


def test_flags_the_algorithm_reads_pass_and_arch_trains_without_the_hsic_term():
    from fedjax_sc.run.plumbing.option_table import reads, refuse_unread
    refuse_unread("fedprox", {"prox_mu", "lr", "rounds"})  # read, or read by every algorithm
    refuse_unread("arch_a", {"lambda_kt", "temperature"})
    assert reads("kteps", "lambda_div") and not reads("arch_b", "hsic_normalization")


def test_the_grid_varies_an_option_in_one_program(tmp_path, spec, capsys):
    pop = tmp_path / "pop"
    assert cli.main(["train", "--algorithm", spec, *TINY, "--grid", "q=0,1", "--out",
                     str(pop)]) == 0
    assert "traced per member: q" in capsys.readouterr().out
    index = json.loads((pop / "population.json").read_text())
    assert [m["values"] for m in index["members"]] == [{"q": 0.0}, {"q": 1.0}]
    assert _losses(pop / "q-0_seed-0") == [0.0, 0.0]
    alone = tmp_path / "alone"
    assert cli.main(["train", "--algorithm", spec, *TINY, "--algorithm-option", "q=1",
                     "--out", str(alone)]) == 0
    assert _losses(pop / "q-1_seed-0") == pytest.approx(_losses(alone), rel=1e-5)
    assert min(_losses(alone)) > 0


def test_an_option_named_like_a_library_setting_is_refused(tmp_path, capsys):
    from fedjax_sc.run import members, registry
    path = tmp_path / "clash.py"
    path.write_text(SCALED.replace('context.options.get("q", 1.0)',
                                   'context.options.get("server_lr", 1.0)'))
    # the grid would vary the library's --server-lr, never this option: refused, not dropped
    assert cli.main(["train", "--algorithm", f"{path}:scaled", *TINY, "--grid",
                     "server_lr=0.5,1", "--server-opt", "sgd",
                     "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "reads context.options['server_lr'], the name of the library's setting " \
           "--server-lr" in err[-1], err
    assert set(members.GRID_NAMES) <= registry.RESERVED


def test_a_run_whose_first_round_failed_resumes_from_round_0(tmp_path, capsys):
    path, out = tmp_path / "broken.py", tmp_path / "run"
    path.write_text(SCALED.replace("return q * value, aux",
                                   'raise ValueError("a bug in the loss")'))
    assert cli.main(["train", "--algorithm", f"{path}:scaled", *TINY, "--out", str(out)]) == 1
    assert "a bug in the loss" in capsys.readouterr().err
    assert (out / "config.json").exists()  # the folder was begun, nothing trained
    path.write_text(SCALED)  # the bug mended, the same command with --resume
    from fedjax_sc.algorithms import context
    context._LOADED.clear()  # a new process would load the file afresh
    command = ["train", "--algorithm", f"{path}:scaled", *TINY, "--out", str(out)]
    assert cli.main(command) == 1  # without --resume: told that --resume starts it again
    assert (f"{out} holds a run that never completed round 1; pass --resume to train it again "
            f"from round 0") in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")  # a file of the user's: refused, in --resume terms
    command.append("--resume")
    assert cli.main(command) == 1
    captured = capsys.readouterr()
    assert "never completed round 1" not in captured.out  # no restart announced
    assert captured.err.strip().splitlines()[-1] == (
        f"fedjax-sc: error: --resume: {out} never completed round 1, so it would start again "
        f"from round 0, but it holds files a run does not write (notes.txt); nothing was "
        f"changed: move them or choose another --out")
    (out / "notes.txt").unlink()
    assert cli.main(command) == 0
    assert "holds no checkpoint (round 1 never completed)" in capsys.readouterr().out
    assert len(_losses(out)) == 2
