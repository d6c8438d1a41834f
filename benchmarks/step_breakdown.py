"""Where the time of one client step goes: each stage of a step timed alone, vmapped over the
clients, at the paper's FDU shapes (16 clients, batch 8, L 200, d 200, hidden 64), and the
same-run throughput of a large matmul.

Stages (each jitted, forward and backward where the step has both):

  * ``embedding``: gather of the batch's rows of the local table [R, d] and the scatter-add of
    their gradient into a zero [R, d] table;
  * ``input projection``: [B L, d] x [d, 6h] for both directions (forward, and the two
    backward matmuls);
  * ``recurrence``: the 200-step GRU scan, forward and hand-written backward;
  * ``optimizer``: SGD-momentum update of every leaf (the [R, d] table dominates);
  * ``full step``: value_and_grad of the loss + the optimizer update (what the round's scan
    runs), to compare with the sum of the stages.

Usage::

    python benchmarks/step_breakdown.py
    python benchmarks/step_breakdown.py --local-vocab 12000 --clients 16
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms.base import Batch, ClientStart, bind
from fedjax_sc.models.gru import gru_recurrence
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run.registry import build_algorithm


def timed(fn, *args, repeats: int = 5) -> float:
    """Mean seconds of a jitted call (after a compile-and-warm-up call)."""
    jax.block_until_ready(fn(*args))
    t = time.perf_counter()
    for _ in range(repeats):
        out = fn(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - t) / repeats


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-len", type=int, default=200)
    p.add_argument("--embed-dim", type=int, default=200)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--local-vocab", type=int, default=12_000, help="rows R of a client's table")
    args = p.parse_args()
    k, b, n, d, h, r = (args.clients, args.batch, args.max_len, args.embed_dim, args.hidden,
                        args.local_vocab)
    keys = jax.random.split(jax.random.key(0), 8)
    algorithm = build_algorithm("fedavg", vocab_size=r, num_classes=2, embed_dim=d, hidden=h)
    params = init_params(algorithm.model, keys[0])
    stacked = jax.tree.map(lambda x: jnp.broadcast_to(x, (k,) + x.shape) + 0.0, params)
    tokens = jax.random.randint(keys[1], (k, b, n), 2, r)
    labels = jax.random.randint(keys[2], (k, b), 0, 2)
    mask = jnp.ones((k, b), bool)
    table = stacked["embedding"]["embedding"]
    w_in = stacked["encoder"]["input_kernel"].reshape(k, d, 6 * h)
    x = jax.random.normal(keys[3], (k, b * n, d))
    proj = jax.random.normal(keys[4], (k, n, 2, b, 3 * h))
    tmask = jnp.ones((k, n, 2, b, 1))
    w_rec, b_rec = stacked["encoder"]["recurrent_kernel"], stacked["encoder"]["recurrent_bias"]

    def emb(table, tokens):
        return jax.grad(lambda t: jnp.sum(jnp.take(t, tokens, axis=0) ** 2))(table)

    def projection(x, w):
        return jax.grad(lambda x, w: jnp.sum((x @ w) ** 2), argnums=(0, 1))(x, w)

    def recurrence(proj, m, w, bias):
        return jax.grad(lambda *a: jnp.sum(gru_recurrence(*a) ** 2), argnums=(0, 2, 3))(
            proj, m, w, bias)

    opt = algorithm.client_optimizer
    loss = bind(algorithm.client_loss, ClientStart(params))

    def step(params, opt_state, tokens, labels, mask):
        grads = jax.grad(lambda p: loss(p, Batch(tokens, labels, mask), keys[5])[0])(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    def update(params, opt_state):
        updates, opt_state = opt.update(params, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    vm = lambda f: jax.jit(jax.vmap(f))
    opt_state = jax.vmap(opt.init)(stacked)
    stages = {
        "embedding (gather + grad scatter)": timed(vm(emb), table, tokens),
        "input projection (fwd + bwd)": timed(vm(projection), x, w_in),
        "recurrence (fwd + bwd)": timed(vm(recurrence), proj, tmask, w_rec, b_rec),
        "optimizer update (all leaves)": timed(vm(update), stacked, opt_state),
    }
    full = timed(vm(step), stacked, opt_state, tokens, labels, mask)
    a = jax.random.normal(keys[6], (2048, 2048))
    mm = timed(jax.jit(lambda a: a @ a), a)
    flops = {"input projection (fwd + bwd)": 3 * 2 * k * b * n * d * 6 * h,
             "recurrence (fwd + bwd)": 3 * 2 * k * b * n * 2 * h * 3 * h}
    print(f"{k} clients x batch {b}, L {n}, d {d}, hidden {h}, R {r}; one step of all clients:")
    for name, s in stages.items():
        rate = f"{flops[name] / s / 1e9:6.1f} GFLOP/s" if name in flops else ""
        print(f"  {name:<36} {s * 1e3:8.1f} ms  {s / full:6.1%} of the full step  {rate}")
    print(f"  {'sum of the stages':<36} {sum(stages.values()) * 1e3:8.1f} ms")
    print(f"  {'full step (grad + update)':<36} {full * 1e3:8.1f} ms  -> "
          f"{k / full:.1f} client-steps/s")
    print(f"large f32 matmul: {2 * 2048 ** 3 / mm / 1e9:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
