"""The cross-device options of a run: ``--padding`` (checked in one line, recorded in
config.json, free to change on resume) and the synthetic scene with Zipf-distributed client
sizes (``--synthetic-zipf``)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fedjax_sc.data.partition import zipf_sizes
from fedjax_sc.run import cli, cross_device
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.config_file import config_diff
from fedjax_sc.run.loading import load_scene

SMALL = ["--rounds", "1", "--max-len", "6", "--vocab-size", "40", "--embed-dim", "6",
         "--hidden", "3", "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1",
         "--no-ap"]


def test_zipf_sizes_of_the_synthetic_scene_and_its_padding():
    """Training sizes of ``zipf_sizes`` seeded by --partition-seed and clipped to
    --synthetic-train; every client keeps --synthetic-test test rows, so the scene is not
    cross-device and ``auto`` pads it as the whole scene (``global``)."""
    kw = dict(scene="synthetic", synthetic_clients=40, synthetic_zipf=1.8, synthetic_train=16,
              synthetic_test=1, max_len=8)
    for seed in (0, 3):
        scene = load_scene(TrainConfig(**kw, partition_seed=seed).resolved())
        assert scene.train.counts.tolist() == zipf_sizes(40, 1.8, seed=seed,
                                                         largest=16).tolist()
    assert scene.test.counts.tolist() == [1] * 40 and scene.unseen is None
    assert not cross_device.applies(scene)
    assert [cross_device.padding(scene, p) for p in cross_device.PADDINGS] == [
        "global", "bucket", "sampled", "global"]
    assert cross_device.padding(scene) == "global"
    plain = load_scene(TrainConfig(scene="synthetic", synthetic_clients=3, synthetic_train=10,
                                   synthetic_test=1, max_len=8).resolved())
    assert plain.train.counts.tolist() == [10, 8, 6]  # without it: the sizes as before


@pytest.mark.parametrize("kw, match", [
    (dict(padding="wide"), r"^--padding 'wide': choose from auto, bucket, sampled, global$"),
    (dict(synthetic_zipf=1.0), r"^--synthetic-zipf must be > 1, got 1.0$"),
    (dict(synthetic_zipf=2.0, partition="iid", num_clients=2), "the natural partition"),
    (dict(scene="iyy", data_dir=".", synthetic_zipf=2.0), "needs --scene synthetic"),
])
def test_bad_padding_and_zipf_are_refused(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kw).resolved()
    with pytest.raises(ValueError, match="--padding"):
        cross_device.padding(None, "wide")


def test_resume_may_change_the_padding_only():
    saved = lambda c: json.loads(json.dumps(dataclasses.asdict(c)))  # noqa: E731
    assert config_diff(saved(TrainConfig(padding="bucket")), TrainConfig()) == {}
    older = {k: v for k, v in saved(TrainConfig()).items() if k != "padding"}
    assert config_diff(older, TrainConfig(padding="sampled")) == {}
    assert config_diff(saved(TrainConfig(synthetic_zipf=2.0)), TrainConfig()) == {
        "synthetic_zipf": (2.0, None)}


def test_cli_zipf_run_records_padding_and_resumes_with_another(tmp_path, capsys, monkeypatch):
    chosen, real = [], cross_device.padding

    def spy(scene, choice="auto"):
        chosen.append(real(scene, choice))
        return chosen[-1]

    monkeypatch.setattr(cross_device, "padding", spy)
    out = tmp_path / "run"
    args = ["train", "--scene", "synthetic", "--synthetic-clients", "6", "--synthetic-zipf",
            "2", "--synthetic-train", "8", "--synthetic-test", "1", "--clients-per-round", "2",
            "--out", str(out), *SMALL]
    assert cli.main(args) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["padding"], config["synthetic_zipf"]) == ("auto", 2.0)
    assert cli.main([*args, "--rounds", "2", "--resume", "--padding", "bucket"]) == 0
    assert chosen == ["global", "bucket"]  # auto: not cross-device
    assert json.loads((out / "config.json").read_text())["padding"] == "bucket"
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows if r.get("phase", "round") == "round"] == [1, 2]
    assert all(r["padding_ratio"] >= 1 for r in rows if r.get("phase", "round") == "round")
    capsys.readouterr()
    assert cli.main(["train", "--padding", "wide", "--out", str(tmp_path / "x")]) == 1
    assert capsys.readouterr().err == ("fedjax-sc: error: --padding 'wide': choose from auto, "
                                       "bucket, sampled, global\n")
    assert not (tmp_path / "x").exists()
