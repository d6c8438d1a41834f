"""Centralised multi-task training as a drop-in for the federated round (ASP, Liu et al. 2017;
``Algorithm.training == "multitask"``).

``round_step(server_state, client_states, clients, rng)`` has the federated round's signature
and states, so training, checkpoints, Ag/Ap evaluation and reports are shared: the "round" is
``local_epochs`` epochs of synchronous multi-task SGD. Each step takes batch j of every client
(each client's data reshuffled per epoch with the same schedule as the round,
:func:`fedjax_sc.core.round.epoch_schedule`), evaluates every client's loss under ``vmap`` with
the shared leaves and that client's private leaves, and applies one optimizer step to the
shared leaves with the sum of the clients' gradients and one to each client's private leaves
with its own gradient (kept unchanged on a client's padded steps). The optimizer states are
fresh each round, as the round's. There is no upload: this baseline has no privacy.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, bind_start
from fedjax_sc.core.round import (
    ClientStates,
    RoundMetrics,
    ServerState,
    check_algorithm,
    epoch_schedule,
)
from fedjax_sc.data.client_data import ClientData


def build_multitask_round(algorithm: Algorithm, *, batch_size: int,
                          local_epochs: int) -> Callable:
    """The un-jitted multi-task round (same signature and returns as
    :func:`fedjax_sc.core.round.build_round`).

    Raises:
      ValueError: batch_size or local_epochs < 1, inconsistent algorithm fields, or (at call
        time) client data with local-vocabulary ids (this trainer needs global ids).
    """
    if batch_size < 1 or local_epochs < 1:
        raise ValueError(f"batch_size and local_epochs must be >= 1, got {batch_size}, "
                         f"{local_epochs}")
    check_algorithm(algorithm)
    opt = algorithm.client_optimizer

    def round_step(state: ServerState, client_states: ClientStates, clients: ClientData,
                   rng: jax.Array):
        if clients.vocab_ids is not None:
            raise ValueError("multi-task training needs global vocabulary ids "
                             "(client_data(..., local_vocab=False))")
        num = clients.num_clients
        round_key = jax.random.fold_in(rng, state.round)
        keys = jax.vmap(lambda k: jax.random.fold_in(round_key, k))(jnp.arange(num))
        idx, bmask = jax.vmap(lambda k, m: epoch_schedule(k, m, batch_size, local_epochs))(
            keys, clients.mask)  # [K, E, S, B]
        steps = idx.shape[1] * idx.shape[2]
        e, j = jnp.divmod(jnp.arange(steps), idx.shape[2])
        idx = jnp.swapaxes(idx.reshape(num, steps, batch_size), 0, 1)
        bmask = jnp.swapaxes(bmask.reshape(num, steps, batch_size), 0, 1)
        clients_axis = jnp.arange(num, dtype=jnp.int32)

        def client_loss(shared, private, private0, tokens, labels, i, m, e, j, key, k):
            start = ClientStart(masking.merge(state.params, private0), (), k)
            batch = Batch(tokens[i], labels[i], m)
            rng = jax.random.fold_in(jax.random.fold_in(key, e), j)
            return bind_start(algorithm, start)(masking.merge(shared, private), batch, rng)

        def total(both, i, m, e, j):
            losses, aux = jax.vmap(client_loss,
                                   in_axes=(None, 0, 0, 0, 0, 0, 0, None, None, 0, 0))(
                both[0], both[1], client_states.private, clients.tokens, clients.labels, i, m,
                e, j, keys, clients_axis)
            return jnp.sum(losses), (losses, aux)

        def step(carry, inputs):
            (shared, private), (shared_opt, private_opt) = carry
            i, m, e, j = inputs
            (_, (losses, aux)), (g_shared, g_private) = jax.value_and_grad(
                total, has_aux=True)((shared, private), i, m, e, j)
            updates, new_shared_opt = opt.update(g_shared, shared_opt, shared)
            real = jnp.any(m, axis=1)  # [K]
            # a step where every client is padded is a no-op (momentum must not move them)
            keep = lambda new, old: jnp.where(jnp.any(real), new, old)
            shared, shared_opt = (jax.tree.map(keep, optax.apply_updates(shared, updates),
                                               shared),
                                  jax.tree.map(keep, new_shared_opt, shared_opt))

            def private_step(p, g, o, r):
                u, new_o = opt.update(g, o, p)
                keep = lambda new, old: jnp.where(r, new, old)
                return (jax.tree.map(keep, optax.apply_updates(p, u), p),
                        jax.tree.map(keep, new_o, o))

            private, private_opt = jax.vmap(private_step)(private, g_private, private_opt, real)
            zero = lambda a: jnp.where(real, a, 0.0)
            return ((shared, private), (shared_opt, private_opt)), (
                zero(losses), jax.tree.map(zero, aux), real)

        init = ((state.params, client_states.private),
                (opt.init(state.params), jax.vmap(opt.init)(client_states.private)))
        ((shared, private), _), (losses, aux, real) = jax.lax.scan(
            step, init, (idx, bmask, e, j))
        n = jnp.sum(real, axis=0)
        denom = jnp.maximum(n, 1).astype(jnp.float32)
        aux = {k: jnp.sum(v, axis=0) / denom for k, v in aux.items()}
        finite = jnp.all(jnp.isfinite(losses), axis=0) & jnp.all(jnp.stack(
            [jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(shared)]))
        for leaf in jax.tree.leaves(private):
            finite &= jnp.all(jnp.isfinite(leaf.reshape(num, -1)), axis=1)
        metrics = RoundMetrics(jnp.sum(losses, axis=0) / denom, aux["accuracy"],
                               n.astype(jnp.int32), finite, aux)
        return (ServerState(shared, state.round + 1, state.opt_state, state.upload_state),
                ClientStates(private), metrics)

    return round_step
