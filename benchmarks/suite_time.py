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
    python benchmarks/suite_time.py tests/run --against HEAD~3 --repeat 2  # a change's gain

``--against REV`` times the workers' run in a ``git worktree`` of REV (its own code and
tests, imported from there) and in this tree, alternately (``--repeat`` times each), and prints
the ratio of the two means: a change measured in one sitting, whatever else the machine does.

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


def timed_run(paths: list[str], xdist: list[str], profile: bool = False, tests: int = 0,
              root: Path = ROOT) -> tuple[float, int, str]:
    """(wall seconds, exit status, pytest's last line) of one cold run of ``paths`` in the
    checkout ``root`` (its package imported first); with ``profile``, also prints JAX's
    seconds per test file (:func:`print_profile`)."""
    with tempfile.TemporaryDirectory(prefix="jax-cache-") as cache:
        env = dict(os.environ, FEDJAX_SC_TEST_JAX_CACHE=cache, PYTHONPATH=os.pathsep.join(
            [str(root), os.environ.get("PYTHONPATH", "")]))
        plugin = []
        if profile:
            env.update(FEDJAX_SC_COMPILE_PROFILE=cache, PYTHONPATH=os.pathsep.join(
                [str(ROOT / "benchmarks"), env["PYTHONPATH"]]))
            plugin = ["-p", "compile_profile"]
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *plugin, *xdist, *paths], cwd=root, env=env, capture_output=True,
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
    print(f"{'test file':<48} {'wall':>7} {'compile':>8} {'lower':>7} {'trace':>7} "
          f"{'again':>7} {'hits':>5}  (s)")
    for name, s in rows:
        print(name if not s else f"{name:<48} {s['wall']:7.1f} {s['compile']:8.1f} "
              f"{s['lower']:7.1f} {s['trace']:7.1f} {s['again']:7.1f} {s['hits#n']:5d}")
    programs = sorted(((k[len("program "):], v, total[k + "#n"]) for k, v in total.items()
                       if k.startswith("program ") and not k.endswith("#n")),
                      key=lambda x: -x[1])
    print(f"programs compiled afresh, by XLA compile seconds ({len(programs)} names):")
    for name, seconds, count in programs[:top]:
        print(f"  {name:<46} {seconds:7.1f} s in {count} programs")


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
    parser.add_argument("--against", metavar="REV", help="time the workers' run in a git "
                        "worktree of REV too, alternately with this tree, and print the ratio")
    parser.add_argument("--repeat", type=int, default=1, help="with --against: runs of each")
    args = parser.parse_args(argv)
    if args.against:
        return compare(args)
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


def compare(args: argparse.Namespace) -> int:
    """``--against``: the workers' run in REV's worktree and in this tree, alternately."""
    xdist = ["-n", str(args.workers), "--dist", "loadfile"]
    seconds: dict[str, list[float]] = {args.against: [], "this tree": []}
    failed = False
    with tempfile.TemporaryDirectory(prefix="suite-time-") as folder:
        before = Path(folder) / "before"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(before), args.against],
                       cwd=ROOT, check=True)
        # byte-compiled beforehand, as this tree is: not part of either run's time
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(before / "fedjax_sc"),
                        str(before / "tests")], check=True)
        try:
            for _ in range(args.repeat):
                for name, root in ((args.against, before), ("this tree", ROOT)):
                    t, code, last = timed_run(args.paths, xdist, root=root)
                    failed |= code != 0
                    seconds[name].append(t)
                    print(f"{name:>12}: {t:7.1f} s wall, cold cache | {last}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT)
    old, new = (sum(v) / len(v) for v in seconds.values())
    print(f"this tree / {args.against}: x{new / old:.2f} ({old:.1f} s -> {new:.1f} s, mean of "
          f"{args.repeat}; {' '.join(args.paths)}; {args.workers} workers)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
