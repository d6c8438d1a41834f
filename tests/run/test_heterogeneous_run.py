"""Heterogeneous clients from the command line: flags, metrics, exact resume, refusals."""

import csv
import json

import chex
import pytest

from fedjax_sc.run import cli
from fedjax_sc.run.paper import tidy_csv
from fedjax_sc.run.train import TrainConfig, train

TINY = dict(scene="synthetic", synthetic_clients=3, synthetic_train=12, synthetic_test=6,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            ap_evals=1, ap_steps=1)
HETERO = dict(local_steps="1:4", client_dropout=0.4, straggler_fraction=0.5,
              straggler_policy="drop", aggregation="fednova")


def _rounds(out):
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["phase"] == "round"]


def _quiet(_):
    pass


def test_a_heterogeneous_run_records_each_clients_work_and_resumes_exactly(tmp_path):
    full = train(TrainConfig(**TINY, **HETERO, rounds=3, out=str(tmp_path / "full")),
                 log=_quiet)
    rows = _rounds(tmp_path / "full")
    steps = [r["local_steps_per_client"] for r in rows]
    assert all(0 <= s <= 4 for row in steps for s in row)
    assert [r["participants"] for r in rows] == [sum(s > 0 for s in row) for row in steps]
    tidy_csv.metrics_csv([tmp_path / "full"], tmp_path / "m.csv")
    table = list(csv.DictReader((tmp_path / "m.csv").open()))
    assert [int(float(x["value"])) for x in table if x["metric"] == "participants"] == [
        r["participants"] for r in rows]
    assert [int(float(x["value"])) for x in table if x["metric"] == "local_steps"] == [
        s for row in steps for s in row]
    saved = json.loads((tmp_path / "full/config.json").read_text())
    assert {k: saved[k] for k in HETERO} == HETERO
    train(TrainConfig(**TINY, **HETERO, rounds=1, out=str(tmp_path / "cut"), ap=False),
          log=_quiet)
    resumed = train(TrainConfig(**TINY, **HETERO, rounds=3, out=str(tmp_path / "cut"),
                                resume=True), log=_quiet)
    chex.assert_trees_all_equal(full["params"], resumed["params"])
    assert [r["local_steps_per_client"] for r in _rounds(tmp_path / "cut")] == steps


def test_the_default_setting_is_the_plain_round(tmp_path):
    """Dropout 0, no stragglers, epochs and ``mean`` given explicitly: the run of the plain
    round, bit for bit, and no heterogeneity fields in its metrics."""
    plain = train(TrainConfig(**TINY, rounds=1, ap=False, out=str(tmp_path / "a")), log=_quiet)
    explicit = train(TrainConfig(**TINY, rounds=1, ap=False, out=str(tmp_path / "b"),
                                 client_dropout=0.0, straggler_fraction=0.0,
                                 aggregation="mean"), log=_quiet)
    chex.assert_trees_all_equal(plain["params"], explicit["params"])
    assert "participants" not in _rounds(tmp_path / "b")[0]


@pytest.mark.parametrize("flags, message", [
    (["--local-steps", "many"], "--local-steps 'many'"),
    (["--local-steps", "5:2"], "--local-steps 5:2"),
    (["--client-dropout", "1.5"], "--client-dropout must lie in"),
    (["--straggler-fraction", "-1"], "--straggler-fraction must lie in"),
    (["--algorithm", "fs", "--client-dropout", "0.2"], "fs is trained centrally"),
])
def test_bad_heterogeneity_flags_fail_before_training(tmp_path, capsys, flags, message):
    argv = ["train", "--synthetic-clients", "2", "--synthetic-train", "8", "--synthetic-test",
            "4", "--max-len", "6", "--rounds", "1", "--out", str(tmp_path / "run"), *flags]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run/metrics.jsonl").exists()
