"""Lands the finished runs of ``examples/gpu_campaign.sh`` (its ``campaign.tar.gz``) in the CPU's
run stores, where ``fedjax-sc reproduce`` then counts them as finished cells and
``fedjax-sc results export`` copies them into ``results/`` like any other run.

    python examples/land_device_runs.py campaign.tar.gz ~/fedjax_runs \\
        --data-dir ../shared/data/fdu-mtl --word-vectors-are glove-6b-50d

A run lands at the same relative path (``reproduce-table8/fdu/arch_a_l1-0/seed-0``,
``beyond50/ditto``) when it finished (its ``report.json`` is there). A finished run at the
destination is kept and the device's skipped; an unfinished one (a CPU run in progress: stop
it first) is moved aside to ``<folder>.cpu-partial``, never deleted. ``--data-dir`` and
``--word-vectors-are`` rewrite the two settings in which the device's ``config.json`` differs
from the CPU's by path only: the corpus folder, and the carried word-vector file, which
``benchmarks/gpu_carry.sh`` writes from GloVe 6B 50d's rows (the same initial table as
``--embeddings glove-6b-50d``: every row equal). ``report.json`` keeps the device in its
``environment``. Prints one line per run.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path


def land(archive: Path, stores: Path, data_dir: str | None, vectors_as: str | None,
         log=print) -> int:
    """Returns the number of runs landed.

    Raises:
      FileNotFoundError: ``archive`` or ``stores`` is missing.
      ValueError: a run's config.json is not valid JSON (names the file).
    """
    if not archive.exists():
        raise FileNotFoundError(f"{archive}: no such archive")
    if not stores.is_dir():
        raise FileNotFoundError(f"{stores}: no such folder")
    landed = 0
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:  # the "data" filter: no links or paths outside
            safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # < 3.11.4
            tar.extractall(tmp, **safe)
        root = Path(tmp)
        for report in sorted(root.rglob("report.json")):
            run = report.parent
            rel = run.relative_to(root)
            dest = stores / rel
            if (dest / "report.json").exists():
                log(f"{rel}: kept the finished run already in {dest}")
                continue
            config_path = run / "config.json"
            try:
                config = json.loads(config_path.read_text())
            except json.JSONDecodeError as e:
                raise ValueError(f"{archive}:{rel}/config.json: not valid JSON ({e.msg})") \
                    from None
            if data_dir is not None:
                config["data_dir"] = data_dir
            if vectors_as is not None and config.get("embeddings") not in (None, "random",
                                                                            vectors_as):
                config["embeddings"] = vectors_as
            config_path.write_text(json.dumps(config, indent=2))
            if dest.exists():
                aside = dest.with_name(dest.name + ".cpu-partial")
                if aside.exists():
                    raise FileExistsError(f"{aside} exists: move it before landing {rel}")
                dest.rename(aside)
                log(f"{rel}: the unfinished run in {dest} moved to {aside}")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(run, dest)
            ag = json.loads(report.read_text()).get("Ag")
            log(f"{rel}: landed in {dest} (Ag {'n/a' if ag is None else f'{100 * ag:.1f}'})")
            landed += 1
    return landed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("archive", type=Path, help="campaign.tar.gz from the device")
    p.add_argument("stores", type=Path, help="the folder holding the CPU's run stores")
    p.add_argument("--data-dir", help="the corpus folder to record in each config.json")
    p.add_argument("--word-vectors-are", metavar="NAME",
                   help="record the carried word-vector file as this --embeddings value")
    a = p.parse_args()
    try:
        n = land(a.archive, a.stores, a.data_dir, a.word_vectors_are)
    except (OSError, ValueError) as e:
        print(f"land_device_runs: {e}", file=sys.stderr)
        return 1
    print(f"{n} run(s) landed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
