"""A pytest plugin: per test, the seconds JAX spends tracing, lowering to MLIR and compiling
with XLA (its ``jax.monitoring`` duration events), and the test's wall seconds.

``benchmarks/suite_time.py --profile`` loads it (``-p compile_profile`` with this folder on
PYTHONPATH); each pytest process (an xdist worker, or the one process) writes
``<FEDJAX_SC_COMPILE_PROFILE>/<worker>.json``: ``{test id: {event: seconds, event#n: count,
"wall": seconds}}``. Events of subprocesses a test starts are not seen, only their wall time.
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


def _listen(event: str, seconds: float, **_) -> None:
    if event in EVENTS:
        _record[_current[0]][EVENTS[event]] += seconds
        _record[_current[0]][EVENTS[event] + "#n"] += 1


monitoring.register_event_duration_secs_listener(_listen)


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
