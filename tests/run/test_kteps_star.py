"""KTEPS* in the compiled round, communication accounting, the probe and the Table 7 grid."""

import dataclasses
import importlib.util
import json

import chex
import jax
import numpy as np
import pytest

from fedjax_sc.algorithms.compression import Compressed
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import default_band, kteps_star
from fedjax_sc.algorithms.masking import leaf_paths
from fedjax_sc.core import communication
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import synthetic_scene
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run import cli
from fedjax_sc.run.train import TrainConfig, train

D = 6


@pytest.fixture(scope="module")
def scene():
    return synthetic_scene(num_clients=3, train_per_client=12, test_per_client=4, max_len=8,
                           seed=5)


@pytest.fixture(scope="module")
def model(scene):
    return PrivateSharedClassifier(vocab_size=len(scene.vocab), embed_dim=D, hidden=3,
                                   mlp_hidden=4, projection=True)


def _run(alg, model, scene, rounds=2):
    state, clients = rnd.init_states(alg, init_params(model, jax.random.key(0)),
                                     scene.num_clients)
    step = rnd.make_round_step(alg, batch_size=4, local_epochs=1)
    data = client_data(scene.train, local_vocab=True)
    for _ in range(rounds):
        state, clients, metrics = step(state, clients, data, jax.random.key(1))
    return state, clients, metrics


def test_full_band_without_noise_is_kteps(scene, model):
    # (the dense-table path of the same transform is covered by the compression unit tests)
    ref = _run(kteps(model, 0.1), model, scene)
    star = _run(kteps_star(model, d1=1, d2=D, sigma=0.0, learning_rate=0.1), model, scene)
    chex.assert_trees_all_close(star[0].params, ref[0].params, atol=2e-5)
    chex.assert_trees_all_close(star[1].private, ref[1].private, atol=2e-5)
    np.testing.assert_allclose(star[2].aux["energy_kept"], 1.0, rtol=1e-5)


def test_compressed_round_keeps_rows_outside_every_local_vocabulary(scene, model):
    alg = kteps_star(model, d1=2, d2=4, sigma=0.01, learning_rate=0.1)
    before = rnd.init_states(alg, init_params(model, jax.random.key(0)), scene.num_clients)[0]
    state, _, metrics = _run(alg, model, scene, rounds=1)
    data = client_data(scene.train, local_vocab=True)
    used = np.zeros(len(scene.vocab), bool)
    used[np.asarray(data.vocab_ids)[np.asarray(rnd.row_masks(data))]] = True
    table, old = (np.asarray(s.params["embedding"]["embedding"]) for s in (state, before))
    np.testing.assert_array_equal(table[~used], old[~used])
    assert not np.allclose(table[used], old[used])
    assert np.all((np.asarray(metrics.aux["energy_kept"]) > 0)
                  & (np.asarray(metrics.aux["energy_kept"]) < 1))


def test_the_message_holds_no_private_leaf_and_a_compressed_table(scene, model):
    alg = kteps_star(model, d1=2, d2=4, learning_rate=0.1)
    state, clients = rnd.init_states(alg, init_params(model, jax.random.key(0)),
                                     scene.num_clients)
    parts = rnd.build_round_parts(alg, batch_size=4, local_epochs=1)
    data = client_data(scene.train, local_vocab=True)
    messages, _, _ = jax.eval_shape(lambda: parts.encode(state, parts.local_training(
        state, clients, data, jax.random.key(1))[0], data, jax.random.key(1)))
    paths = leaf_paths(jax.tree.map(lambda x: x, messages, is_leaf=lambda x: isinstance(
        x, Compressed)))
    assert not any(p.startswith(("private_", "gate", "user")) for p in paths)
    assert isinstance(messages["embedding"]["embedding"], Compressed)


def test_communication_counts_follow_the_formula(scene, model):
    alg = kteps_star(model, d1=2, d2=4, learning_rate=0.1)
    state, _ = rnd.init_states(alg, init_params(model, jax.random.key(0)), scene.num_clients)
    data = client_data(scene.train, local_vocab=True)
    comm = communication.account(alg, state, data)
    rows = np.asarray(rnd.row_masks(data)).sum(1)
    table = state.params["embedding"]["embedding"]
    others = sum(x.size for x in jax.tree.leaves(state.params)) - table.size
    np.testing.assert_array_equal(comm.upload_dense_floats, rows * D + others)
    np.testing.assert_array_equal(comm.upload_sent_floats, (rows + D) * 3 + others)
    np.testing.assert_array_equal(comm.upload_sent_bytes, 4 * comm.upload_sent_floats)
    np.testing.assert_array_equal(comm.download_floats, comm.upload_dense_floats)
    np.testing.assert_array_equal(comm.row_id_bytes, 4 * rows)
    dense = communication.account(kteps(model), state, client_data(scene.train))
    np.testing.assert_array_equal(dense.upload_sent_floats,
                                  table.size + others)


