"""Speed of the compiled federated round at the paper's FDU shapes, with same-run references.

Prints, all measured in this one run on this machine:
  * client-steps per second of the compiled FedAvg round (16 clients, batch 8, L 200, d 200,
    hidden 64, V 50k by default), compile time reported separately;
  * throughput of a large float32 matmul (the machine's practical FLOP/s ceiling) and the
    ratio of the model's useful training FLOP/s to it;
  * if PyTorch is importable, a plain PyTorch loop over clients with the same model (Embedding
    -> BiGRU -> mean -> MLP, SGD momentum) and the speed ratio to it.

Usage::

    python benchmarks/round_speed.py                      # paper shapes
    python benchmarks/round_speed.py --dense-embedding    # train the full [V, d] table
    python benchmarks/round_speed.py --clients 4 --examples 16 --rounds 1   # a quick look

Tokens are random ids at full length L (the recurrence always runs L steps); each client
draws from its own subset of ``--local-vocab`` words, like FDU's V^k (6k-17k words).
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.core.round import build_round, init_states
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

    nets = [Net() for _ in range(args.clients)]
    x = torch.randint(2, args.vocab, (args.batch, args.max_len))
    y = torch.randint(0, 2, (args.batch,))
    t = time.perf_counter()
    for net in nets:  # the usual simulation: one client after the other
        opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    return args.clients * steps / (time.perf_counter() - t)


def time_round(args, name: str, data) -> float:
    """Compiles ``name``'s round, runs one warm-up and ``args.rounds`` timed rounds; returns
    client-steps/s."""
    algorithm = build_algorithm(name, vocab_size=args.vocab, num_classes=2,
                                embed_dim=args.embed_dim, hidden=args.hidden,
                                mlp_hidden=args.mlp_hidden)
    state, clients = init_states(algorithm, init_params(algorithm.model, jax.random.key(0)),
                                 args.clients)
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
    print(f"{name}: compiled round {steps / seconds:.1f} client-steps/s ({steps} client-steps "
          f"in {seconds:.1f} s)")
    return steps / seconds


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--examples", type=int, default=80, help="train examples per client")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-len", type=int, default=200)
    p.add_argument("--embed-dim", type=int, default=200)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--mlp-hidden", type=int, default=128)
    p.add_argument("--vocab", type=int, default=50_002)
    p.add_argument("--local-vocab", type=int, default=12_000)
    p.add_argument("--local-epochs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds after compilation")
    p.add_argument("--dense-embedding", action="store_true")
    p.add_argument("--algorithm", nargs="+", default=["fedavg"], choices=ALGORITHMS,
                   help="algorithms whose rounds to time, in one run; speeds are also given "
                   "as ratios to the first (FLOP figures and PyTorch: first, one-branch)")
    p.add_argument("--torch-steps", type=int, default=10,
                   help="PyTorch steps per client for the same-run reference (0: skip)")
    args = p.parse_args()

    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; {args.clients} clients, "
          f"batch {args.batch}, L {args.max_len}, d {args.embed_dim}, hidden {args.hidden}, "
          f"V {args.vocab}, {'dense' if args.dense_embedding else 'local-vocabulary'} embedding")
    arrays = synthetic_arrays(args.clients, args.examples, args.max_len, args.vocab,
                              args.local_vocab)
    data = client_data(arrays, local_vocab=not args.dense_embedding)
    rates = {name: time_round(args, name, data) for name in args.algorithm}
    first = args.algorithm[0]
    for name, rate in rates.items():
        print(f"{name}: {rate / rates[first]:.2f}x the client-steps/s of {first} (same run)")
    rate = rates[first]
    if first not in SINGLE_BRANCH:
        print("FLOP figures and the PyTorch reference describe one-branch models only")
        return
    flops = model_flops_per_step(args.batch, args.max_len, args.embed_dim, args.hidden,
                                 args.mlp_hidden, 2)
    peak = matmul_flops()
    print(f"model: {flops / 1e9:.2f} GFLOP per client-step -> {rate * flops / 1e9:.1f} GFLOP/s")
    print(f"large f32 matmul: {peak / 1e9:.1f} GFLOP/s -> model/matmul ratio "
          f"{rate * flops / peak:.2f}")
    ref = torch_reference(args, args.torch_steps) if args.torch_steps > 0 else None
    if args.torch_steps <= 0:
        print("PyTorch reference skipped (--torch-steps 0)")
    elif ref is None:
        print("PyTorch not importable: no same-run reference (pip install torch)")
    else:
        print(f"plain PyTorch loop over clients: {ref:.1f} client-steps/s -> speed-up "
              f"{rate / ref:.2f}x")


if __name__ == "__main__":
    main()
