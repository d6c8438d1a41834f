"""Speed of the compiled federated round at the paper's FDU shapes, with same-run references.

Prints, all measured in this one run on whatever device JAX sees (its name first):
  * client-steps per second of the compiled round, every client under ``vmap`` (FedAvg, 16
    clients, batch 8, L 200, d 200, hidden 64, V 50k by default), compile time apart;
  * the same per-client code (``core.round.build_client_update``, jitted) looped over one
    client at a time, then the server's weighted mean: fedjax's ``for_each_client`` style;
  * if PyTorch is importable, a plain PyTorch loop over clients with the same model (Embedding
    -> BiGRU -> mean -> MLP, SGD momentum), on CUDA when PyTorch sees a GPU;
  * the ratios between them, and the throughput of a large float32 matmul (the device's
    practical FLOP/s ceiling) with the model's share of it;
  * with ``--sweep M ...`` (default 16 64 256 on an accelerator), the vmapped round's
    client-steps/s as the number of clients per round grows (``--sweep-examples`` each).

Usage::

    python benchmarks/round_speed.py                      # paper shapes
    python benchmarks/round_speed.py --embed-dim 50       # the GloVe 6B 50d runs' d
    python benchmarks/round_speed.py --dtype bfloat16     # mixed precision
    python benchmarks/round_speed.py --dense-embedding    # train the full [V, d] table
    python benchmarks/round_speed.py --clients 4 --examples 16 --rounds 1   # a quick look
    python benchmarks/round_speed.py --embed-dim 50 --upload-compression topk:0.01 \
        topk:0.01+ef bits:4       # what compressing the upload costs the round

Tokens are random ids at full length L (the recurrence always runs L steps); each client
draws from its own subset of ``--local-vocab`` words, like FDU's V^k (6k-17k words).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.aggregate import example_weights
from fedjax_sc.core.round import build_client_update, build_round, init_states
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import ClientArrays
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run.registry import ALGORITHMS, SINGLE_BRANCH, build_algorithm


def model_flops_per_step(batch: int, length: int, d: int, h: int, mlp: int, classes: int) -> float:
    """Useful training FLOPs of one client step: 3 x forward (forward + backward ~ 2 x forward).

    Forward multiply-adds: both directions' input projections (B L d 3h each), both
    recurrences (B L h 3h each) and the two classifier layers.
    """
    macs = 2 * batch * length * (d * 3 * h + h * 3 * h) + batch * (2 * h * mlp + mlp * classes)
    return 3 * 2 * macs


def matmul_flops(n: int = 2048, repeats: int = 5) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    t = time.perf_counter()
    for _ in range(repeats):
        out = f(a)
    out.block_until_ready()
    return 2 * n ** 3 * repeats / (time.perf_counter() - t)


def synthetic_arrays(clients: int, examples: int, length: int, vocab: int, local_vocab: int,
                     seed: int = 0) -> ClientArrays:
    rng = np.random.default_rng(seed)
    ids = [np.sort(rng.choice(np.arange(2, vocab), size=local_vocab, replace=False))
           for _ in range(clients)]
    tokens = np.stack([rng.choice(v, size=(examples, length)) for v in ids]).astype(np.int32)
    labels = rng.integers(0, 2, size=(clients, examples)).astype(np.int32)
    return ClientArrays(tokens, labels, np.ones((clients, examples), bool),
                        np.full((clients,), examples, np.int32))


def torch_reference(args, steps: int) -> float | None:
    """Client-steps/s of a plain PyTorch loop over clients (same model), or None."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(args.vocab, args.embed_dim)
            self.gru = torch.nn.GRU(args.embed_dim, args.hidden, batch_first=True,
                                    bidirectional=True)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(2 * args.hidden, args.mlp_hidden),
                                           torch.nn.ReLU(), torch.nn.Linear(args.mlp_hidden, 2))

        def forward(self, x):
            return self.mlp(self.gru(self.emb(x))[0].mean(1))

    device = "cuda" if torch.cuda.is_available() else "cpu"
    nets = [Net().to(device) for _ in range(args.clients)]
    x = torch.randint(2, args.vocab, (args.batch, args.max_len), device=device)
    y = torch.randint(0, 2, (args.batch,), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    warm = Net().to(device)  # warm-up: kernels, cuDNN plans, the optimizer's first-step setup
    warm_opt = torch.optim.SGD(warm.parameters(), lr=0.01, momentum=0.9)
    for _ in range(2):
        warm_opt.zero_grad()
        torch.nn.functional.cross_entropy(warm(x), y).backward()
        warm_opt.step()
    sync()
    t = time.perf_counter()
    for net in nets:  # the usual simulation: one client after the other
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    sync()
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"PyTorch {torch.__version__} on {name}")
    return args.clients * steps / (time.perf_counter() - t)


