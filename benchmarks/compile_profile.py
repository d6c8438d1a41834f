"""A pytest plugin: per test, the seconds JAX spends tracing, lowering to MLIR and compiling
with XLA (its ``jax.monitoring`` duration events), and the test's wall seconds.

``benchmarks/suite_time.py --profile`` loads it (``-p compile_profile`` with this folder on
PYTHONPATH); each pytest process (an xdist worker, or the one process) writes
``<FEDJAX_SC_COMPILE_PROFILE>/<worker>.json``: ``{test id: {event: seconds, event#n: count,
"wall": seconds}}``. Events of subprocesses a test starts are not seen, only their wall time.

A program the persistent cache already held (compiled earlier by this process or another) adds
its tracing, lowering and cache read to ``again`` and counts in ``hits#n``: work a run repeats
for a program it has already built, the most an in-process reuse of programs could save. One
compiled afresh adds its compile seconds to ``program <name>`` (``program <name>#n``: how
many), ``<name>`` the jitted function's.
"""

from __future__ import annotations

import collections
import json
import os
import time
from pathlib import Path

import pytest
from jax import monitoring

EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "trace",
          "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
          "/jax/core/compile/backend_compile_duration": "compile"}
"""JAX's events (jax/_src/dispatch.py) and their short names; ``compile`` includes reading a
program from the persistent cache."""

_current: list[str] = ["<outside a test>"]
_record: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
_pending = {"seconds": 0.0, "hit": False}  # since the last compile: tracing + lowering, a hit


def _listen(event: str, seconds: float, fun_name: str = "?", **_) -> None:
    if event in EVENTS:
        _record[_current[0]][EVENTS[event]] += seconds
        _record[_current[0]][EVENTS[event] + "#n"] += 1
        _pending["seconds"] += seconds
        if EVENTS[event] == "compile":  # the end of one program's trace -> lower -> compile
            if _pending["hit"]:
                _record[_current[0]]["again"] += _pending["seconds"]
                _record[_current[0]]["hits#n"] += 1
            else:  # compiled here: which program, at what cost
                _record[_current[0]][f"program {fun_name}"] += seconds
                _record[_current[0]][f"program {fun_name}#n"] += 1
            _pending.update(seconds=0.0, hit=False)


def _hit(event: str, **_) -> None:
    if event == "/jax/compilation_cache/cache_hits":
        _pending["hit"] = True


monitoring.register_event_duration_secs_listener(_listen)
monitoring.register_event_listener(_hit)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0], start = item.nodeid, time.perf_counter()
    yield
    _record[item.nodeid]["wall"] += time.perf_counter() - start
    _current[0] = "<outside a test>"


def pytest_sessionfinish(session):
    folder = os.environ.get("FEDJAX_SC_COMPILE_PROFILE")
    if folder:
        name = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(folder, f"{name}.json").write_text(json.dumps(
            {k: dict(v) for k, v in _record.items()}))
