"""Run tracking (``fedjax-sc train --tensorboard / --wandb``): the scalars of a metrics row, a
W&B offline run read back from its transaction log and compared with ``metrics.jsonl``,
``report.json`` and ``config.json``, and the one-line error without the package."""

import json
import struct
import sys
import types
import zlib
from pathlib import Path

import pytest

from fedjax_sc.run import cli
from fedjax_sc.run.plumbing import tracking

TINY = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12, synthetic_test=6,
            max_len=8, embed_dim=6, hidden=3, mlp_hidden=4, batch_size=4, local_epochs=1,
            ap_evals=2, ap_steps=2, rounds=2)


def _flags(cfg):
    return [x for k, v in cfg.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def read_wandb_log(path: Path) -> dict:
    """A W&B run's ``.wandb`` transaction log (LevelDB's log format: 32 KiB blocks of records,
    each a 7-byte header ``<crc32, length, type>`` and part of a ``wandb_internal_pb2.Record``;
    the file opens with ``:W&B``, 0xBEE1, version 0), checksums verified.

    Returns:
      ``{"run": the run record, "config": {key: value}, "history": [{key: value} per
      run.log], "summary": {key: value} (the updates merged)}``.
    """
    from wandb.proto import wandb_internal_pb2

    def items(entries):
        return {e.key or ".".join(e.nested_key): json.loads(e.value_json) for e in entries}

    data = path.read_bytes()
    assert struct.unpack("<4sHB", data[:7]) == (b":W&B", 0xBEE1, 0)
    block, pos, parts = 32768, 7, b""
    out = {"run": None, "config": {}, "history": [], "summary": {}}
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 0:
            continue
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"checksum at byte {pos}"
        parts += chunk
        if kind not in (1, 4):  # FIRST / MIDDLE of a record spanning blocks
            continue
        record, parts = wandb_internal_pb2.Record.FromString(parts), b""
        kind_of = record.WhichOneof("record_type")
        if kind_of == "run":
            out["run"] = record.run
            out["config"].update(items(record.run.config.update))
        elif kind_of == "config":
            out["config"].update(items(record.config.update))
        elif kind_of == "history":
            out["history"].append(items(record.history.item))
        elif kind_of == "summary":
            out["summary"].update(items(record.summary.update))
    return out


def offline_run(out: Path) -> dict:
    """The one offline W&B run in run folder ``out`` (:func:`read_wandb_log`)."""
    logs = sorted((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(logs) == 1, logs
    return read_wandb_log(logs[0])


@pytest.fixture
def wandb_env(tmp_path, monkeypatch):
    """W&B kept off the network and out of $HOME; WANDB_DIR points elsewhere (the run's files
    must still land in <out>/wandb). Returns that elsewhere."""
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    elsewhere = tmp_path / "wandb-home"
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR",
                 "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(elsewhere / name.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return elsewhere


def test_round_scalars_name_every_metric_once():
    row = {"round": 3, "Ag": 0.5, "train_loss": 0.7, "seconds": 1.5, "personal": {"sp": 0.6},
           "aux": {"kt": 0.1}, "communication": {"upload_sent_MB_mean": 2.0},
           "Ag_per_client": [0.4, None], "train_loss_per_client": [0.8, 0.6]}
    assert tracking.round_scalars(row, ["a", "b"]) == {
        "Ag": 0.5, "train_loss": 0.7, "seconds": 1.5, "personal/sp": 0.6, "aux/kt": 0.1,
        "upload_sent_MB_mean": 2.0, "Ag_per_client/a": 0.4, "train_loss_per_client/a": 0.8,
        "train_loss_per_client/b": 0.6}
    assert "Ag" not in tracking.round_scalars(dict(row, Ag=None), ["a", "b"])
    # a cross-device round's figures reach the trackers and the tidy CSV alike
    xdev = dict(row, Ag_pooled=0.55, Ag_unseen=None, Ag_coverage=0.5, padding_ratio=0.25,
                lr=0.005, participants=2)
    assert {k: v for k, v in tracking.round_scalars(xdev, ["a", "b"]).items()
            if k not in tracking.round_scalars(row, ["a", "b"])} == {
        "Ag_pooled": 0.55, "Ag_coverage": 0.5, "padding_ratio": 0.25, "lr": 0.005,
        "participants": 2}
    assert tracking.ap_scalars({"s": [0.1, 0.2], "sp": [0.3, 0.4]}) == [
        {"Ap_t/s": 0.1, "Ap_t/sp": 0.3}, {"Ap_t/s": 0.2, "Ap_t/sp": 0.4}]


def test_a_round_where_no_client_trained_has_no_train_loss(tmp_path):
    # every client dropped out (it happens under --client-dropout): no mean of the untrained
    # clients' zeros
    import csv

    import numpy as np

    from fedjax_sc.core.client import RoundMetrics
    from fedjax_sc.run import report
    from fedjax_sc.run.paper import tidy_csv
    zeros = np.zeros(2, np.float32)
    m = RoundMetrics(train_loss=zeros, train_accuracy=zeros, steps=np.zeros(2, np.int32),
                     finite=np.ones(2, bool), aux={"accuracy": zeros})
    row = report.round_row(1, m, np.asarray([0.5, 0.25]), None, "sp", 1.0, None, None, True)
    assert row["train_loss"] is None and row["aux"] == {"accuracy": None}
    assert row["participants"] == 0 and row["Ag"] == 0.375
    scalars = tracking.round_scalars(row, ["a", "b"])
    assert "train_loss" not in scalars and not [k for k in scalars if k.startswith("aux/")]
    assert scalars["participants"] == 0
    (tmp_path / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    tidy_csv.metrics_csv([tmp_path], tmp_path / "tidy.csv")
    with (tmp_path / "tidy.csv").open() as f:
        means = {r["metric"] for r in csv.DictReader(f) if r["client"] == "all"}
    assert "train_loss" not in means and "accuracy" not in means and "Ag" in means
    trained = m._replace(steps=np.asarray([2, 0], np.int32),
                         train_loss=np.asarray([0.7, 0.0], np.float32))
    assert report.round_row(1, trained, None, None, "sp", 1.0, None, None, True)[
        "train_loss"] == pytest.approx(0.7)  # the mean covers the clients that trained
    plain = report.round_row(1, trained, None, None, "sp", 1.0, None, None, False)
    assert plain["train_loss"] == pytest.approx(0.7) and "participants" not in plain  # a
    # client without training data (--allow-empty-clients) runs no step in a plain round too
    assert plain["train_loss_per_client"] == [pytest.approx(0.7), None]  # null, not 0
    assert plain["aux_per_client"] == {"accuracy": [0.0, None]}
    assert "train_loss_per_client/b" not in tracking.round_scalars(plain, ["a", "b"])
    small = trained._replace(aux={"term": np.asarray([3.14159e-5, 1.23456789], np.float32)},
                             steps=np.asarray([2, 3], np.int32))
    assert report.round_row(1, small, None, None, "sp", 1.0, None, None, True)[
        "aux_per_client"] == {"term": [3.14159e-05, 1.23457]}  # six significant digits


def test_wandb_offline_run_holds_the_metrics_config_and_report(tmp_path, wandb_env):
    run = tmp_path / "run"
    assert cli.main(["train", *_flags(dict(TINY, algorithm="kteps")), "--out", str(run),
                     "--wandb", "--wandb-mode", "offline", "--wandb-project", "tiny"]) == 0
    assert not list(wandb_env.rglob("*.wandb"))  # the run's files are in <out>/wandb only
    logged = offline_run(run)
    lines = _lines(run / "metrics.jsonl")
    rows = [r for r in lines if r["phase"] == "round"]
    config = json.loads((run / "config.json").read_text())
    report = json.loads((run / "report.json").read_text())
    assert (logged["run"].display_name, logged["run"].project) == ("run", "tiny")
    assert logged["run"].run_group == ""
    assert {k: v for k, v in logged["config"].items() if k != "_wandb"} == config

    per_round = [h for h in logged["history"] if "round" in h]
    assert [h["round"] for h in per_round] == [1, 2]
    for h, row in zip(per_round, rows):
        assert h["Ag"] == row["Ag"] and h["train_loss"] == row["train_loss"]
        assert h["Ag_per_client/d0"] == row["Ag_per_client"][0]
        assert h["aux/kt"] == row["aux"]["kt"] and h["personal/sp"] == row["personal"]["sp"]
        assert h["upload_sent_MB_mean"] == row["communication"]["upload_sent_MB_mean"]
        assert {k: v for k, v in h.items() if not k.startswith("_") and k != "round"} == \
            tracking.round_scalars(row, ["d0", "d1"])
    ap = [h for h in logged["history"] if "t" in h]
    assert [h["t"] for h in ap] == list(range(TINY["ap_evals"] + 1))
    assert [h["Ap_t/sp"] for h in ap] == [r["Ap_t"]["sp"] for r in lines if r["phase"] == "ap"]
    assert (logged["summary"]["Ag"], logged["summary"]["Ap"]) == (report["Ag"], report["Ap"])
    assert logged["summary"]["ap_mode"] == report["ap_mode"]


def test_population_members_get_their_own_wandb_runs(tmp_path, wandb_env):
    pop = tmp_path / "pop"
    assert cli.main(["train", *_flags(dict(TINY, ap_evals=1)), "--out", str(pop),
                     "--seeds", "0,1", "--wandb"]) == 0
    for member in ("seed-0", "seed-1"):
        logged = offline_run(pop / member)
        assert (logged["run"].display_name, logged["run"].run_group) == (member, "pop")
        assert logged["config"]["seed"] == int(member[-1])
        rows = [r for r in _lines(pop / member / "metrics.jsonl") if r["phase"] == "round"]
        assert [h["Ag"] for h in logged["history"] if "round" in h] == [r["Ag"] for r in rows]


@pytest.mark.parametrize("module, needs", [(None, "wandb>=0.19.10: pip install"),
                                           (types.SimpleNamespace(__version__="0.16.6"),
                                            "found 0.16.6")])
def test_wandb_without_its_package_is_one_line_before_training(tmp_path, monkeypatch, capsys,
                                                               module, needs):
    monkeypatch.setitem(sys.modules, "wandb", module)  # None: `import wandb` fails
    run = tmp_path / "run"
    assert cli.main(["train", *_flags(TINY), "--out", str(run), "--wandb"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and needs in err and "fedjax_sc[wandb]" in err, err
    assert not (run / "metrics.jsonl").exists() and not (run / "config.json").exists()


def test_one_tracker_writes_the_same_scalars_to_both_backends(tmp_path, wandb_env):
    pytest.importorskip("tensorboardX", reason="the tensorboard extra is not installed")
    event_accumulator = pytest.importorskip(
        "tensorboard.backend.event_processing.event_accumulator",
        reason="the tensorboard reader is not installed")
    run = tmp_path / "run"
    assert cli.main(["train", *_flags(dict(TINY, ap_evals=1)), "--out", str(run),
                     "--tensorboard", "--wandb"]) == 0
    events = event_accumulator.EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    logged = offline_run(run)
    tags = set(events.Tags()["scalars"])
    per_round = [h for h in logged["history"] if "round" in h]
    ap = [h for h in logged["history"] if "t" in h]
    assert tags == {k for h in per_round + ap for k in h
                    if not k.startswith("_") and k not in ("round", "t")}
    for tag in tags:  # TensorBoard holds float32s
        axis, rows = ("t", ap) if tag.startswith("Ap_t/") else ("round", per_round)
        assert {e.step: e.value for e in events.Scalars(tag)} == pytest.approx(
            {h[axis]: h[tag] for h in rows}, rel=1e-6)