def time_client_loop(args, name: str, data) -> float:
    """Client-steps/s of the same per-client local training jitted for ONE client and looped
    over the clients on the host, then the weighted mean (fedjax's ``for_each_client``)."""
    algorithm = build_algorithm(name, vocab_size=args.vocab, num_classes=2,
                                embed_dim=args.embed_dim, hidden=args.hidden,
                                mlp_hidden=args.mlp_hidden, dtype=args.dtype,
                                num_clients=data.num_clients)
    params = init_params(algorithm.model, jax.random.key(0))
    update = jax.jit(build_client_update(algorithm, batch_size=args.batch,
                                         local_epochs=args.local_epochs))
    mean = jax.jit(lambda stacked, w: jax.tree.map(
        lambda x: jnp.tensordot(w, x, axes=1), stacked))
    rows = lambda k: (data.tokens[k], data.labels[k], data.mask[k], jax.random.key(k))

    def one_round(params):
        outs = [update(params, *rows(k)) for k in range(data.num_clients)]
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[o[0] for o in outs])
        return (mean(stacked, example_weights(data.counts)),
                sum(int(o[1].steps) for o in outs))

    t = time.perf_counter()
    jax.block_until_ready(one_round(params)[0])  # compile + warm-up
    print(f"{name}: one-client loop compile + warm-up {time.perf_counter() - t:.1f} s")
    t, steps = time.perf_counter(), 0
    for _ in range(args.rounds):
        params, n = one_round(params)
        steps += n
    jax.block_until_ready(params)
    seconds = time.perf_counter() - t
    print(f"{name}: one-client jit loop {steps / seconds:.1f} client-steps/s")
    return steps / seconds


def time_round(args, name: str, data, compression: str = "none") -> float:
    """Compiles ``name``'s round (its upload compressed as ``--upload-compression
    compression`` says), runs one warm-up and ``args.rounds`` timed rounds; returns
    client-steps/s."""
    algorithm = build_algorithm(name, vocab_size=args.vocab, num_classes=2,
                                embed_dim=args.embed_dim, hidden=args.hidden,
                                mlp_hidden=args.mlp_hidden, dtype=args.dtype,
                                num_clients=data.num_clients, upload_compression=compression)
    if compression != "none":
        name = f"{name} {compression}"
    state, clients = init_states(algorithm, init_params(algorithm.model, jax.random.key(0)),
                                 data.num_clients)
    fn = jax.jit(build_round(algorithm, batch_size=args.batch,
                             local_epochs=args.local_epochs), donate_argnums=(0, 1))
    t = time.perf_counter()
    step = fn.lower(state, clients, data, jax.random.key(1)).compile()
    print(f"{name}: compile {time.perf_counter() - t:.1f} s")
    state, clients, m = step(state, clients, data, jax.random.key(1))  # warm-up round
    jax.block_until_ready(state)
    t = time.perf_counter()
    steps = 0
    for _ in range(args.rounds):
        state, clients, m = step(state, clients, data, jax.random.key(1))
        steps += int(np.asarray(m.steps).sum())
    jax.block_until_ready(state)
    seconds = time.perf_counter() - t
    print(f"{name}: vmapped round of {data.num_clients} clients {steps / seconds:.1f} "
          f"client-steps/s ({steps} client-steps in {seconds:.1f} s)")
    return steps / seconds


