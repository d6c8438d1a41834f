"""Run loop: outputs, exact resume, non-finite guard, CLI, and real FDU data end to end."""

import json
import shutil
from pathlib import Path

import chex
import jax
import numpy as np
import pytest

from fedjax_sc.run import cli
from fedjax_sc.run.train import NonFiniteUpdateError, TrainConfig, train

TINY = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12, synthetic_test=6,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            ap_evals=2, ap_steps=2)


def _rows(path, phase="round"):
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    return [r for r in rows if r["phase"] == phase]


def _quiet(_):
    pass


@pytest.fixture(scope="module")
def fedavg_run(tmp_path_factory):
    """An uninterrupted 3-round FedAvg run with the Ap phase: its folder and report (shared
    by the tests that compare with it or read its outputs; they must not change it)."""
    out = tmp_path_factory.mktemp("fedavg") / "full"
    return out, train(TrainConfig(**TINY, rounds=3, out=str(out)), log=_quiet)


def test_resume_ends_with_exactly_the_uninterrupted_parameters(fedavg_run, tmp_path):
    full_dir, full = fedavg_run
    train(TrainConfig(**TINY, rounds=1, out=str(tmp_path / "cut"), ap=False), log=_quiet)
    resumed = train(TrainConfig(**TINY, rounds=3, out=str(tmp_path / "cut"), resume=True),
                    log=_quiet)
    chex.assert_trees_all_equal(full["params"], resumed["params"])
    rows = _rows(tmp_path / "cut/metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3]
    assert [r["Ag"] for r in _rows(full_dir / "metrics.jsonl")] == [r["Ag"] for r in rows]
    assert resumed["Ap"] == full["Ap"]


def test_kteps_star_resume_restores_private_leaves_and_upload_chain_exactly(tmp_path):
    # kteps_star: the chained upload's state has no leaves and is not saved; a resume must
    # still compress and noise (a regression once sent the table as it is)
    cfg = dict(TINY, algorithm="kteps_star", furl_dim=2)
    full = train(TrainConfig(**cfg, rounds=2, out=str(tmp_path / "full")), log=_quiet)
    train(TrainConfig(**cfg, rounds=1, out=str(tmp_path / "cut"), ap=False), log=_quiet)
    config = tmp_path / "cut/config.json"  # a config written before a field existed
    old = json.loads(config.read_text())
    del old["lambda_kt"], old["ap_steps"]
    config.write_text(json.dumps(old))
    resumed = train(TrainConfig(**cfg, rounds=2, out=str(tmp_path / "cut"), resume=True,
                                ap=False), log=_quiet)
    chex.assert_trees_all_equal((full["params"], full["private"]),
                                (resumed["params"], resumed["private"]))
    assert set(full["private"]) == {"private_projection", "private_classifier", "user"}
    assert set(full["Ap_modes"]) == {"s", "p", "sp"} and full["ap_mode"] == "sp"
    ap_rows = _rows(tmp_path / "full/metrics.jsonl", "ap")
    assert [r["t"] for r in ap_rows] == [0, 1, 2] and [r["steps"] for r in ap_rows] == [0, 2, 4]
    assert full["Ap"] == pytest.approx(np.mean([r["Ap_t"]["sp"] for r in ap_rows[1:]]))
    assert {"kt", "div", "ce_private", "energy_kept"} <= set(
        _rows(tmp_path / "full/metrics.jsonl")[0]["aux"])
    assert "energy_kept" in _rows(tmp_path / "cut/metrics.jsonl")[1]["aux"]
    with pytest.raises(ValueError, match="different configuration"):
        train(TrainConfig(**{**cfg, "lambda_kt": 0.5}, rounds=3, out=str(tmp_path / "cut"),
                          resume=True), log=_quiet)


def test_fedper_has_no_global_model_and_reports_ag_as_not_applicable(tmp_path):
    report = train(TrainConfig(**TINY, algorithm="fedper", rounds=1, out=str(tmp_path / "p")),
                   log=_quiet)
    assert report["Ag"] is None and all(c["Ag"] is None for c in report["clients"])
    assert 0.0 <= report["Ap"] <= 1.0
    assert "| Avg | | | n/a |" in (tmp_path / "p/report.md").read_text()
    row = _rows(tmp_path / "p/metrics.jsonl")[0]
    assert row["Ag"] is None and 0.0 <= row["personal"]["full"] <= 1.0


def test_upload_noise_is_the_builders_unless_the_papers_scene_presets_its_sigma():
    """One default: the builder's (none; kteps_star's sigma 0.01, Alg. 1), so the library and
    the CLI train the same run; the paper's scenes preset sigma 0.01 for every method that
    uploads (Sec. 5.2), never for indiv, fs and asp."""
    resolved = lambda **kw: TrainConfig(**{**TINY, **kw}).resolved().upload_noise
    for name in ("fedavg", "fedper", "kteps", "pfl_da", "fedfusion", "arch_a", "indiv", "fs"):
        assert resolved(algorithm=name) == 0.0, name
    assert resolved(algorithm="kteps_star") == 0.01
    paper = dict(scene="fdu", data_dir=".", max_len=None, batch_size=None)
    for name in ("fedavg", "fedper", "lg_fedavg", "fedprox", "fedmmd", "fedfusion", "pfl_da",
                 "kteps", "kteps_star", "arch_a", "feddyn"):
        assert resolved(algorithm=name, **paper) == 0.01, name
    for name in ("indiv", "fs", "asp"):
        assert resolved(algorithm=name, **paper) == 0.0, name
    assert resolved(algorithm="fedavg", upload_noise=0.0, **paper) == 0.0
    assert resolved(algorithm="kteps", upload_noise=0.2) == 0.2


def test_fedfusion_private_embedding_stays_on_clients_and_global_model_keeps_its_initial_one(
        tmp_path):
    from fedjax_sc.run.train import build_setup, global_params, load_scene
    c = TrainConfig(**TINY, algorithm="fedfusion", rounds=1, ap=False, out=str(tmp_path / "f"))
    report = train(c, log=_quiet)
    assert "embedding" not in report["params"]  # never aggregated
    setup = build_setup(c.resolved(), load_scene(c.resolved()), log=_quiet)
    initial = setup.global_private["embedding"]["embedding"]
    trained = np.asarray(report["private"]["embedding"]["embedding"])
    assert trained.shape[0] == 2 and not np.allclose(trained[0], initial)  # clients trained it
    full = global_params(setup, report["params"])
    np.testing.assert_array_equal(full["embedding"]["embedding"], initial)
    assert report["Ag"] is not None and 0.0 <= report["Ag"] <= 1.0
    shared = train(TrainConfig(**TINY, algorithm="fedfusion", rounds=1, ap=False,
                               fusion_private_embedding=False, out=str(tmp_path / "s")),
                   log=_quiet)
    assert "embedding" in shared["params"] and not jax.tree.leaves(shared["private"])


def test_outputs_and_report(fedavg_run, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(fedavg_run[0], out)  # a copy: the overwrite below replaces it
    report = fedavg_run[1]
    for name in ("config.json", "vocab.json", "metrics.jsonl", "report.json", "report.md"):
        assert (out / name).is_file(), name
    assert json.loads((out / "config.json").read_text())["lr"] == 0.1  # synthetic preset
    assert len(report["clients"]) == 2
    assert report["Ag"] == pytest.approx(np.mean([c["Ag"] for c in report["clients"]]))
    assert "| Avg |" in (out / "report.md").read_text()
    with pytest.raises(FileExistsError, match="--resume"):
        train(TrainConfig(**TINY, rounds=3, out=str(out)), log=_quiet)
    train(TrainConfig(**TINY, rounds=1, out=str(out), overwrite=True, ap=False), log=_quiet)
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 1
    with pytest.raises(ValueError, match="different configuration"):
        train(TrainConfig(**{**TINY, "hidden": 5}, rounds=3, out=str(out), resume=True),
              log=_quiet)


def test_non_finite_update_stops_the_run_naming_round_and_client(tmp_path):
    with pytest.raises(NonFiniteUpdateError, match=r"round 1: client \d \(d\d\).*round 1 was "
                       r"not saved"):
        train(TrainConfig(**TINY, rounds=2, lr=1e30, out=str(tmp_path / "nan")), log=_quiet)
    assert not list((tmp_path / "nan/checkpoints").glob("1"))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
def test_a_server_step_that_diverges_stops_the_run_and_is_not_saved(tmp_path):
    """The clients' updates are finite; the server optimizer's step is not: the round is
    neither saved nor scored (a nan model would score its class 0's share)."""
    with pytest.raises(NonFiniteUpdateError, match=r"round 1: the server's update made the "
                       r"global model non-finite .* round 1 was not saved"):
        train(TrainConfig(**TINY, rounds=2, ap=False, server_opt="sgd", server_lr=1e39,
                          out=str(tmp_path / "nan")), log=_quiet)
    assert not list((tmp_path / "nan/checkpoints").glob("1"))
    # finite but huge: round 2's clients all go nan, and the message names --server-lr
    with pytest.raises(NonFiniteUpdateError, match=r"round 2: client .* or --server-lr"):
        train(TrainConfig(**TINY, rounds=2, ap=False, server_opt="sgd", server_lr=1e38,
                          out=str(tmp_path / "huge")), log=_quiet)


def test_a_model_with_non_finite_scores_classifies_nothing():
    import jax.numpy as jnp

    from fedjax_sc.core.evaluate import example_hits
    scores = lambda params, x: jnp.where(x[:, :1] > 0, jnp.nan, 0.0) * jnp.ones((1, 2))
    hits = example_hits(scores, None, jnp.asarray([[1], [0], [0]]), jnp.zeros(3, jnp.int32),
                        jnp.asarray([True, True, False]), batch_size=2)
    assert hits.tolist() == [False, True, False]  # nan scores, class 0 by argmax, padding
    masked = lambda params, x: jnp.where(jnp.arange(2) == 1, -jnp.inf, 0.0) * jnp.ones((1, 2))
    assert example_hits(masked, None, jnp.asarray([[1]]), jnp.zeros(1, jnp.int32),
                        jnp.asarray([True]), batch_size=1).tolist() == [True]  # -inf: ruled out
    nothing = lambda params, x: jnp.full((x.shape[0], 2), -jnp.inf)
    assert example_hits(nothing, None, jnp.asarray([[1], [1]]), jnp.asarray([0, 1]),
                        jnp.asarray([True, True]), batch_size=2).tolist() == [False, False]


def test_cli_train_and_errors(tmp_path, capsys):
    args = ["train", "--synthetic-clients", "2", "--synthetic-train", "12", "--synthetic-test",
            "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3", "--mlp-hidden", "4",
            "--batch-size", "4", "--local-epochs", "1",  # TINY's sizes
            "--rounds", "1", "--out", str(tmp_path / "c"), "--algorithm", "lg_fedavg",
            "--ap-evals", "1", "--ap-steps", "1", "--furl-dim", "2", "--embedding-lr", "0.01"]
    assert cli.main(args) == 0
    assert "| Avg | | | n/a |" in capsys.readouterr().out
    assert cli.main(args) == 1
    assert "already holds a run" in capsys.readouterr().err
    assert cli.main(["train", "--scene", "fdu", "--out", str(tmp_path / "x")]) == 1
    assert "--data-dir" in capsys.readouterr().err
    for flags in (["--data-dir", str(tmp_path)], ["--dev-holdout"]):  # not silently ignored
        assert cli.main(["train", *flags, "--out", str(tmp_path / "x")]) == 1
        assert capsys.readouterr().err.strip() == (
            f"fedjax-sc: error: {flags[0]} applies to --scene fdu and iyy; the synthetic "
            f"scene makes its reviews")
    assert not (tmp_path / "x").exists()


def test_ctrl_c_ends_with_one_line_naming_the_saved_round_and_exit_130(tmp_path, capsys,
                                                                       monkeypatch):
    from fedjax_sc.run import train as train_module
    out = tmp_path / "run"

    def interrupted(config, log=print):
        (out / "checkpoints" / "3").mkdir(parents=True)  # rounds 1-3 finished
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "train", interrupted)
    assert cli.main(["train", "--out", str(out)]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted; round 3 is saved" in err[0] and "--resume" in err[0]


@pytest.mark.real_data
def test_one_round_on_two_real_fdu_domains(fdu_dir, tmp_path):
    report = train(TrainConfig(scene="fdu", data_dir=str(fdu_dir), domains=("MR", "apparel"),
                               rounds=1, max_len=40,
                               vocab_size=3000, embed_dim=16, hidden=8, mlp_hidden=16,
                               batch_size=64, lr=0.05, ap_evals=2, ap_steps=2,
                               out=str(tmp_path / "fdu")), log=_quiet)
    assert [c["client"] for c in report["clients"]] == ["MR", "apparel"]
    assert [c["N"] for c in report["clients"]] == [1600, 1600]
    assert [c["M"] for c in report["clients"]] == [400, 400]
    assert 0.0 <= report["Ag"] <= 1.0
    chex.assert_tree_all_finite(report["params"])
    assert jax.tree.leaves(report["params"])[0].shape[0] > 0


def test_every_algorithm_option_reaches_the_builder_from_the_config():
    """Each option of the registry is passed from ``TrainConfig`` to ``build_algorithm`` (an
    option left out would silently run with its default whatever the flag says)."""
    from fedjax_sc.data.scenes import synthetic_scene
    from fedjax_sc.run import registry
    from fedjax_sc.run.setup import algorithm_options
    c = TrainConfig(scene="synthetic", algorithm="kteps").resolved()
    passed = set(algorithm_options(c, synthetic_scene(num_clients=2)))
    assert set(registry.OPTIONS) <= passed, sorted(set(registry.OPTIONS) - passed)


def test_an_algorithms_own_state_is_checkpointed_and_resumed_exactly(tmp_path):
    """FedDyn's client and server state through the run: 2 of 3 clients a round (the third
    keeps its state while it sits out), cut after round 1 and resumed, ends as the
    uninterrupted run."""
    cfg = dict(TINY, algorithm="feddyn", synthetic_clients=3, clients_per_round=2, ap=False)
    # the Ap phase fine-tunes with the algorithm's own loss, which reads the states
    full = train(TrainConfig(**{**cfg, "ap": True}, rounds=3, out=str(tmp_path / "full")),
                 log=_quiet)
    assert full["Ap"] is not None
    train(TrainConfig(**cfg, rounds=1, out=str(tmp_path / "cut")), log=_quiet)
    resumed = train(TrainConfig(**cfg, rounds=3, out=str(tmp_path / "cut"), resume=True),
                    log=_quiet)
    chex.assert_trees_all_equal(full["params"], resumed["params"])
    # FedDyn's h on the server and its gradient memory on every client, the one that sat out
    # the last round included
    assert jax.tree.leaves(full["server_state"]) and jax.tree.leaves(full["client_state"])
    chex.assert_trees_all_equal(full["server_state"], resumed["server_state"])
    chex.assert_trees_all_equal(full["client_state"], resumed["client_state"])
    assert "dynamic" in _rows(tmp_path / "full/metrics.jsonl")[0]["aux"]


def test_a_kept_client_optimizer_state_is_chained_checkpointed_and_resumed(tmp_path):
    """--client-optimizer-state kept on SCAFFOLD: its c_i and each client's momentum side by
    side (named_chain), 2 of 3 clients a round, cut after round 1 and resumed exactly; a
    centrally trained baseline and FedFusion's local copies refuse it."""
    from fedjax_sc.run import registry
    cfg = dict(TINY, algorithm="scaffold", synthetic_clients=3, clients_per_round=2, ap=False,
               client_optimizer_state="kept")
    full = train(TrainConfig(**cfg, rounds=3, out=str(tmp_path / "full")), log=_quiet)
    train(TrainConfig(**cfg, rounds=1, out=str(tmp_path / "cut")), log=_quiet)
    resumed = train(TrainConfig(**cfg, rounds=3, out=str(tmp_path / "cut"), resume=True),
                    log=_quiet)
    chex.assert_trees_all_equal(full["params"], resumed["params"])
    chex.assert_trees_all_equal(full["client_state"], resumed["client_state"])
    assert set(full["client_state"]) == {"scaffold", "optimizer"}
    fresh = train(TrainConfig(**{**cfg, "client_optimizer_state": "fresh"}, rounds=3,
                              out=str(tmp_path / "fresh")), log=_quiet)
    assert not np.allclose(fresh["params"]["classifier"]["output"]["kernel"],
                           full["params"]["classifier"]["output"]["kernel"])
    sizes = dict(vocab_size=20, num_classes=2, embed_dim=4, hidden=2, mlp_hidden=3,
                 num_clients=2, client_optimizer_state="kept")
    with pytest.raises(ValueError, match="trained centrally"):
        registry.build_algorithm("asp", **sizes)
    with pytest.raises(ValueError, match="local copies"):
        registry.build_algorithm("fedfusion", **sizes)


def test_the_cli_uploads_as_the_library_builds_on_a_corpus_of_ones_own():
    """``fsc.kteps(model)`` and ``fedjax-sc train --algorithm kteps`` (synthetic, table):
    the same upload, the shared leaves as they are."""
    from fedjax_sc.models.text_classifier import init_params
    from fedjax_sc.run import registry
    c = TrainConfig(**TINY, algorithm="kteps").resolved()
    alg = registry.build_algorithm("kteps", vocab_size=20, num_classes=2, embed_dim=4,
                                   hidden=2, mlp_hidden=3, upload_noise=c.upload_noise)
    params = init_params(alg.model, jax.random.key(0))
    sent, _ = alg.upload.encode(params, alg.upload.init(params), jax.random.key(1), None)
    chex.assert_trees_all_equal(sent, params)


def test_every_flag_defaults_to_the_configuration_and_every_field_has_a_flag():
    """The CLI and the library give the same run for the same settings: ``fedjax-sc train``
    with no option parses to TrainConfig's defaults (each written once, in TrainConfig or the
    builder it reads), and every field but the table scene's class names is a flag."""
    import dataclasses

    from fedjax_sc.run import cli, registry

    parsed = vars(cli._parser().parse_args(["train"]))
    fields = {f.name: f.default if f.default_factory is dataclasses.MISSING
              else f.default_factory() for f in dataclasses.fields(TrainConfig)}
    assert {registry.config_field(o) for o in registry.OPTIONS} <= set(fields)
    assert {k: v for k, v in parsed.items() if k in fields and v != fields[k]} == {}
    assert sorted(k for k in fields if k not in parsed) == ["label_names"]


def test_an_lr_schedule_scales_each_round_and_resumes_exactly(fedavg_run, tmp_path, capsys):
    """``step:1:0.5`` halves the client LR every round (recorded per round in metrics.jsonl);
    round 1 trains as the constant run; the schedule follows the round index, so a resumed
    run ends with the uninterrupted one's parameters; the Ap phase uses mu * the initial
    LR."""
    full_dir, _ = fedavg_run
    sched = dict(TINY, lr_schedule="step:1:0.5")
    whole = train(TrainConfig(**sched, rounds=3, out=str(tmp_path / "whole")), log=_quiet)
    rows, const = _rows(tmp_path / "whole/metrics.jsonl"), _rows(full_dir / "metrics.jsonl")
    lr = TrainConfig(**TINY).resolved().lr
    assert [r["lr"] for r in rows] == pytest.approx([lr, lr / 2, lr / 4])
    assert rows[0]["train_loss"] == pytest.approx(const[0]["train_loss"], rel=1e-5)
    assert rows[2]["train_loss"] != pytest.approx(const[2]["train_loss"], rel=1e-5)
    assert "lr" not in const[0]  # a constant run's rows as before
    train(TrainConfig(**sched, rounds=1, out=str(tmp_path / "cut"), ap=False), log=_quiet)
    resumed = train(TrainConfig(**sched, rounds=3, out=str(tmp_path / "cut"), resume=True),
                    log=_quiet)
    chex.assert_trees_all_equal(whole["params"], resumed["params"])
    assert resumed["Ap"] == whole["Ap"]
    cosine = dict(TINY, lr_schedule="cosine", ap=False)  # its decay spreads over --rounds
    train(TrainConfig(**cosine, rounds=1, out=str(tmp_path / "cos")), log=_quiet)
    with pytest.raises(ValueError, match=r"'rounds': \(1, 3\)\}; --lr-schedule cosine decays "
                       r"over --rounds"):
        train(TrainConfig(**cosine, rounds=3, out=str(tmp_path / "cos"), resume=True),
              log=_quiet)
    for bad, says in (("step:0:0.5", "EVERY"), ("exponential:0", "FACTOR"), ("linear", "cosine")):
        assert cli.main(["train", "--scene", "synthetic", "--lr-schedule", bad, "--out",
                         str(tmp_path / "bad")]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--lr-schedule" in err[0] and says in err[0]


def test_gru_init_reaches_every_model_from_the_flag():
    """``--gru-init`` sets the BiGRU's initialisation of the built-in models and of a user's
    ``context.text_classifier()``; the default is the one every committed run used."""
    from fedjax_sc.run import cli, registry
    from fedjax_sc.run.options import default
    assert default("gru_init") == "semi_orthogonal"
    args = vars(cli._parser().parse_args(["train", "--gru-init", "flax"]))
    assert args["gru_init"] == "flax"
    for name in ("fedavg", "kteps", "fedfusion", "asp", "fedrod"):
        alg = registry.build_algorithm(name, vocab_size=20, num_classes=2, embed_dim=4,
                                       num_clients=2, gru_init="pytorch")
        assert getattr(alg.model, "base", alg.model).gru_init == "pytorch", name
    example = Path(__file__).resolve().parents[2] / "examples" / "qffl.py"
    own = registry.build_algorithm(
        f"{example}:qffl", vocab_size=20, num_classes=2, embed_dim=4, gru_init="flax")
    assert own.model.gru_init == "flax"