def test_default_band_keeps_the_papers_proportions():
    assert default_band(200) == (2, 150) and default_band(50) == (2, 38)


def test_the_builder_without_a_band_uploads_the_default_band(scene, model):
    # kteps_star(model) compresses to default_band(d) = (2, 5) at d = 6, as the CLI does
    state, _ = rnd.init_states(kteps_star(model), init_params(model, jax.random.key(0)),
                               scene.num_clients)
    data = client_data(scene.train, local_vocab=True)
    count = lambda alg: communication.account(alg, state, data).upload_sent_floats
    assert default_band(D) == (2, 5)
    np.testing.assert_array_equal(count(kteps_star(model)), count(kteps_star(model, d1=2, d2=5)))
    assert not np.array_equal(count(kteps_star(model)), count(kteps_star(model, d1=1, d2=5)))


TINY = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12, synthetic_test=6,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            ap=False)


def test_train_probe_and_dp_report(tmp_path, capsys):
    out = tmp_path / "star"
    report = train(TrainConfig(**TINY, algorithm="kteps_star", rounds=1, out=str(out),
                               dp_clip=1.0, dp_noise=1.0), log=lambda _: None)
    assert tuple(json.loads((out / "config.json").read_text())["pca_band"]) == (2, 5)
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert 0 < row["aux"]["energy_kept"] < 1 and "dp_clipped_fraction" in row["aux"]
    assert row["communication"]["upload_sent_over_dense"] < 1
    assert report["dp"]["noise_multiplier"] == 1.0
    eps = report["dp"]["epsilon"]
    accountant = importlib.util.find_spec("dp_accounting") is not None  # the dp extra
    assert all(e > 0 for e in eps) if accountant else all(e is None for e in eps)
    words = json.loads((out / "vocab.json").read_text())
    first_token = synthetic_scene(num_clients=2, train_per_client=12, test_per_client=6,
                                  max_len=8).train.tokens[0][0][0]
    word = words[int(first_token)]  # occurs in client d0's training data
    assert cli.main(["probe", "--out", str(out), "--client", "d0", "--word", word,
                     "--band", "1", "6", "--band", "2", "3", "--top-k", "2", "4"]) == 0
    text = capsys.readouterr().out
    assert "| I_ser |" in text and "| Agg |" in text
    probe = json.loads((out / f"probe-d0-{word}.json").read_text())
    full, cut = probe["bands"]
    assert full["energy_kept"] == pytest.approx(1.0, rel=1e-5) and cut["energy_kept"] < 1
    assert all(0 <= v <= int(k) for b in probe["bands"] for k, v in b["I_ser"].items())
    assert cli.main(["probe", "--out", str(out), "--client", "d0", "--word", "zzz"]) == 1
    assert "does not occur" in capsys.readouterr().err


def test_table7_grid_runs_skips_and_compares_with_the_paper(tmp_path, capsys):
    # the settings of tests/run/test_train.py's kteps_star runs, band (2, 5) its default: the
    # grid's run is the store's kteps_star run (Tables 2, 3, 5, 6) and shares their compiled
    # programs
    args = ["reproduce", "table7", "--synthetic-clients", "2", "--synthetic-train", "12",
            "--synthetic-test", "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3",
            "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--furl-dim", "2",
            "--rounds", "1", "--no-ap", "--seeds", "1", "--no-plots", "--d1", "2",
            "--d2-fraction", "0.75", "--out", str(tmp_path / "grid")]
    assert cli.main(args) == 0
    first = capsys.readouterr().out
    run = tmp_path / "grid" / "synthetic" / "kteps_star" / "seed-0"
    assert (run / "report.json").exists()
    assert cli.main(args) == 0
    again = capsys.readouterr().out
    assert again.count("skipped") == 1 and "starting" not in again
    table = (tmp_path / "grid" / "synthetic" / "table7.md").read_text()
    assert "(85.7)" not in table  # synthetic scene: no paper figures
    assert "| d2 = 5 (0.75 d) |" in table and "starting" in first
    assert cli.main([*args[:-4], "--d1", "7", "--out", str(tmp_path / "g2")]) == 1
    assert "is empty" in capsys.readouterr().err


def test_the_dp_report_counts_the_most_local_steps_a_client_can_take():
    """epsilon is an upper bound over the steps a client can take: E ceil(N^k / B) a round,
    or --local-steps' N (or HI of LO:HI), whatever its data."""
    import types

    from fedjax_sc.run.report import dp_report
    scene = types.SimpleNamespace(counts=lambda split: np.asarray([12, 3, 0]))
    base = TrainConfig(**TINY, rounds=2, dp_clip=1.0, dp_noise=1.0)
    assert dp_report(base, scene)["steps"] == [6, 2, 0]  # 2 rounds x 1 epoch x ceil(N / 4)
    for steps, want in (("20", [40, 40, 0]), ("1:5", [10, 10, 0])):
        assert dp_report(dataclasses.replace(base, local_steps=steps), scene)["steps"] == want
