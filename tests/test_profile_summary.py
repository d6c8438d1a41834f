"""benchmarks/profile_round.py's reading of a profiler trace, on hand-made traces (the GPU's
layout cannot be produced on the CPU that runs the suite)."""

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "profile_round", Path(__file__).parents[1] / "benchmarks" / "profile_round.py")
profile_round = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(profile_round)


def _meta(pid, name, tid=None):
    kind = "process_name" if tid is None else "thread_name"
    return {"ph": "M", "pid": pid, **({} if tid is None else {"tid": tid}), "name": kind,
            "args": {"name": name}}


def _x(pid, tid, name, ts, dur, **args):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur,
            **({"args": args} if args else {})}


def test_gpu_trace_reads_the_stream_kernels_once_by_hlo_op():
    trace = {"traceEvents": [
        _meta(1, "/host:CPU"), _meta(1, "python", 10), _x(1, 10, "PjitFunction", 0, 100),
        _meta(2, "/device:GPU:0"), _meta(2, "XLA Modules", 20), _meta(2, "XLA Ops", 21),
        _meta(2, "Stream #7(Compute)", 22),
        _x(2, 20, "jit_round", 0, 100),                        # the module: not an op
        _x(2, 21, "fusion.3", 0, 30), _x(2, 21, "gemm.1", 50, 20),  # op spans: duplicates
        _x(2, 22, "loop_fusion_kernel", 0, 30, hlo_op="fusion.3"),
        _x(2, 22, "sm90_gemm", 50, 10, hlo_op="gemm.1"),
        _x(2, 22, "sm90_gemm", 60, 10, hlo_op="gemm.1")]}
    s = profile_round.summarise(trace)
    assert s["where"] == "/device:GPU:0" and s["events"] == 3
    assert s["busy_ms"] == pytest.approx(0.05)
    assert [(o["name"], o["count"], o["share"]) for o in s["ops"]] == [
        ("fusion.3", 1, pytest.approx(0.6)), ("gemm.1", 2, pytest.approx(0.4))]


def test_cpu_trace_keeps_the_innermost_events_of_the_xla_threads():
    trace = {"traceEvents": [
        _meta(1, "/host:CPU"), _meta(1, "python", 10), _meta(1, "tf_XLAEigen/1", 11),
        _x(1, 10, "PjitFunction", 0, 100),
        _x(1, 11, "while.5", 0, 50),                 # holds the two below
        _x(1, 11, "dot.1", 5, 10), _x(1, 11, "add_fusion", 20, 10),
        _x(1, 11, "ThreadpoolListener::Record", 40, 5),  # bookkeeping, left out
        _x(1, 11, "copy.2", 60, 20)]}
    s = profile_round.summarise(trace, top=2)
    assert s["where"] == "host XLA threads" and s["events"] == 3
    assert s["busy_ms"] == pytest.approx(0.04)
    assert [o["name"] for o in s["ops"]] == ["copy.2", "dot.1"]  # top 2 by total time