def add_shape_arguments(p: argparse.ArgumentParser, examples: int, clients: int = 16,
                        local_vocab: int = 12_000) -> None:
    """The round's shapes, the paper's FDU ones by default (d 200 as its GloVe)."""
    p.add_argument("--clients", type=int, default=clients, help="clients (N)")
    p.add_argument("--examples", type=int, default=examples, help="train examples per client")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-len", type=int, default=200)
    p.add_argument("--embed-dim", type=int, default=200)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--mlp-hidden", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50_002)
    p.add_argument("--local-vocab", type=int, default=local_vocab,
                   help="distinct words per client (rows of its local embedding table)")
    p.add_argument("--local-epochs", type=int, default=2)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_shape_arguments(p, examples=80)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after compilation")
    p.add_argument("--dense-embedding", action="store_true")
    p.add_argument("--algorithm", nargs="+", default=["fedavg"], choices=ALGORITHMS,
                   help="algorithms whose rounds to time, in one run; speeds are also given "
                   "as ratios to the first (FLOP figures and PyTorch: first, one-branch)")
    p.add_argument("--upload-compression", nargs="+", default=[], metavar="SPEC",
                   help="also time the first algorithm uploading its change compressed, one "
                   "round per SPEC (fedjax-sc train's spellings: topk:0.01, topk:0.01+ef, "
                   "bits:4), as ratios to it")
    p.add_argument("--torch-steps", type=int, default=10,
                   help="PyTorch steps per client for the same-run reference (0: skip)")
    p.add_argument("--no-loop", dest="loop", action="store_false",
                   help="skip the one-client jit loop (default: off, it runs)")
    p.add_argument("--dtype", nargs="+", default=["float32"], choices=("float32", "bfloat16"),
                   help="computation dtypes; the first is used for every figure, the others "
                   "time the first algorithm's vmapped round for a same-run ratio")
    p.add_argument("--sweep", type=int, nargs="*",
                   help="clients per round for the vmapped-round sweep (default: 16 64 256 on "
                   "an accelerator, none on a CPU)")
    p.add_argument("--sweep-examples", type=int, default=16,
                   help="train examples per client in the sweep")
    p.add_argument("--json", help="also write every figure of this run here")
    args = p.parse_args()

    device = jax.devices()[0]
    figures: dict = {"device": device.device_kind, "platform": device.platform,
                     "jax": jax.__version__, "settings": dict(vars(args))}
    print(f"jax {jax.__version__} on {device.platform} ({device.device_kind}) x "
          f"{jax.device_count()}; {args.clients} clients, batch {args.batch}, L {args.max_len}, "
          f"d {args.embed_dim}, hidden {args.hidden}, V {args.vocab}, {args.dtype[0]}, "
          f"{'dense' if args.dense_embedding else 'local-vocabulary'} embedding")
    arrays = synthetic_arrays(args.clients, args.examples, args.max_len, args.vocab,
                              args.local_vocab)
    data = client_data(arrays, local_vocab=not args.dense_embedding)
    dtypes, args.dtype = args.dtype, args.dtype[0]
    rates = {name: time_round(args, name, data) for name in args.algorithm}
    first = args.algorithm[0]
    for spec in args.upload_compression:  # the first algorithm, its change compressed
        rates[f"{first} {spec}"] = time_round(args, first, data, spec)
    for name, rate in rates.items():
        print(f"{name}: {rate / rates[first]:.2f}x the client-steps/s of {first} (same run)")
    rate = rates[first]
    figures.update(vmapped=rates, peak_bytes=peak_bytes(device))
    for dtype in dtypes[1:]:
        args.dtype = dtype
        other = time_round(args, first, data)
        figures.setdefault("dtype", {})[dtype] = other
        print(f"{first} in {dtype}: {other / rate:.2f}x the client-steps/s of {dtypes[0]} "
              f"(same run)")
    args.dtype = dtypes[0]
    if args.loop:
        loop = figures["one_client_loop"] = time_client_loop(args, first, data)
        print(f"vmapped round / one-client jit loop: {rate / loop:.2f}x (same code, same run)")
    sweep = args.sweep if args.sweep is not None else (
        [] if device.platform == "cpu" else [16, 64, 256])
    for m in sweep:
        arrays = synthetic_arrays(m, args.sweep_examples, args.max_len, args.vocab,
                                  args.local_vocab, seed=1)
        r = time_round(args, first, client_data(arrays, local_vocab=not args.dense_embedding))
        print(f"sweep: M = {m} clients per round -> {r:.1f} client-steps/s")
        figures.setdefault("sweep", {})[m] = r
    if first in SINGLE_BRANCH:
        reference(args, rate, figures)
    else:
        print("FLOP figures and the PyTorch reference describe one-branch models only")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
        print(f"figures -> {args.json}")


def peak_bytes(device) -> int | None:
    """The device's peak memory in use so far (GPU/TPU), or None where it reports none."""
    return (device.memory_stats() or {}).get("peak_bytes_in_use")


def reference(args, rate: float, figures: dict) -> None:
    """The FLOP figures and the PyTorch loop beside the vmapped round's ``rate``."""
    flops = model_flops_per_step(args.batch, args.max_len, args.embed_dim, args.hidden,
                                 args.mlp_hidden, 2)
    peak = matmul_flops()
    print(f"model: {flops / 1e9:.2f} GFLOP per client-step -> {rate * flops / 1e9:.1f} GFLOP/s")
    print(f"large f32 matmul: {peak / 1e9:.1f} GFLOP/s -> model/matmul ratio "
          f"{rate * flops / peak:.2f}")
    figures.update(model_gflop_per_step=flops / 1e9, matmul_gflops=peak / 1e9)
    ref = torch_reference(args, args.torch_steps) if args.torch_steps > 0 else None
    figures["pytorch_loop"] = ref
    if args.torch_steps <= 0:
        print("PyTorch reference skipped (--torch-steps 0)")
    elif ref is None:
        print("PyTorch not importable: no same-run reference (pip install torch)")
    else:
        print(f"plain PyTorch loop over clients: {ref:.1f} client-steps/s -> speed-up "
              f"{rate / ref:.2f}x")


if __name__ == "__main__":
    main()
