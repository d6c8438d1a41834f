"""Seconds per round and peak memory as the number of sampled clients M grows.

Prints, for each configuration, measured in a fresh subprocess (so that compile time and peak
memory belong to that configuration alone):

  * compile seconds (reported apart) and seconds per round (mean of the timed rounds, the host
    gather/scatter of data and private state included);
  * client-steps per second;
  * XLA's memory analysis of the compiled round (arguments + outputs + temporaries - donated
    buffers reused for outputs: the device memory the round needs), with the server and
    client states donated (as ``fedjax-sc train`` runs it) and without donation; the device's
    own peak when it reports one (GPU/TPU ``memory_stats``); the process's peak resident
    memory.

``--memory-gb G`` instead finds the largest number of clients per round whose compiled round
fits in G GiB: XLA's memory of the donated round is linear in M (the client axis), so two
compilations (M = 16, 64) give its slope and intercept, the solution is rounded down to a
multiple of the devices and checked by compiling it (and one device-multiple more).

Configurations:

  * synthetic: N = 1,024 clients at the paper's FDU shapes (L 200, d 200, hidden 64, V 50k,
    batch 8, 2 local epochs), ``--examples`` per client, M = 16, 64, 256 sampled per round
    (cost should grow linearly in M and not depend on N);
  * fdu (with ``--fdu-dir``): the 16 FDU domains pooled and split into 1,000 clients by
    ``dirichlet_label`` with alpha = 1 (FedNLP), 100 sampled per round.

Usage::

    python benchmarks/scale.py                                   # synthetic M = 16, 64, 256
    python benchmarks/scale.py --fdu-dir ../shared/data/fdu-mtl  # + the 1,000-client FDU scene
    python benchmarks/scale.py --sampled-list 16 64 --examples 8 --rounds 1   # a quick look
    python benchmarks/scale.py --memory-gb 16                    # largest M for 16 GiB
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

from fedjax_sc.core import sharding
from fedjax_sc.core.feed import ClientFeed
from fedjax_sc.core.round import ClientStates, build_round, init_states
from fedjax_sc.data.client_data import host_client_data
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run.registry import build_algorithm

sys.path.insert(0, str(Path(__file__).parent))
# the benchmark helper beside this file
from round_speed import add_shape_arguments, synthetic_arrays  # noqa: E402


def _xla_bytes(compiled) -> int | None:
    """The device memory XLA plans for a compiled program (donated inputs counted once)."""
    mem = compiled.memory_analysis()
    return None if mem is None else int(
        mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
        - mem.alias_size_in_bytes)


def compile_round(args, sampled: int, donate: bool = True):
    """The round of ``sampled`` synthetic clients, lowered and compiled (not run)."""
    arrays = synthetic_arrays(sampled, args.examples, args.max_len, args.vocab, args.local_vocab)
    host = host_client_data(arrays, local_vocab=True)
    algorithm = build_algorithm(args.algorithm, vocab_size=args.vocab, num_classes=2,
                                embed_dim=args.embed_dim, hidden=args.hidden,
                                mlp_hidden=args.mlp_hidden, dtype=args.dtype)
    state, clients = init_states(algorithm, init_params(algorithm.model, jax.random.key(0)),
                                 sampled)
    mesh = sharding.client_mesh()
    feed = ClientFeed(host, clients.private, mesh, None, seed=0)
    data, private = feed.inputs(feed.sample(1))
    fn = jax.jit(build_round(algorithm, batch_size=args.batch, local_epochs=args.local_epochs),
                 donate_argnums=(0, 1) if donate else ())
    return fn.lower(sharding.put_replicated(state, mesh), ClientStates(private), data,
                    jax.random.key(1)).compile()


def fit_memory(args) -> dict:
    """Largest M whose donated round fits in ``args.memory_gb`` GiB (see the docstring)."""
    budget = args.memory_gb * 2**30
    devices = len(jax.devices())
    probe = {m: _xla_bytes(compile_round(args, m)) for m in (16, 64)}
    if None in probe.values():
        return {"probe": probe, "max_sampled": None}
    slope = (probe[64] - probe[16]) / 48
    base = probe[16] - 16 * slope
    m = max(devices, int((budget - base) // slope) // devices * devices)
    checked = {m: _xla_bytes(compile_round(args, m)),
               m + devices: _xla_bytes(compile_round(args, m + devices))}
    while m > devices and checked[m] > budget:  # the linear fit was optimistic
        m -= devices
        checked[m] = _xla_bytes(compile_round(args, m))
    while checked[m + devices] <= budget:  # ... or pessimistic
        m += devices
        checked[m + devices] = _xla_bytes(compile_round(args, m + devices))
    return {"probe": probe, "bytes_per_client": slope, "fixed_bytes": base,
            "max_sampled": m, "checked": checked, "devices": devices}


def measure(args) -> dict:
    """One configuration in this process: build, compile, time ``args.rounds`` rounds."""
    t = time.perf_counter()
    if args.fdu_dir:
        from fedjax_sc.run.train import TrainConfig, load_scene
        c = TrainConfig(scene="fdu", data_dir=args.fdu_dir, partition="dirichlet_label",
                        num_clients=args.clients, alpha=args.alpha).resolved()
        scene = load_scene(c)
        arrays, vocab = scene.train, len(scene.vocab)
    else:
        arrays = synthetic_arrays(args.clients, args.examples, args.max_len, args.vocab,
                                  args.local_vocab)
        vocab = args.vocab
    host = host_client_data(arrays, local_vocab=True)
    setup_s = time.perf_counter() - t
    algorithm = build_algorithm(args.algorithm, vocab_size=vocab, num_classes=2,
                                embed_dim=args.embed_dim, hidden=args.hidden,
                                mlp_hidden=args.mlp_hidden, dtype=args.dtype)
    state, clients = init_states(algorithm, init_params(algorithm.model, jax.random.key(0)),
                                 host.num_clients)
    mesh = sharding.client_mesh()
    state = sharding.put_replicated(state, mesh)
    feed = ClientFeed(host, clients.private, mesh, args.sampled, seed=0)
    round_fn = build_round(algorithm, batch_size=args.batch, local_epochs=args.local_epochs)
    key = jax.random.key(1)
    data, private = feed.inputs(feed.sample(1))
    plain = jax.jit(round_fn).lower(state, ClientStates(private), data, key).compile()
    t = time.perf_counter()
    step = jax.jit(round_fn, donate_argnums=(0, 1)).lower(
        state, ClientStates(private), data, key).compile()
    compile_s = time.perf_counter() - t
    seconds, steps = [], 0
    for r in range(1, args.rounds + 2):  # round 1 is a warm-up
        t = time.perf_counter()
        idx = feed.sample(r)
        data, private = feed.inputs(idx)
        state, new, m = step(state, ClientStates(private), data, key)  # donates both states
        feed.update(idx, new.private)
        jax.block_until_ready(state.params)
        if r > 1:
            seconds.append(time.perf_counter() - t)
            steps += int(np.asarray(m.steps).sum())
    return {"clients": host.num_clients, "sampled": args.sampled,
            "max_examples": int(host.tokens.shape[1]), "local_vocab_width":
            int(host.vocab_ids.shape[1]), "setup_s": setup_s, "compile_s": compile_s,
            "round_s": float(np.mean(seconds)), "client_steps_per_s": steps / sum(seconds),
            "xla_round_bytes": _xla_bytes(step), "xla_round_bytes_no_donation": _xla_bytes(plain),
            "device_peak_bytes": (jax.devices()[0].memory_stats() or {}).get("peak_bytes_in_use"),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def run_child(args, **overrides) -> dict:
    argv = [sys.executable, __file__, "--child"]
    for k, v in {**vars(args), **overrides}.items():
        if k in ("child", "sampled_list") or v is None:
            continue
        argv += [f"--{k.replace('_', '-')}", str(v)]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"child {overrides} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _mb(b) -> str:
    return "n/a" if b is None else f"{b / 2**20:,.1f} MiB"


def show(label: str, r: dict) -> None:
    print(f"{label:<34} compile {r['compile_s']:6.1f} s | {r['round_s']:7.2f} s/round | "
          f"{r['client_steps_per_s']:6.1f} client-steps/s | XLA round memory "
          f"{_mb(r['xla_round_bytes'])} donated, {_mb(r['xla_round_bytes_no_donation'])} not "
          f"| device peak {_mb(r['device_peak_bytes'])} | peak RSS {_mb(r['peak_rss_bytes'])} "
          f"(examples/client <= {r['max_examples']}, R = {r['local_vocab_width']})",
          flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--sampled-list", type=int, nargs="+", default=[16, 64, 256],
                   dest="sampled_list", help="M values of the synthetic sweep")
    p.add_argument("--sampled", type=int, default=16, help=argparse.SUPPRESS)
    add_shape_arguments(p, examples=16, clients=1024, local_vocab=2_000)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after a warm-up round")
    p.add_argument("--algorithm", default="fedavg")
    p.add_argument("--fdu-dir", help="FDU-MTL folder: also run the 1,000-client scene")
    p.add_argument("--fdu-clients", type=int, default=1000)
    p.add_argument("--fdu-sampled", type=int, default=100)
    p.add_argument("--alpha", type=float, default=1.0)
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--memory-gb", type=float, dest="memory_gb",
                   help="find the largest number of clients per round that fits in this "
                   "many GiB (XLA's memory of the donated round)")
    args = p.parse_args()
    if args.child:
        print(json.dumps(fit_memory(args) if args.memory_gb else measure(args)))
        return
    if args.memory_gb:
        r = run_child(args)
        print(f"jax {jax.__version__} on {jax.devices()[0].platform} x {len(jax.devices())}; "
              f"{args.algorithm} {args.dtype}, {args.examples} examples/client, L "
              f"{args.max_len}, d {args.embed_dim}", flush=True)
        print("XLA round memory (donated): " + ", ".join(
            f"M = {m}: {_mb(b)}" for m, b in sorted({**r["probe"], **r.get("checked", {})}
                                                     .items(), key=lambda x: int(x[0]))))
        if r["max_sampled"] is not None:
            print(f"{_mb(r['bytes_per_client'])} per client + {_mb(r['fixed_bytes'])}: "
                  f"at most M = {r['max_sampled']} clients per round in {args.memory_gb:g} GiB")
        return
    print(f"jax {jax.__version__} on {jax.devices()[0].platform} x {len(jax.devices())}; "
          f"{args.algorithm}, L {args.max_len}, d {args.embed_dim}, hidden {args.hidden}, "
          f"batch {args.batch}, {args.local_epochs} local epochs", flush=True)
    fdu_dir = args.fdu_dir
    args.fdu_dir = None
    base = None
    for m in args.sampled_list:
        r = run_child(args, sampled=m)
        show(f"synthetic N={args.clients} M={m}", r)
        base = base or (m, r)
        print(f"{'':<34} x{r['round_s'] / base[1]['round_s']:.2f} the s/round of M={base[0]} "
              f"for x{m / base[0]:.0f} the clients")
    if fdu_dir:
        r = run_child(args, fdu_dir=fdu_dir, clients=args.fdu_clients, sampled=args.fdu_sampled)
        show(f"FDU dirichlet_label a={args.alpha:g} N={r['clients']} M={args.fdu_sampled}", r)
        print(f"{'':<34} scene built in {r['setup_s']:.1f} s")


if __name__ == "__main__":
    main()
