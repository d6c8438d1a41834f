"""examples/beyond_runs.sh: the settings of each run of results/fdu/beyond.md by its folder,
the one place that the CPU's lane (examples/fdu_queue.sh) and the device's campaign read."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def beyond_run(folder: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", '. examples/beyond_runs.sh && beyond_run "$1"', "-",
                           folder], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("folder, settings", [
    ("pfedme", "pfedme 0"),
    ("feddyn-seed2", "feddyn 2"),
    ("per_fedavg", "per_fedavg 0"),
    ("fedrep", "fedrep 0 --rep-head-steps 25"),
    ("fedrep-seed1", "fedrep 1 --rep-head-steps 25"),
    ("apfl-fixed-alpha", "apfl 0 --apfl-alpha-lr 0"),
])
def test_each_folder_gives_its_method_seed_and_departures(folder, settings):
    done = beyond_run(folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == settings


@pytest.mark.parametrize("folder", ["", "a/b", "../x", "-seed1"])
def test_a_name_that_is_no_folder_is_one_line_and_status_2(folder):
    done = beyond_run(folder)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.count("\n") == 1 and "not a run folder's name" in done.stderr


def test_the_cpu_lane_trains_each_folder_with_those_settings(tmp_path):
    """The beyond lane with ``echo`` for the command: what it would train, and how."""
    env = dict(os.environ, FEDJAX_SC="echo", OUT=str(tmp_path / "out"),
               RESULTS=str(tmp_path / "none"), FDU_DIR="/data",
               ONLY="beyond-fedrep beyond-scaffold-seed1 beyond-apfl-fixed-alpha")
    done = subprocess.run(["bash", "examples/fdu_queue.sh", "beyond"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    logs = {p.stem: p.read_text().split() for p in (tmp_path / "out/logs").glob("*.log")}
    out = str(tmp_path / "out/beyond50")
    common = ["train", "--scene", "fdu", "--data-dir", "/data", "--embeddings", "glove-6b-50d"]
    assert logs == {
        "beyond-fedrep": [*common, "--algorithm", "fedrep", "--seed", "0", "--out",
                          f"{out}/fedrep", "--rep-head-steps", "25"],
        "beyond-scaffold-seed1": [*common, "--algorithm", "scaffold", "--seed", "1", "--out",
                                  f"{out}/scaffold-seed1"],
        "beyond-apfl-fixed-alpha": [*common, "--algorithm", "apfl", "--seed", "0", "--out",
                                    f"{out}/apfl-fixed-alpha", "--apfl-alpha-lr", "0"]}
