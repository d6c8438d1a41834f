"""Where the time of one compiled federated round goes: a ``jax.profiler`` trace, summarised.

Compiles the round (FedAvg by default) at the paper's FDU shapes on synthetic tokens (as
``round_speed.py``), runs a warm-up round, then traces ``--rounds`` rounds with
``jax.profiler.trace(..., create_perfetto_trace=True)`` and reads the trace back: the device's
operations (GPU kernels, TPU ops; on the CPU, XLA's executor events) grouped by name, as a
table of the top ``--top`` by total time, with their share of the device's busy time, and the
device's busy time over the wall time of the traced rounds (low: the round is bound by launch
latency and the host, not by the arithmetic: the case of the GRU's 200 sequential steps).

Usage::

    python benchmarks/profile_round.py                         # d 200, 16 clients
    python benchmarks/profile_round.py --embed-dim 50 --json $OUT/profile_d50.json
    python benchmarks/profile_round.py --clients 2 --examples 8 --max-len 16 --embed-dim 8 \
        --hidden 4 --vocab 500 --local-vocab 50          # a quick look on the CPU

The raw trace stays in ``--trace-dir`` (open ``perfetto_trace.json.gz`` in ui.perfetto.dev,
or the ``.xplane.pb`` in TensorBoard's profiler).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import jax

from fedjax_sc.core.round import build_round, init_states
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run.registry import build_algorithm

HOST_WRAPPERS = ("ThreadpoolListener", "ThunkExecutor", "end: ")
"""Bookkeeping events of XLA's CPU executor threads, left out of the CPU's table."""


def device_events(trace: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The innermost complete (``ph == "X"``) events of the trace's device operations.

    Args:
      trace: a Chrome/Perfetto trace (``{"traceEvents": [...]}``) as ``jax.profiler`` writes.

    Returns:
      ``(where, events)``: where they ran and the events. On a device process
      (``/device:GPU:0`` ...), the kernels of its ``Stream`` threads where it has some (GPU),
      else of its ``XLA Ops`` thread (TPU), else of every thread; with no device process (the
      CPU backend), the threads named ``tf_XLA*`` less the executor's bookkeeping. Only
      events with no event of their thread inside them are kept (a ``while`` loop's span
      is its body's ops).
    """
    events = trace.get("traceEvents", [])
    meta = lambda kind: {(e["pid"], e.get("tid")): e["args"]["name"] for e in events
                         if e.get("ph") == "M" and e.get("name") == kind}
    procs = {pid: n for (pid, _), n in meta("process_name").items()}
    threads = meta("thread_name")
    devices = {pid for pid, n in procs.items() if n.startswith("/device:")}
    if devices:
        on = {k: n for k, n in threads.items() if k[0] in devices}
        keep = ({k for k, n in on.items() if n.startswith("Stream")}
                or {k for k, n in on.items() if n == "XLA Ops"} or None)
        where = ", ".join(sorted(procs[p] for p in devices))
        chosen = [e for e in events if e.get("ph") == "X" and e.get("pid") in devices
                  and (keep is None or (e["pid"], e.get("tid")) in keep)]
    else:
        keep = {k for k, n in threads.items() if n.startswith("tf_XLA")}
        where = "host XLA threads"
        chosen = [e for e in events if e.get("ph") == "X" and (e.get("pid"), e.get("tid"))
                  in keep and not e["name"].startswith(HOST_WRAPPERS)]
    return where, innermost(chosen)


