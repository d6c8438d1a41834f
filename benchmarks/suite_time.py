"""Wall time of the test suite from a cold compilation cache: one process, then the README's
test command's pytest-xdist workers (one test file per worker), measured in this one run.

CI runs the suite on a clean clone, so every XLA program is compiled at least once there; this
script gives each run a fresh, empty persistent cache (``FEDJAX_SC_TEST_JAX_CACHE``, read by
``tests/conftest.py``) so that neither reads what the other compiled. It prints, per run, the
wall seconds and pytest's last line, then the ratio of the two.

Usage::

    python benchmarks/suite_time.py                           # the whole suite (~30 min)
    python benchmarks/suite_time.py tests/core tests/algorithms --workers 2
    python benchmarks/suite_time.py --profile --workers-only    # + JAX's seconds per file
    python benchmarks/suite_time.py --profile --tests 20 --workers-only   # + per test

Exit status: non-zero when a run's tests fail (the figures are still printed). Measure on an
otherwise idle machine: another busy process halves what the workers can use.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(paths: list[str], xdist: list[str], profile: bool = False, tests: int = 0
              ) -> tuple[float, int, str]:
    """(wall seconds, exit status, pytest's last line) of one cold run of ``paths``; with
    ``profile``, also prints JAX's seconds per test file (:func:`print_profile`)."""
    with tempfile.TemporaryDirectory(prefix="jax-cache-") as cache:
        env = dict(os.environ, FEDJAX_SC_TEST_JAX_CACHE=cache)
        plugin = []
        if profile:
            env.update(FEDJAX_SC_COMPILE_PROFILE=cache, PYTHONPATH=os.pathsep.join(
                [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH", "")]))
            plugin = ["-p", "compile_profile"]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *plugin, *xdist, *paths], cwd=ROOT, env=env, capture_output=True,
                              text=True)
        seconds = time.perf_counter() - start
        if profile:
            print_profile(Path(cache), tests=tests)
    lines = [x for x in done.stdout.splitlines() if x.strip()]
    return seconds, done.returncode, lines[-1] if lines else done.stderr.strip()[-300:]


def print_profile(folder: Path, top: int = 15, tests: int = 0) -> None:
    """The ``top`` test files by wall seconds, with JAX's tracing, lowering and compiling
    seconds (benchmarks/compile_profile.py's records in ``folder``), then the totals; then
    the ``tests`` slowest tests alone, the same figures."""
    files: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    each: dict[str, collections.Counter] = {}
    for record in folder.glob("*.json"):
        for test, seconds in json.loads(record.read_text()).items():
            files[test.split("::")[0]].update(seconds)
            each[test] = collections.Counter(seconds)
    total = sum(files.values(), collections.Counter())
    rows = [*sorted(files.items(), key=lambda x: -x[1]["wall"])[:top],
            ("all (worker seconds)", total)]
    if tests:
        rows += [("slowest tests:", collections.Counter()),
                 *sorted(each.items(), key=lambda x: -x[1]["wall"])[:tests]]
    print(f"{'test file':<48} {'wall':>7} {'compile':>8} {'lower':>7} {'trace':>7}  (s)")
    for name, s in rows:
        print(name if not s else f"{name:<48} {s['wall']:7.1f} {s['compile']:8.1f} "
              f"{s['lower']:7.1f} {s['trace']:7.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", default=["tests"], help="test files or folders")
    parser.add_argument("--workers", type=int, default=2,
                        help="pytest-xdist workers of the second run (default 2: CI's cores)")
    parser.add_argument("--workers-only", action="store_true",
                        help="skip the one-process run")
    parser.add_argument("--profile", action="store_true", help="print JAX's tracing, "
                        "lowering and compiling seconds per test file (compile_profile.py)")
    parser.add_argument("--tests", type=int, default=0, metavar="N", help="with --profile, "
                        "also the N slowest tests alone")
    args = parser.parse_args(argv)
    runs = {"one process": [],
            f"{args.workers} workers": ["-n", str(args.workers), "--dist", "loadfile"]}
    if args.workers_only:
        del runs["one process"]
    seconds, failed = {}, False
    for name, xdist in runs.items():
        seconds[name], code, last = timed_run(args.paths, xdist, args.profile, args.tests)
        failed |= code != 0
        print(f"{name:>12}: {seconds[name]:7.1f} s wall, cold cache | {last}", flush=True)
    if len(seconds) == 2:
        one, many = seconds.values()
        print(f"speed-up of {args.workers} workers over one process: x{one / many:.2f} "
              f"({' '.join(args.paths)}; {os.cpu_count()} CPUs)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
