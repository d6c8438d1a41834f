"""examples/own_algorithm.py: SCAFFOLD written outside the package, its defining properties on
tiny shapes, and the whole run (CLI, population of seeds, fsc.train) for a user's algorithm."""

import json
from pathlib import Path

import chex
import jax
import numpy as np
import pytest

import fedjax_sc as fsc
from fedjax_sc.algorithms import context
from fedjax_sc.run import cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "own_algorithm.py"
SCAFFOLD = f"{EXAMPLE}:scaffold"
LR = 0.1


@pytest.fixture(scope="module")
def example():
    return context.load(f"{EXAMPLE}:with_control_variates")


def _rounds(run_rounds, algorithm, model, scene, rounds):
    data = fsc.client_data(scene.train, local_vocab=True)
    return run_rounds(algorithm, model, data, rounds, scene.num_clients)[:2]


def test_one_client_is_fedavg(example, rounds):
    """With one client c = c_1 after every round, so the correction c - c_1 is zero."""
    scene = fsc.synthetic_scene(num_clients=1, train_per_client=12, test_per_client=2,
                                max_len=6, seed=2)
    model = fsc.TextClassifier(vocab_size=len(scene.vocab), embed_dim=6, hidden=3,
                               mlp_hidden=4)
    fedavg = fsc.fedavg(model, LR, 0.9)
    scaffold, clients = _rounds(rounds, example(fedavg, LR, 0.9, 1), model, scene, 3)
    plain, _ = _rounds(rounds, fedavg, model, scene, 3)
    chex.assert_trees_all_close(scaffold.params, plain.params, atol=1e-5)
    chex.assert_trees_all_close(scaffold.algorithm,
                                jax.tree.map(lambda x: x[0], clients.algorithm), atol=1e-6)


def test_server_control_variate_is_the_mean_of_the_clients(example, scene, model, rounds):
    algorithm = example(fsc.fedavg(model, LR, 0.0), LR, 0.0, scene.num_clients)
    state, clients = _rounds(rounds, algorithm, model, scene, 2)
    chex.assert_trees_all_close(state.algorithm,
                                jax.tree.map(lambda x: x.mean(0), clients.algorithm),
                                atol=1e-6)
    assert any(np.any(np.asarray(x)) for x in jax.tree.leaves(state.algorithm))


def test_momentum_steps_is_the_distance_of_a_constant_gradient(example):
    module = context.load(f"{EXAMPLE}:momentum_steps")
    assert float(module(np.int32(5), 0.0)) == 5.0
    v, x = 0.0, 0.0
    for _ in range(7):  # optax's heavy ball: v <- g + rho v, x <- x - eta v (g = eta = 1)
        v = 1.0 + 0.9 * v
        x += v
    assert float(module(np.int32(7), 0.9)) == pytest.approx(x, rel=1e-5)


TINY = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "12",
        "--synthetic-test", "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3",
        "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--ap-evals", "2",
        "--ap-steps", "2", "--rounds", "2"]


TINY_SETTINGS = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12,
                     synthetic_test=6, max_len=8, embed_dim=6, hidden=3, mlp_hidden=4,
                     batch_size=4, local_epochs=1, ap=False)
"""``TINY`` for ``fsc.train`` (no Ap phase)."""


