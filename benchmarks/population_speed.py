"""Populations against their members run one after another, in the same process.

For P in ``--sizes`` (default 1 3 8) it trains P members of one algorithm (seeds, and client
learning rates spread over ``--lrs``) as one population (:mod:`fedjax_sc.core.population`: one
compiled program, its members batched with ``vmap`` or run in turn with ``lax.map``) and as P
standalone runs in turn (the same per-member round, jitted once, called P times), and prints
member-rounds per second of each, their ratios, the compile times, and the peak device memory per
member where the device reports it (GPU/TPU; on the CPU the population's states' bytes per member
instead).

Usage::

    python benchmarks/population_speed.py                       # FDU-like shapes, d 50
    python benchmarks/population_speed.py --clients 4 --examples 32 --max-len 32 --rounds 2
    python benchmarks/population_speed.py --algorithm kteps --sizes 1 4 16   # on a GPU

Tokens are random ids at full length L, each client drawing from its own subset of
``--local-vocab`` words; the figures are throughput, not accuracy.
"""

from __future__ import annotations

import argparse
import time

import jax
import numpy as np

from fedjax_sc.core import population as pop
from fedjax_sc.core.round import build_round, init_states
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import ClientArrays
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run.registry import build_algorithm


def fake_clients(clients: int, examples: int, length: int, vocab: int, local_vocab: int,
                 seed: int = 0) -> ClientArrays:
    rng = np.random.default_rng(seed)
    tokens = np.stack([rng.choice(rng.choice(np.arange(2, vocab), local_vocab, replace=False),
                                  (examples, length)) for _ in range(clients)]).astype(np.int32)
    labels = rng.integers(0, 2, (clients, examples)).astype(np.int32)
    return ClientArrays(tokens, labels, np.ones((clients, examples), bool),
                        np.full((clients,), examples, np.int32))


def peak_bytes() -> int | None:
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("peak_bytes_in_use")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algorithm", default="fedavg")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 3, 8])
    ap.add_argument("--lrs", type=float, nargs=2, default=[0.005, 0.02],
                    help="the members' client learning rates span this range")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--examples", type=int, default=64, help="training reviews per client")
    ap.add_argument("--max-len", type=int, default=200)
    ap.add_argument("--vocab", type=int, default=50_002)
    ap.add_argument("--local-vocab", type=int, default=8_000)
    ap.add_argument("--embed-dim", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--local-epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds (after a warm-up)")
    ap.add_argument("--axes", nargs="+", default=["vmap", "map"], choices=("vmap", "map"),
                    help="how the population's program batches its members (vmap first: the "
                    "memory column reads it)")
    a = ap.parse_args()
    print(f"device: {jax.devices()[0].device_kind} ({jax.default_backend()}), jax "
          f"{jax.__version__}")
    print(f"{a.algorithm}: {a.clients} clients x {a.examples} reviews, L {a.max_len}, d "
          f"{a.embed_dim}, hidden {a.hidden}, V {a.vocab}, batch {a.batch_size}, "
          f"{a.local_epochs} local epochs")
    data = client_data(fake_clients(a.clients, a.examples, a.max_len, a.vocab, a.local_vocab),
                       local_vocab=True)
    dims = dict(vocab_size=a.vocab, num_classes=2, embed_dim=a.embed_dim, hidden=a.hidden,
                num_clients=a.clients, upload_noise=0.0)
    build = lambda h: build_algorithm(a.algorithm, **dims, learning_rate=h["lr"])
    model = build_algorithm(a.algorithm, **dims).model
    init = lambda key: init_params(model, key)

    print("| P | vmap member-rounds/s | map member-rounds/s | in turn member-rounds/s | "
          "vmap / in turn | map / in turn | compile s (vmap / map / one) | memory per member, "
          "MB (vmap) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    alone = None  # one member's standalone round: the same shapes for every P, compiled once
    compile_one = 0.0
    for p in a.sizes:
        hparams = {"lr": np.linspace(*a.lrs, p).astype(np.float32)}
        keys = jax.random.split(jax.random.key(0), p)
        speed, compile_s = {}, {}
        for axis in a.axes:
            states, clients = pop.init_population(build, init, hparams, keys, a.clients)
            step = jax.jit(pop.build_population_round(build, batch_size=a.batch_size,
                                                      local_epochs=a.local_epochs,
                                                      member_axis=axis))
            t0 = time.perf_counter()
            step = step.lower(states, clients, data, keys, hparams).compile()
            compile_s[axis] = time.perf_counter() - t0
            states, clients, _ = step(states, clients, data, keys, hparams)  # warm-up
            jax.block_until_ready(states)
            t0 = time.perf_counter()
            for _ in range(a.rounds):
                states, clients, _ = step(states, clients, data, keys, hparams)
            jax.block_until_ready(states)
            speed[axis] = p * a.rounds / (time.perf_counter() - t0)
            if axis == "vmap":
                peak = peak_bytes()
                per_member = (peak / p if peak is not None else
                              sum(x.nbytes for x in jax.tree.leaves((states, clients))) / p)

        # the same members, one standalone program each call (compiled once: same shapes)
        singles = [init_states(build({"lr": float(lr)}), init(k), a.clients)
                   for lr, k in zip(hparams["lr"], keys)]
        if alone is None:
            alone = jax.jit(lambda s, c, d, k, lr: build_round(
                build({"lr": lr}), batch_size=a.batch_size, local_epochs=a.local_epochs)(
                    s, c, d, k))
            t0 = time.perf_counter()
            lr0 = np.float32(hparams["lr"][0])
            alone = alone.lower(*singles[0], data, keys[0], lr0).compile()
            compile_one = time.perf_counter() - t0
        for i, (s, c) in enumerate(singles):  # warm-up, as the population's
            singles[i] = alone(s, c, data, keys[i], hparams["lr"][i])[:2]
        jax.block_until_ready(singles)
        t0 = time.perf_counter()
        for _ in range(a.rounds):
            for i, (s, c) in enumerate(singles):
                singles[i] = alone(s, c, data, keys[i], hparams["lr"][i])[:2]
        jax.block_until_ready(singles)
        in_turn = p * a.rounds / (time.perf_counter() - t0)
        rate = lambda axis: f"{speed[axis]:.3f}" if axis in speed else "-"
        ratio = lambda axis: f"{speed[axis] / in_turn:.2f}x" if axis in speed else "-"
        comp = lambda axis: f"{compile_s[axis]:.1f}" if axis in compile_s else "-"
        memory = "-" if "vmap" not in speed else f"{per_member / 2**20:.0f}" + (
            "" if peak is not None else " (states only)")
        print(f"| {p} | {rate('vmap')} | {rate('map')} | {in_turn:.3f} | {ratio('vmap')} | "
              f"{ratio('map')} | {comp('vmap')} / {comp('map')} / {compile_one:.1f} | {memory} |",
              flush=True)


if __name__ == "__main__":
    main()
