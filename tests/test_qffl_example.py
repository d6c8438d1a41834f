"""examples/qffl.py: q-FedAvg written outside the package with its own settings. q = 0 is
FedAvg; the hooks follow the paper's formulas on one round by hand; and ``--grid q=0,1`` runs
it as a population from the CLI, its q = 0 member training as FedAvg does."""

import json
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fedjax_sc as fsc
from fedjax_sc.algorithms import context
from fedjax_sc.algorithms.base import Batch
from fedjax_sc.run import cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "qffl.py"
LR = 0.1


@pytest.fixture(scope="module")
def q_fedavg():
    return context.load(f"{EXAMPLE}:q_fedavg")


@pytest.mark.parametrize("sigma", [0.0, 0.05])
def test_q_zero_is_fedavg(q_fedavg, model, scene, rounds, sigma):
    """q = 0: w - sum p_k L (w - wbar_k) / sum p_k L = sum p_k wbar_k, FedAvg's mean; under
    upload noise too, Delta_k being built from the update as sent."""
    from fedjax_sc.algorithms.noise import gaussian_noise
    fedavg = fsc.fedavg(model, LR, 0.0)
    fedavg = fedavg._replace(upload=fsc.chain(fedavg.upload, gaussian_noise(sigma)))
    data = fsc.client_data(scene.train, local_vocab=True)
    two = lambda algorithm: rounds(algorithm, model, data, 2, scene.num_clients)[0].params
    chex.assert_trees_all_close(two(q_fedavg(fedavg, 0.0, 1 / LR)), two(fedavg), atol=1e-5)


def test_the_hooks_follow_the_formulas(q_fedavg, model):
    """q = 1, two clients moved by known constants s: Delta_k = F L s, h_k = ||L s||^2 + L F,
    and the server's w - sum p Delta / sum p h."""
    q, lip = 1.0, 1 / LR
    fedavg = fsc.fedavg(model, LR, 0.0)
    algorithm = q_fedavg(fedavg, q, lip)
    params = fsc.init_params(model, jax.random.key(0))
    rng = np.random.default_rng(0)
    batch = Batch(tokens=jnp.asarray(rng.integers(2, model.vocab_size, (6, 8)), jnp.int32),
                  labels=jnp.asarray(rng.integers(0, 2, 6), jnp.int32),
                  mask=jnp.array([True] * 5 + [False]))
    start = fsc.ClientStart(params=params, data=batch)
    moves = (0.01, -0.03)
    messages = [algorithm.hooks.client_end(fsc.ClientEnd(
        start, jax.tree.map(lambda x, s=s: x - s, params), jnp.int32(3)))[1] for s in moves]
    f = float(fedavg.client_loss(params, batch, jax.random.key(0), start)[0])
    n = sum(x.size for x in jax.tree.leaves(params))
    for m, s in zip(messages, moves):
        np.testing.assert_allclose(m["h"], n * (lip * s) ** 2 + lip * f, rtol=1e-5)
        chex.assert_trees_all_close(m["delta"], jax.tree.map(
            lambda x, s=s: jnp.full_like(x, f * lip * s), params), rtol=1e-4)  # w - (w - s)
    weights = jnp.array([0.25, 0.75])
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *messages)
    new, _ = algorithm.hooks.server_update(fsc.ServerInputs(
        params, params, (), stacked, weights, jnp.array([True, True]),
        lambda tree, w: jax.tree.map(lambda x: jnp.tensordot(w, x, 1), tree)))
    total = sum(w * f * lip * s for w, s in zip((0.25, 0.75), moves))
    h = sum(w * float(m["h"]) for w, m in zip((0.25, 0.75), messages))
    chex.assert_trees_all_close(new, jax.tree.map(lambda x: x - total / h, params),
                                rtol=1e-5, atol=1e-7)


def test_the_cli_varies_q_in_one_population(tmp_path):
    tiny = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "12",
            "--synthetic-test", "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3",
            "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--rounds", "2",
            "--no-ap", "--momentum", "0", "--lr", str(LR)]
    assert cli.main(["train", "--algorithm", f"{EXAMPLE}:qffl", *tiny, "--grid", "q=0,1",
                     "--out", str(tmp_path / "pop")]) == 0
    assert cli.main(["train", "--algorithm", "fedavg", *tiny, "--upload-noise", "0",
                     "--out", str(tmp_path / "fedavg")]) == 0

    def rounds(run, key):
        return [json.loads(line)[key] for line in (run / "metrics.jsonl").open()
                if json.loads(line).get("phase") == "round"]

    # the training loss, not only Ag (which moves in steps of 1/6 on 6 test reviews)
    for key in ("train_loss", "Ag"):
        assert rounds(tmp_path / "pop/q-0_seed-0", key) == pytest.approx(
            rounds(tmp_path / "fedavg", key), rel=1e-5)
    assert len(rounds(tmp_path / "pop/q-1_seed-0", "Ag")) == 2
    # only Delta_k (the model's size) and h_k (one float32) go up, not the model as well
    sent = lambda run: json.loads((run / "report.json").read_text())["communication"]
    qffl, fedavg = sent(tmp_path / "pop/q-1_seed-0"), sent(tmp_path / "fedavg")
    assert qffl["upload_sent_floats"] == [n + 1 for n in fedavg["upload_sent_floats"]]
    assert qffl["download_floats"] == fedavg["download_floats"]