def innermost(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events of ``events`` that contain no other event of their thread."""
    by_thread: dict[Any, list[dict[str, Any]]] = collections.defaultdict(list)
    for e in events:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for group in by_thread.values():
        group.sort(key=lambda e: (float(e["ts"]), -float(e.get("dur", 0))))
        stack: list[tuple[float, dict[str, Any], list[bool]]] = []
        for e in group:
            start = float(e["ts"])
            while stack and stack[-1][0] <= start:
                _, done, has_child = stack.pop()
                if not has_child[0]:
                    out.append(done)
            if stack:
                stack[-1][2][0] = True
            stack.append((start + float(e.get("dur", 0)), e, [False]))
        out += [e for _, e, has_child in stack if not has_child[0]]
    return out


def busy_us(events: list[dict[str, Any]]) -> float:
    """Microseconds during which at least one event runs (overlaps counted once)."""
    spans = sorted((float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in events)
    total, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def summarise(trace: dict[str, Any], top: int = 25) -> dict[str, Any]:
    """The device's operations of ``trace`` grouped by name (the HLO op where the event names
    one in ``args.hlo_op``, else the kernel's name).

    Returns:
      ``{"where", "events", "busy_ms", "ops": [{"name", "count", "total_ms", "mean_us",
      "share"}, ...]}``, ``ops`` sorted by total time, the first ``top``; ``share`` is the
      op's total over the sum of all ops' (overlapping kernels make the sum exceed
      ``busy_ms``).
    """
    where, events = device_events(trace)
    totals: dict[str, list[float]] = collections.defaultdict(list)
    for e in events:
        name = (e.get("args") or {}).get("hlo_op") or e["name"]
        totals[name].append(float(e.get("dur", 0)))
    everything = sum(sum(v) for v in totals.values()) or 1.0
    ops = sorted(({"name": n, "count": len(v), "total_ms": sum(v) / 1e3,
                   "mean_us": sum(v) / len(v), "share": sum(v) / everything}
                  for n, v in totals.items()), key=lambda o: -o["total_ms"])
    return {"where": where, "events": len(events), "busy_ms": busy_us(events) / 1e3,
            "ops": ops[:top]}


def read_trace(trace_dir: Path) -> dict[str, Any]:
    """The newest ``perfetto_trace.json.gz`` under ``trace_dir``.

    Raises:
      FileNotFoundError: the profiler wrote none there.
    """
    found = sorted(trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"{trace_dir}: no perfetto_trace.json.gz (profiler failed?)")
    with gzip.open(found[-1], "rt") as f:
        return json.load(f)


def main() -> None:
    from round_speed import add_shape_arguments, synthetic_arrays  # sibling script

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithm", default="fedavg")
    add_shape_arguments(p, examples=16)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--rounds", type=int, default=1, help="traced rounds after a warm-up")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--trace-dir", help="where the trace goes (default: a temporary folder)")
    p.add_argument("--json", help="also write the summary here")
    a = p.parse_args()

    device = jax.devices()[0]
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}); {a.algorithm}, "
          f"{a.clients} clients x {a.examples} examples, batch {a.batch}, L {a.max_len}, "
          f"d {a.embed_dim}, hidden {a.hidden}, V {a.vocab}, {a.dtype}")
    data = client_data(synthetic_arrays(a.clients, a.examples, a.max_len, a.vocab,
                                        a.local_vocab), local_vocab=True)
    algorithm = build_algorithm(a.algorithm, vocab_size=a.vocab, num_classes=2,
                                embed_dim=a.embed_dim, hidden=a.hidden,
                                mlp_hidden=a.mlp_hidden, dtype=a.dtype, num_clients=a.clients)
    state, clients = init_states(algorithm, init_params(algorithm.model, jax.random.key(0)),
                                 a.clients)
    step = jax.jit(build_round(algorithm, batch_size=a.batch, local_epochs=a.local_epochs),
                   donate_argnums=(0, 1))
    state, clients, m = step(state, clients, data, jax.random.key(1))  # compile + warm-up
    jax.block_until_ready(state)
    trace_dir = Path(a.trace_dir or tempfile.mkdtemp(prefix="profile_round-"))
    steps = 0
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        t = time.perf_counter()
        for r in range(a.rounds):
            state, clients, m = step(state, clients, data, jax.random.key(2 + r))
            steps += int(m.steps.sum())
        jax.block_until_ready(state)
        wall = time.perf_counter() - t
    s = summarise(read_trace(trace_dir), a.top)
    s.update(wall_ms=wall * 1e3, rounds=a.rounds, client_steps=steps, device=device.device_kind,
             platform=device.platform, jax=jax.__version__, settings=vars(a))
    print(f"traced {a.rounds} round(s): {wall * 1e3:.0f} ms wall, {steps} client-steps; "
          f"{s['events']} events on {s['where']}, busy {s['busy_ms']:.0f} ms "
          f"({s['busy_ms'] / (wall * 1e3):.0%} of the wall time)")
    print("\n| op | count | total ms | mean us | share |\n|---|---:|---:|---:|---:|")
    for o in s["ops"]:
        print(f"| `{o['name'][:80]}` | {o['count']} | {o['total_ms']:.1f} | "
              f"{o['mean_us']:.1f} | {o['share']:.1%} |")
    print(f"\ntrace: {trace_dir}")
    if a.json:
        Path(a.json).write_text(json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
