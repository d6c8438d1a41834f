"""Centralised multi-task training as a drop-in for the federated round (ASP, Liu et al. 2017;
provided by ASP as :func:`fedjax_sc.core.central.multitask`).

``round_step(server_state, client_states, clients, rng)`` has the federated round's signature
and states, so training, checkpoints, Ag/Ap evaluation and reports are shared: the "round" is
``local_epochs`` epochs of synchronous multi-task SGD. Each step takes batch j of every client
(each client's data reshuffled per epoch with the same schedule as the round,
:func:`fedjax_sc.core.local.epoch_schedule`), evaluates every client's loss under ``vmap`` with
the shared leaves and that client's private leaves, and applies one optimizer step to the
shared leaves with the sum of the clients' gradients and one to each client's private leaves
with its own gradient (kept unchanged on a client's padded steps) -- the masked step scan of
:func:`fedjax_sc.core.local.local_steps` with one mask for the shared leaves and one per client.
The optimizer states are fresh each round, as the round's. There is no upload: this baseline
has no privacy.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart
from fedjax_sc.core.local import epoch_schedule, local_steps
from fedjax_sc.core.round import (
    ClientStates,
    RoundMetrics,
    ServerState,
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
            return algorithm.client_loss(masking.merge(shared, private), batch, rng, start)

        def total(both, i, m, e, j):
            losses, aux = jax.vmap(client_loss,
                                   in_axes=(None, 0, 0, 0, 0, 0, 0, None, None, 0, 0))(
                both[0], both[1], client_states.private, clients.tokens, clients.labels, i, m,
                e, j, keys, clients_axis)
            return jnp.sum(losses), (losses, aux)

        def step(both, inputs):
            i, m, e, j = inputs
            (_, (losses, aux)), grads = jax.value_and_grad(total, has_aux=True)(
                both, i, m, e, j)
            return (losses, aux), grads

        # a client's private leaves move on its real steps only; the shared ones on every
        # step that has a real client (a step where all are padded is a no-op)
        real = jnp.any(bmask, axis=-1)  # [S, K]
        pair_opt = _shared_and_per_client(opt)
        init = (state.params, client_states.private)
        ((shared, private), _), (losses, aux) = local_steps(
            step, pair_opt, init, pair_opt.init(init), (idx, bmask, e, j),
            (jnp.any(real, axis=1), real))
        losses = jnp.where(real, losses, 0.0)
        aux = jax.tree.map(lambda a: jnp.where(real, a, 0.0), aux)
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


def _shared_and_per_client(opt: optax.GradientTransformation) -> optax.GradientTransformation:
    """``opt`` on a ``(shared, private)`` pair: once on the shared leaves, and per client
    (``vmap``) on the private leaves stacked ``[K, ...]``, each client with its own state."""

    def init(params):
        return opt.init(params[0]), jax.vmap(opt.init)(params[1])

    def update(grads, state, params):
        shared, shared_state = opt.update(grads[0], state[0], params[0])
        private, private_state = jax.vmap(opt.update)(grads[1], state[1], params[1])
        return (shared, private), (shared_state, private_state)

    return optax.GradientTransformation(init, update)
