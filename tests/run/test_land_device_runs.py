"""examples/land_device_runs.py: a device's finished runs land in the CPU's stores with the
corpus and word-vector settings rewritten; a finished run there is kept, an unfinished one
moved aside, never deleted."""

import json
import runpy
import tarfile
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "examples" / "land_device_runs.py"


def _run(folder, embeddings, finished):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"embeddings": embeddings,
                                                    "data_dir": "carry/fdu-mtl"}))
    if finished:
        (folder / "report.json").write_text(json.dumps({"Ag": 0.8}))


def test_runs_land_with_their_paths_rewritten_and_nothing_is_lost(tmp_path):
    land = runpy.run_path(str(SCRIPT))["land"]
    device, stores = tmp_path / "device", tmp_path / "stores"
    for name, done in (("a", True), ("b", True), ("c", True), ("d", False)):
        _run(device / "reproduce-table8" / "fdu" / name / "seed-0", "carry/glove.txt", done)
    archive = tmp_path / "campaign.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(device, arcname=".")
    _run(stores / "reproduce-table8" / "fdu" / "a" / "seed-0", "glove-6b-50d", True)
    partial = stores / "reproduce-table8" / "fdu" / "b" / "seed-0"
    _run(partial, "glove-6b-50d", False)
    (partial / "metrics.jsonl").write_text("{}\n")
    lines = []
    assert land(archive, stores, "/data/fdu", "glove-6b-50d", lines.append) == 2
    fdu = stores / "reproduce-table8" / "fdu"
    kept = json.loads((fdu / "a" / "seed-0" / "config.json").read_text())
    assert kept["embeddings"] == "glove-6b-50d" and not list((fdu / "a").glob("*partial"))
    assert (fdu / "b" / "seed-0.cpu-partial" / "metrics.jsonl").exists()  # moved aside
    for name in ("b", "c"):
        config = json.loads((fdu / name / "seed-0" / "config.json").read_text())
        assert config == {"embeddings": "glove-6b-50d", "data_dir": "/data/fdu"}
    assert not (fdu / "d").exists()  # unfinished on the device: not landed
    assert sum("landed in" in line for line in lines) == 2
    with pytest.raises(FileNotFoundError, match="no such archive"):
        land(tmp_path / "missing.tar.gz", stores, None, None)
