"""Per-job round times of an ``examples/gpu_campaign.sh`` call, from its job logs: the last
round each job reached and its median seconds and client-steps per second a round (rounds 3
on: compilation and the first evaluations apart), and the share of ``nvidia-smi dmon``
samples at each SM utilisation.

    python benchmarks/side_by_side.py results/accelerator/h200-2026-12-04
"""

from __future__ import annotations

import re
import statistics
import sys
from collections import Counter
from pathlib import Path

ROUND = re.compile(r"round\s+(\d+)/(\d+) .*\|\s+([\d.]+) s \|\s+([\d.]+) client-steps/s")


def main(folder: Path) -> None:
    print("| job | last round | median s / round | median client-steps/s |")
    print("|---|---:|---:|---:|")
    for log in sorted(folder.glob("*.log")):
        rounds = [m for m in map(ROUND.search, log.read_text().splitlines()) if m]
        if not rounds:
            continue
        late = [m for m in rounds if int(m.group(1)) >= 3] or rounds
        print(f"| {log.stem} | {max(int(m.group(1)) for m in rounds)}/{rounds[0].group(2)} "
              f"| {statistics.median(float(m.group(3)) for m in late):.1f} "
              f"| {statistics.median(float(m.group(4)) for m in late):.1f} |")
    dmon = folder / "dmon.txt"
    if dmon.exists():
        sm = Counter(int(line.split()[1]) for line in dmon.read_text().splitlines()
                     if line.strip() and not line.startswith("#"))
        total = sum(sm.values())
        print(f"\nSM utilisation (nvidia-smi dmon, {total} samples): "
              + ", ".join(f"{k} %: {v}" for k, v in sorted(sm.items())))


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        sys.exit("usage: side_by_side.py FOLDER (a folder of gpu_campaign.sh job logs)")
    main(Path(sys.argv[1]))
