"""Cross-device scale: K clients of Zipf-distributed sizes, M sampled per round, the round's
example axis padded to the scene's largest client (``global``, as before) against the largest
sampled client rounded up to a power of two (``bucket``), measured in the same run.

Prints for each padding: s/round (compiling apart), the compile time and number of compiled
programs, the padding ratio (example slots fed to the round / real examples), XLA's memory
figure of the largest compiled round (arguments + outputs + temporaries, the round's device
memory) and the largest client axis fed; then the process's peak resident memory and the
largest difference between the two paddings' final parameters (0: the padded steps are
masked no-ops).

    python benchmarks/cross_device.py                       # K 10,000, M 100, Zipf 1.5
    python benchmarks/cross_device.py --zipf 2 --rounds 3   # a lighter tail

The scene is the CLI's (``TrainConfig`` through ``load_scene``): that of ``fedjax-sc train
--scene synthetic --synthetic-clients 10000 --synthetic-zipf 1.5 --synthetic-train 256
--synthetic-test 1 --max-len 32 --vocab-size 5000``, whose rounds ``--padding`` pads.
"""

from __future__ import annotations

import argparse
import resource
import time

import jax
import numpy as np


def main() -> None:
    from fedjax_sc.algorithms.fedavg import fedavg
    from fedjax_sc.core import participation, sharding
    from fedjax_sc.core.feed import ClientFeed, CompiledRounds
    from fedjax_sc.core.round import ClientStates, build_round, init_states
    from fedjax_sc.data.client_data import host_client_data
    from fedjax_sc.models.text_classifier import TextClassifier, init_params
    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.loading import load_scene

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=10_000)
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--zipf", type=float, default=1.5, help="exponent of the sizes' Zipf law")
    p.add_argument("--largest", type=int, default=256, help="sizes clipped to this")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--max-len", type=int, default=32)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--dim", type=int, default=32, help="d, hidden and MLP width")
    a = p.parse_args()

    t0 = time.perf_counter()
    scene = load_scene(TrainConfig(
        scene="synthetic", synthetic_clients=a.clients, synthetic_zipf=a.zipf,
        synthetic_train=a.largest, synthetic_test=1, max_len=a.max_len,
        vocab_size=5000).resolved())
    sizes = scene.train.counts
    host = host_client_data(scene.train)
    print(f"{jax.devices()[0].device_kind}: K = {a.clients:,} clients, Zipf({a.zipf}) sizes "
          f"clipped to {a.largest}: {int(sizes.sum()):,} examples, median "
          f"{int(np.median(sizes))}, {np.mean(sizes == 1):.0%} with one, largest "
          f"{int(sizes.max())}; host arrays {host.tokens.nbytes / 2**20:,.0f} MiB "
          f"({time.perf_counter() - t0:.0f} s to build); M = {a.per_round}, B = {a.batch}, "
          f"E = {a.epochs}, L = {a.max_len}, d = {a.dim}")
    print(f"bucket ladder: {participation.example_ladder(host.mask.shape[1])}")
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=a.dim, hidden=a.dim,
                           mlp_hidden=a.dim)
    alg = fedavg(model, 0.1)
    mesh = sharding.client_mesh(jax.devices()[:1])
    finals = {}
    for padding in ("global", "bucket"):
        state, clients = init_states(alg, init_params(model, jax.random.key(0)), a.clients)
        feed = ClientFeed(host, clients.private, mesh, a.per_round, seed=0, padding=padding)
        step = CompiledRounds(jax.jit(build_round(alg, batch_size=a.batch,
                                                  local_epochs=a.epochs)))
        seconds, compile_s, slots, real, shapes = [], 0.0, 0, 0, []
        for r in range(1, a.rounds + 1):
            idx = feed.sample(r)
            data, private = feed.inputs(idx)
            args = (state, ClientStates(private), data, jax.random.key(r))
            t = time.perf_counter()
            program = step.compile(*args)
            compile_s += time.perf_counter() - t
            t = time.perf_counter()
            state, new, _ = program(*args)
            jax.block_until_ready(state.params)
            feed.update(idx, new.private)
            seconds.append(time.perf_counter() - t)
            slots, real = slots + feed._feed.slots, real + feed._feed.examples
            shapes.append(int(data.mask.shape[1]))
        memory = max(_bytes(prog) for prog in step.programs.values())
        finals[padding] = jax.device_get(state.params)
        each = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"{padding:6s}: {np.mean(seconds):.3f} s/round (rounds {each}); "
              f"{len(step.programs)} program(s) compiled in {compile_s:.1f} s; example axis "
              f"per round {shapes}; padding ratio {slots / real:.2f} ({slots:,} slots / "
              f"{real:,} examples); round memory (XLA) {memory / 2**20:.1f} MiB")
    diff = max(float(np.max(np.abs(x - y))) for x, y in
               zip(jax.tree.leaves(finals["global"]), jax.tree.leaves(finals["bucket"])))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    print(f"peak resident memory of the process {peak:,.0f} MiB; largest |params(global) - "
          f"params(bucket)| after {a.rounds} rounds: {diff:.3g}")


def _bytes(compiled) -> int:
    """Arguments + outputs + temporaries of a compiled program (XLA's memory analysis)."""
    m = compiled.memory_analysis()
    if m is None:
        return 0
    return int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes
               - m.alias_size_in_bytes)


if __name__ == "__main__":
    main()
