"""Centralised multi-task training as a drop-in for the federated round (ASP, Liu et al. 2017;
named by ASP as ``CentralTrainer("multitask")``, :mod:`fedjax_sc.core.central`).

``round_step(server_state, client_states, clients, rng)`` has the federated round's signature
and states, so training, checkpoints, Ag/Ap evaluation and reports are shared: the "round" is
``local_epochs`` epochs of multi-task SGD, every client's data reshuffled per epoch with the
same plan as the round (:func:`fedjax_sc.core.local.epoch_schedule`). Two step schedules
(:data:`SCHEDULES`):

* ``alternate`` (default): one domain's mini-batch per step, the domains' batches interleaved
  in a fresh random order each epoch (each domain's own batches in their order) -- the
  training loop of Liu, Qiu and Huang's multi-task text classifiers (pick a task, take a
  mini-batch of it, step), so an epoch is ``sum_k ceil(N^k / B)`` steps and every step has
  one domain's gradient scale. The step updates the shared leaves and that domain's private
  leaves.
* ``sum``: one step takes batch j of every domain under ``vmap`` and moves the shared leaves by
  the sum of the domains' gradients (K times fewer, K times larger steps: equal to
  ``alternate`` to first order, K times more parallel, but with momentum 0.9 a shared step is
  K times one domain's).

Either way each domain's private leaves move with its own gradient only (kept unchanged on its
padded or other domains' steps) -- the masked step scan of
:func:`fedjax_sc.core.local.local_steps` with one mask for the shared leaves and one per client.
The optimizer states are fresh each round, as the round's. There is no upload: this baseline
has no privacy.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from fedjax_sc import streams
from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import MULTITASK_SCHEDULES, Algorithm, Batch, ClientStart
from fedjax_sc.core.local import epoch_schedule, local_steps, step_key
from fedjax_sc.core.round import (
    ClientStates,
    RoundMetrics,
    ServerState,
)
from fedjax_sc.data.client_data import ClientData

SCHEDULES = MULTITASK_SCHEDULES
"""The multi-task step schedules (see the module docstring)."""


def build_multitask_round(algorithm: Algorithm, *, batch_size: int, local_epochs: int,
                          schedule: str = "alternate") -> Callable:
    """The un-jitted multi-task round (same signature and returns as
    :func:`fedjax_sc.core.round.build_round`).

    Args:
      algorithm: the multi-task algorithm (ASP); its client loss sees the domain index as
        ``start.client``.
      batch_size, local_epochs: B and the epochs per call.
      schedule: one of :data:`SCHEDULES`.

    Raises:
      ValueError: batch_size or local_epochs < 1, an unknown schedule, or (at call time)
        client data with local-vocabulary ids (this trainer needs global ids).
    """
    if batch_size < 1 or local_epochs < 1:
        raise ValueError(f"batch_size and local_epochs must be >= 1, got {batch_size}, "
                         f"{local_epochs}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown multi-task schedule {schedule!r}; choose from {SCHEDULES}")
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
        if schedule == "alternate":
            return _alternate(state, client_states, clients, round_key, keys, idx, bmask)
        steps = idx.shape[1] * idx.shape[2]
        e, j = jnp.divmod(jnp.arange(steps), idx.shape[2])
        idx = jnp.swapaxes(idx.reshape(num, steps, batch_size), 0, 1)
        bmask = jnp.swapaxes(bmask.reshape(num, steps, batch_size), 0, 1)
        clients_axis = jnp.arange(num, dtype=jnp.int32)

        def client_loss(shared, private, private0, tokens, labels, mask, i, m, e, j, key, k):
            start = ClientStart(masking.merge(state.params, private0), (), k,
                                data=Batch(tokens, labels, mask))
            batch = Batch(tokens[i], labels[i], m)
            rng = step_key(key, e, j)
            return algorithm.client_loss(masking.merge(shared, private), batch, rng, start)

        def total(both, i, m, e, j):
            losses, aux = jax.vmap(client_loss,
                                   in_axes=(None, 0, 0, 0, 0, 0, 0, 0, None, None, 0, 0))(
                both[0], both[1], client_states.private, clients.tokens, clients.labels,
                clients.mask, i, m, e, j, keys, clients_axis)
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
        return _finish(state, shared, private, real, losses, aux)

    def _alternate(state, client_states, clients, round_key, keys, idx, bmask):
        num, epochs, per_epoch = idx.shape[:3]
        slots = num * per_epoch

        def epoch_slots(e):
            # a random interleaving of the domains' real batches, each domain's in its own
            # order j = 0, 1, ... (its sorted draws); padded batches last
            real = jnp.any(bmask[:, e], axis=-1)  # [K, S]
            noise = jnp.sort(jax.random.uniform(jax.random.fold_in(jax.random.fold_in(
                round_key, streams.multitask_interleave(num)), e), (num, per_epoch)), axis=1)
            order = jnp.argsort(jnp.where(real, noise, 2.0).reshape(slots))
            return order // per_epoch, order % per_epoch

        ks, js = jax.vmap(epoch_slots)(jnp.arange(epochs))  # [E, K * S]
        es = jnp.broadcast_to(jnp.arange(epochs)[:, None], ks.shape)
        ks, js, es = ks.reshape(-1), js.reshape(-1), es.reshape(-1)
        step_idx, step_mask = idx[ks, es, js], bmask[ks, es, js]  # [T, B]
        real_shared = jnp.any(step_mask, axis=-1)
        real = (ks[:, None] == jnp.arange(num)[None, :]) & real_shared[:, None]  # [T, K]
        take = lambda tree, k: jax.tree.map(lambda x: x[k], tree)

        def step(both, inputs):
            i, m, e, j, k = inputs
            shared, private = both
            start = ClientStart(masking.merge(state.params, take(client_states.private, k)),
                                (), k, data=Batch(clients.tokens[k], clients.labels[k],
                                                  clients.mask[k]))
            batch = Batch(clients.tokens[k, i], clients.labels[k, i], m)
            rng = step_key(keys[k], e, j)
            loss = lambda sh, pr: algorithm.client_loss(masking.merge(sh, pr), batch, rng, start)
            (value, aux), (g_shared, g_own) = jax.value_and_grad(
                loss, argnums=(0, 1), has_aux=True)(shared, take(private, k))
            g_private = jax.tree.map(lambda z, g: jnp.zeros_like(z).at[k].set(g), private,
                                     g_own)
            return (value, aux), (g_shared, g_private)

        pair_opt = _shared_and_per_client(opt)
        init = (state.params, client_states.private)
        ((shared, private), _), (losses, aux) = local_steps(
            step, pair_opt, init, pair_opt.init(init), (step_idx, step_mask, es, js, ks),
            (real_shared, real))
        # each step's loss counted for its own domain only
        losses = jnp.where(real, losses[:, None], 0.0)
        aux = jax.tree.map(lambda a: jnp.where(real, a[:, None], 0.0), aux)
        return _finish(state, shared, private, real, losses, aux)

    def _finish(state, shared, private, real, losses, aux):
        """The new states and the round's metrics from per-step, per-domain ``[T, K]``
        losses and aux (zero where the domain did not step)."""
        num = real.shape[1]
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
        return (state._replace(params=shared, round=state.round + 1),
                ClientStates(private), metrics)  # a central trainer owns no hooks

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
