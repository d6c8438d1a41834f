"""Per-run round times of an ``examples/gpu_campaign.sh`` call whose jobs ran side by side
(``PARALLEL``), from the run folders it brought back (``campaign.tar.gz``, unpacked): the last
round each run reached and its median seconds and client-steps per second a round (rounds 3
on: compilation and the first evaluations apart), and the share of ``nvidia-smi dmon``
samples at each SM utilisation when the folder holds a ``dmon.txt``.

    python benchmarks/side_by_side.py results/accelerator/h200-2026-12-04
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from pathlib import Path

from fedjax_sc.run.rundir import read_metrics


def main(folder: Path) -> None:
    print("| run | last round | median s / round | median client-steps/s |")
    print("|---|---:|---:|---:|")
    for metrics in sorted(folder.rglob("metrics.jsonl")):
        rows = read_metrics(metrics, upto=sys.maxsize)
        if not rows:
            continue
        late = [r for r in rows if r["round"] >= 3] or rows
        print(f"| {metrics.parent.relative_to(folder)} | {rows[-1]['round']} "
              f"| {statistics.median(r['seconds'] for r in late):.1f} "
              f"| {statistics.median(r['client_steps_per_s'] for r in late):.1f} |")
    dmon = folder / "dmon.txt"
    if dmon.exists():
        sm = Counter(int(line.split()[1]) for line in dmon.read_text().splitlines()
                     if line.strip() and not line.startswith("#"))
        print(f"\nSM utilisation (nvidia-smi dmon, {sum(sm.values())} samples): "
              + ", ".join(f"{k} %: {v}" for k, v in sorted(sm.items())))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: side_by_side.py FOLDER (the unpacked files of a gpu_campaign.sh call)")
    main(Path(sys.argv[1]))