def test_the_cli_runs_a_users_algorithm_as_a_population_of_seeds(tmp_path):
    assert cli.main(["train", "--algorithm", SCAFFOLD, *TINY, "--seeds", "0,1",
                     "--out", str(tmp_path / "pop")]) in (0, None)
    index = json.loads((tmp_path / "pop/population.json").read_text())
    assert len(index["members"]) == 2
    for seed in (0, 1):
        run = tmp_path / f"pop/seed-{seed}"
        report = json.loads((run / "report.json").read_text())
        assert report["rounds"] == 2 and report["Ap"] is not None
        assert json.loads((run / "config.json").read_text())["algorithm"] == SCAFFOLD
        assert (run / "checkpoints").is_dir()
    # Hooks.server_metrics: each member's ||c|| in its rows, the trackers' scalars, the CSV
    from fedjax_sc.run.paper.tidy_csv import metrics_csv
    from fedjax_sc.run.plumbing.tracking import round_scalars
    norms = []
    for seed in (0, 1):
        rows = [json.loads(x) for x in
                (tmp_path / f"pop/seed-{seed}/metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if r["phase"] == "round"]
        norms.append([r["server"]["c_norm"] for r in rows])
        assert round_scalars(rows[-1], ["a", "b"])["server/c_norm"] == norms[-1][-1]
    assert all(n > 0 for n in norms[0] + norms[1]) and norms[0] != norms[1]
    metrics_csv([tmp_path / "pop"], tmp_path / "m.csv")
    assert ",server_c_norm," in (tmp_path / "m.csv").read_text()


def test_fsc_train_takes_the_function_itself_and_resumes(tmp_path):
    scaffold = context.load(SCAFFOLD)
    settings = dict(TINY_SETTINGS, log=lambda _: None)
    full = fsc.train(scaffold, out=tmp_path / "full", rounds=2, **settings)
    fsc.train(scaffold, out=tmp_path / "cut", rounds=1, **settings)
    resumed = fsc.train(scaffold, out=tmp_path / "cut", rounds=2, resume=True, **settings)
    chex.assert_trees_all_equal(full["params"], resumed["params"])
    # the algorithm's own final states come back too: c is the mean of the clients' c_i
    chex.assert_trees_all_equal((full["server_state"], full["client_state"]),
                                (resumed["server_state"], resumed["client_state"]))
    chex.assert_trees_all_close(full["server_state"], jax.tree.map(
        lambda c: c.mean(0), full["client_state"]), atol=1e-6)
    assert jax.tree.leaves(full["server_state"])


def test_fedavg_built_in_a_file_is_the_built_in_fedavg_with_the_runs_upload_noise(
        tmp_path, monkeypatch):
    """The run chains ``--upload-noise`` after a user's upload, and in its place where the
    algorithm sends its model as it is: FedAvg built in a file draws the built-in FedAvg's
    noise, so a method that reduces to FedAvg compares with it exactly (a chain of the
    identity and the noise drew other noise: the two runs differed by up to 0.05)."""
    monkeypatch.setattr(context, "_LOADED", {})
    own = tmp_path / "plain_fedavg.py"
    own.write_text("import fedjax_sc as fsc\n"
                   "def build(context):\n"
                   "    return fsc.fedavg(context.text_classifier(), context.learning_rate,\n"
                   "                      context.momentum, context.embedding_learning_rate)\n")
    settings = dict(TINY_SETTINGS, log=lambda _: None, rounds=2, upload_noise=0.05)
    built_in = fsc.train("fedavg", out=tmp_path / "a", **settings)
    in_a_file = fsc.train(f"{own}:build", out=tmp_path / "b", **settings)
    chex.assert_trees_all_equal(built_in["params"], in_a_file["params"])


def test_a_file_imports_the_modules_beside_it_and_a_module_is_found_in_the_run_folder(
        tmp_path, monkeypatch):
    """As ``python file.py`` and ``python -m module`` do: a spec's file imports its
    neighbours, and ``module:FUNCTION`` (what ``fsc.train`` records for a script's function)
    is found in the folder the command runs in."""
    import sys
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(context, "_LOADED", {})
    (tmp_path / "study").mkdir()
    (tmp_path / "study" / "neighbour_terms.py").write_text("SCALE = 3\n")
    (tmp_path / "study" / "method.py").write_text(
        "from neighbour_terms import SCALE\ndef build(context):\n    return SCALE\n")
    assert context.load(f"{tmp_path}/study/method.py:build")(None) == 3
    (tmp_path / "cwd_method_module.py").write_text("def build(context):\n    return 7\n")
    monkeypatch.chdir(tmp_path)
    assert context.load("cwd_method_module:build")(None) == 7
    for name in ("neighbour_terms", "cwd_method_module"):
        sys.modules.pop(name, None)


def test_a_broken_spec_is_one_line(tmp_path, capsys):
    for spec, said in ((f"{tmp_path}/none.py:f", "no file"),
                       (f"{EXAMPLE}:nothing", "has no function"),
                       ("no_such_module:f", "importing no_such_module failed")):
        assert cli.main(["train", "--algorithm", spec, *TINY, "--out",
                         str(tmp_path / "x")]) == 1
        captured = capsys.readouterr()
        assert said in captured.err and len(captured.err.strip().splitlines()) == 1
        assert "scene synthetic" not in captured.out  # refused before the data is read


def test_a_checkpoint_of_another_structure_is_refused_and_left_in_place(tmp_path, capsys,
                                                                       monkeypatch):
    """A resume whose algorithm now keeps a state its checkpoints lack (the file edited, or
    another version) is not a damaged folder: nothing is moved to corrupt-checkpoints/, the
    line says why, and the run resumes once the code is as it was."""
    own = tmp_path / "stateful.py"
    plain = ("import jax.numpy as jnp\nimport fedjax_sc as fsc\n"
             "def build(context):\n"
             "    return fsc.fedavg(context.text_classifier(), context.learning_rate)\n")
    own.write_text(plain)
    out = str(tmp_path / "run")
    args = ["train", "--algorithm", f"{own}:build", *TINY, "--out", out]
    monkeypatch.setattr(context, "_LOADED", {})
    assert cli.main([*args[:-2], "--rounds", "1", "--out", out]) == 0
    own.write_text(plain.replace("    return fsc.fedavg(", "    return with_c(fsc.fedavg(")
                   .rstrip() + ")\n" + "def with_c(alg):\n"
                   "    return alg._replace(hooks=fsc.Hooks(server_init=lambda p: jnp.zeros(3),\n"
                   "        server_update=lambda s: (s.params, s.state)))\n")
    monkeypatch.setattr(context, "_LOADED", {})
    capsys.readouterr()
    assert cli.main([*args, "--resume"]) == 1
    captured = capsys.readouterr()
    assert "the rounds to come train with it" not in captured.out  # refused, so not said
    err = captured.err
    assert "holds states of another structure than this run's (this run has " \
           "['server_algorithm'] float32[3], which the checkpoint lacks)" in err
    assert "nothing was moved" in err.splitlines()[-1]
    assert not (tmp_path / "run" / "corrupt-checkpoints").exists()
    assert (tmp_path / "run" / "checkpoints" / "1").is_dir()
    own.write_text(plain + "# a comment\n")  # edited, same states: resumed, and told
    monkeypatch.setattr(context, "_LOADED", {})
    assert cli.main([*args, "--resume"]) == 0
    assert "the rounds to come train with it as it is now" in capsys.readouterr().out


def test_overwrite_keeps_the_earlier_run_when_the_new_round_fails_to_trace(tmp_path, capsys,
                                                                           monkeypatch):
    """``--overwrite`` removes the earlier run only once the new run's round traces: a
    ``server_update`` whose state changes shape is refused with the earlier run in place."""
    monkeypatch.setattr(context, "_LOADED", {})
    bad = tmp_path / "bad_server.py"
    bad.write_text(
        "import jax.numpy as jnp\n"
        "import fedjax_sc as fsc\n"
        "def build(context):\n"
        "    alg = fsc.fedavg(context.text_classifier(), context.learning_rate)\n"
        "    return alg._replace(hooks=fsc.Hooks(\n"
        "        server_init=lambda params: jnp.zeros((2,)),\n"
        "        client_end=lambda end: ((), jnp.ones((2,))),\n"
        "        server_update=lambda s: (s.params, s.messages)))  # the sum forgotten\n")
    out = str(tmp_path / "run")
    assert cli.main(["train", *TINY, "--out", out, "--rounds", "1"]) == 0
    before = sorted(p.name for p in Path(out).iterdir())
    capsys.readouterr()
    assert cli.main(["train", "--algorithm", f"{bad}:build", *TINY, "--out", out,
                     "--overwrite"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fedjax-sc: error: fedavg: Hooks.server_update returned a state whose "
                   "leaf (root) is float32[2, 2] where it was given float32[2]"]
    assert sorted(p.name for p in Path(out).iterdir()) == before
    assert json.loads((Path(out) / "config.json").read_text())["algorithm"] == "fedavg"


def test_resume_tells_of_an_algorithm_file_that_changed(tmp_path):
    """The fingerprint records the user's algorithm file; a resume after an edit says so
    (the rounds so far were trained with the earlier code) and goes on."""
    import shutil
    own = tmp_path / "own.py"
    shutil.copy(EXAMPLE, own)
    settings = TINY_SETTINGS
    fsc.train(f"{own}:scaffold", out=tmp_path / "run", rounds=1, log=lambda _: None, **settings)
    record = json.loads((tmp_path / "run" / "fingerprint.json").read_text())["algorithm"]
    assert record["file"] == str(own) and len(record["sha256"]) == 64
    for edit, told in (("", False), ("# an edit\n", True)):
        own.write_text(own.read_text() + edit)
        lines = []
        fsc.train(f"{own}:scaffold", out=tmp_path / "run", rounds=3 if told else 2,
                  resume=True, log=lines.append, **settings)
        assert any("the algorithm's file" in line and "changed" in line
                   for line in lines) == told
    own.write_text(own.read_text().replace("# an edit", "# an adit"))  # the same size
    lines = []
    fsc.train(f"{own}:scaffold", out=tmp_path / "run", rounds=4, resume=True,
              log=lines.append, **settings)
    assert any("(same size, SHA-256 " in line for line in lines), lines


@pytest.mark.parametrize("bug, line", [
    ("a, b = (1, 2, 3)", "too many values to unpack (expected 2)"),
    ("{}['mu']", "KeyError: 'mu'"),
    ('raise TypeError("one\\ntwo")', "TypeError: one (the traceback above has the rest)")])
def test_an_error_in_the_users_code_shows_where_then_the_one_line(tmp_path, capsys,
                                                                   monkeypatch, bug, line):
    """The one-line error names no file of a user's algorithm: an error of any type raised in
    its code comes with the traceback, which names the file and line, then the line (with the
    type's name where the message alone would not say it); the library's own errors stay one
    line (``FEDJAX_SC_TRACEBACK=1`` shows theirs)."""
    monkeypatch.setattr(context, "_LOADED", {})
    bad = tmp_path / "bad_method.py"
    bad.write_text(
        "import fedjax_sc as fsc\n"
        "def client_end(end):\n"
        f"    {bug}  # the user's bug\n"
        "def build(context):\n"
        "    alg = fsc.fedavg(context.text_classifier(), context.learning_rate)\n"
        "    return alg._replace(hooks=fsc.Hooks(client_end=client_end))\n")
    args = ["train", "--algorithm", f"{bad}:build", *TINY]
    assert cli.main([*args, "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert any(f'File "{bad}", line 3, in client_end' in line for line in err)
    assert err[-1] == f"fedjax-sc: error: {line}"
    assert cli.main([*args, "--out", str(tmp_path / "a"), "--rounds", "0"]) == 1
    assert len(capsys.readouterr().err.strip().splitlines()) == 1  # the library's check
    monkeypatch.setenv("FEDJAX_SC_TRACEBACK", "1")
    assert cli.main([*args, "--out", str(tmp_path / "a"), "--rounds", "0"]) == 1
    assert "Traceback (most recent call last)" in capsys.readouterr().err


def test_the_communication_figures_count_what_the_hooks_send(example, scene, model):
    """SCAFFOLD sends c down with the model and the change of c_i up with the upload: twice
    the model's floats each way (tables by each client's rows); FedDyn's update is derived
    from the upload and its H never leaves the server: FedAvg's figures."""
    from fedjax_sc.core.communication import account

    params = fsc.init_params(model, jax.random.key(0))
    data = fsc.client_data(scene.train, local_vocab=True)
    fedavg = fsc.fedavg(model, LR, 0.9)
    figures = {}
    feddyn = fsc.methods.dynamic_regularizer(fedavg, scene.num_clients)
    for name, algorithm in (("fedavg", fedavg), ("scaffold", example(fedavg, LR, 0.9, 4)),
                            ("feddyn", feddyn)):
        state, clients = fsc.init_states(algorithm, params, scene.num_clients)
        figures[name] = account(algorithm, state, data, client_states=clients)
    plain, scaffold, feddyn = figures["fedavg"], figures["scaffold"], figures["feddyn"]
    for field in ("download_floats", "upload_dense_floats", "upload_sent_floats"):
        np.testing.assert_array_equal(getattr(scaffold, field), 2 * getattr(plain, field))
        np.testing.assert_array_equal(getattr(feddyn, field), getattr(plain, field))
    assert plain.download_floats.min() < sum(x.size for x in jax.tree.leaves(params))


def test_the_compressed_uploads_example_sends_what_its_compressor_says(tmp_path):
    example = EXAMPLE.parent / "compressed_uploads.py"
    ratios = {}
    for name in ("top_tenth", "four_bits"):
        assert cli.main(["train", "--algorithm", f"{example}:{name}", *TINY, "--ap-evals",
                         "1", "--out", str(tmp_path / name)]) in (0, None)
        report = json.loads((tmp_path / name / "report.json").read_text())
        ratios[name] = report["communication"]["upload_sent_over_dense"]
    # a tenth of the entries as values and int32 indices; 4-bit codes and two float32 bounds
    assert 0.15 < ratios["top_tenth"] <= 0.3 and ratios["four_bits"] < 0.3


def test_a_saved_relative_algorithm_file_not_found_elsewhere_is_named(tmp_path, capsys,
                                                                     monkeypatch):
    """config.json keeps FILE.py:F as given, relative to where the run started; a rerun with
    --config from another folder is told where fingerprint.json says the file is."""
    start, elsewhere = tmp_path / "start", tmp_path / "elsewhere"
    start.mkdir(), elsewhere.mkdir()
    (start / "mine.py").write_text("import fedjax_sc as fsc\ndef build(context):\n"
                                   "    return fsc.fedavg(context.text_classifier(), "
                                   "context.learning_rate)\n")
    monkeypatch.chdir(start)
    monkeypatch.setattr(context, "_LOADED", {})
    assert cli.main(["train", "--algorithm", "mine.py:build", *TINY, "--rounds", "1",
                     "--no-ap", "--out", str(tmp_path / "run")]) == 0
    monkeypatch.chdir(elsewhere)
    config = tmp_path / "run" / "config.json"
    capsys.readouterr()
    assert cli.main(["train", "--config", str(config), "--out", str(tmp_path / "again")]) == 1
    assert capsys.readouterr().err.strip() == (
        f"fedjax-sc: error: --config {config}: --algorithm mine.py:build is relative to the "
        f"folder the run was started in and is not found here; {config.parent}/"
        f"fingerprint.json records the file as {start / 'mine.py'}: add --algorithm "
        f"{start / 'mine.py'}:build, or run from that folder")
    assert cli.main(["train", "--config", str(config), "--algorithm",
                     f"{start / 'mine.py'}:build", "--out", str(tmp_path / "again")]) == 0
    capsys.readouterr()
    assert cli.main(["train", "--config", str(config), "--out", str(tmp_path / "run"),
                     "--resume", "--rounds", "2"]) == 1
    assert capsys.readouterr().err.strip().endswith(
        f"records the file as {start / 'mine.py'}: run from {start} (--resume needs the "
        f"configuration as saved)")
    monkeypatch.chdir(start)
    assert cli.main(["train", "--config", str(config), "--out", str(tmp_path / "run"),
                     "--resume", "--rounds", "2"]) == 0
