"""Wall time of the test suite from a cold compilation cache: one process, then the README's
test command's pytest-xdist workers (one test file per worker), measured in this one run.

CI runs the suite on a clean clone, so every XLA program is compiled at least once there; this
script gives each run a fresh, empty persistent cache (``FEDJAX_SC_TEST_JAX_CACHE``, read by
``tests/conftest.py``) so that neither reads what the other compiled. It prints, per run, the
wall seconds and pytest's last line, then the ratio of the two.

Usage::

    python benchmarks/suite_time.py                           # the whole suite (~30 min)
    python benchmarks/suite_time.py tests/core tests/algorithms --workers 2

Exit status: non-zero when a run's tests fail (the figures are still printed). Measure on an
otherwise idle machine: another busy process halves what the workers can use.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(paths: list[str], xdist: list[str]) -> tuple[float, int, str]:
    """(wall seconds, exit status, pytest's last line) of one cold run of ``paths``."""
    with tempfile.TemporaryDirectory(prefix="jax-cache-") as cache:
        env = dict(os.environ, FEDJAX_SC_TEST_JAX_CACHE=cache)
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *xdist, *paths], cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
    lines = [x for x in done.stdout.splitlines() if x.strip()]
    return seconds, done.returncode, lines[-1] if lines else done.stderr.strip()[-300:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=["tests"], help="test files or folders")
    parser.add_argument("--workers", type=int, default=2,
                        help="pytest-xdist workers of the second run (default 2: CI's cores)")
    args = parser.parse_args(argv)
    runs = {"one process": [],
            f"{args.workers} workers": ["-n", str(args.workers), "--dist", "loadfile"]}
    seconds, failed = {}, False
    for name, xdist in runs.items():
        seconds[name], code, last = timed_run(args.paths, xdist)
        failed |= code != 0
        print(f"{name:>12}: {seconds[name]:7.1f} s wall, cold cache | {last}", flush=True)
    one, many = seconds.values()
    print(f"speed-up of {args.workers} workers over one process: x{one / many:.2f} "
          f"({' '.join(args.paths)}; {os.cpu_count()} CPUs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
