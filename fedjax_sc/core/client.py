"""One client's local training in a federated round: the per-client function that
:func:`fedjax_sc.core.round.build_round` vmaps over the client axis, and its metrics (Li et al.
2021, Alg. 1 lines 3-11: E local epochs of mini-batch SGD on the client's own data)."""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.base import (
    Algorithm,
    Batch,
    ClientStart,
    Params,
    bind,
    check_like,
)
from fedjax_sc.core import copies
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.core.local import (
    all_finite,
    epoch_schedule,
    local_steps,
    step_key,
    stream_batch,
)


class RoundMetrics(NamedTuple):
    """Per-client figures of one round (all ``[num_clients]``).

    Attributes:
      train_loss: float32 mean client loss over its real local steps.
      train_accuracy: float32 mean training-batch accuracy over its real local steps.
      steps: int32 number of real (unmasked) local steps.
      finite: bool, False if the client's loss or params turned NaN/inf (or, where it
        trained, its algorithm state or message: :class:`~fedjax_sc.algorithms.base.Hooks`).
      aux: float32 ``{name: [num_clients]}``, every entry of the client loss's aux dict
        averaged over the client's real local steps (KTEPS: ``kt``, ``div``, ...).
    """

    train_loss: jax.Array
    train_accuracy: jax.Array
    steps: jax.Array
    finite: jax.Array
    aux: dict[str, jax.Array] = {}


def start_optimizer(algorithm: Algorithm, start: ClientStart):
    """The client optimizer's state a client's local steps start from: a fresh
    ``init(start.params)`` (``start.params`` with its local copies made), or what
    :attr:`~fedjax_sc.algorithms.base.Hooks.optimizer_init` makes of it (checked to keep its
    structure, shapes and dtypes; ValueError otherwise)."""
    opt = copies.freeze(algorithm.client_optimizer, algorithm.local_copies)
    fresh = opt.init(start.params)
    if algorithm.hooks.optimizer_init is None:
        return fresh
    state = algorithm.hooks.optimizer_init(start, fresh)  # e.g. the client's kept momentum
    check_like(f"{algorithm.name}: Hooks.optimizer_init returned an optimizer state", state,
               fresh)
    return state


def build_client_update(algorithm: Algorithm, *, batch_size: int, local_epochs: int,
                        work: LocalWork | None = None, optimizer_state: bool = False):
    """One client's local training for a round (vmapped over clients by
    :func:`fedjax_sc.core.round.build_round`).

    Returns:
      ``client_update(params, tokens, labels, mask, key, knowledge=(), client=0, budget=None,
      state=(), server=()) -> (params, RoundMetrics, start)`` for one client (with
      ``optimizer_state``, ``(params, RoundMetrics, start, optimizer state)``): ``tokens``
      int32 ``[max_examples, len]``, ``labels`` int32 ``[max_examples]``, ``mask`` bool
      ``[max_examples]``; ``knowledge``, ``client`` (int32 scalar), the client's algorithm
      ``state``, the ``server``'s and the client's whole split (``data``) reach the loss in its
      :class:`~fedjax_sc.algorithms.base.ClientStart` ``start`` (with ``params``, its local
      copies made (:mod:`fedjax_sc.core.copies`), as the start params), which is
      returned for the algorithm's ``client_end`` hook with the optimizer's state after the
      steps (they start from a fresh ``client_optimizer.init``, or from what
      :attr:`~fedjax_sc.algorithms.base.Hooks.optimizer_init` makes of it);
      the metrics fields are scalars. The loss of epoch e, batch j gets the key
      :func:`~fedjax_sc.core.local.step_key` ``(key, e, j)`` -- independent of padding too.
      With an active ``work`` (:mod:`fedjax_sc.core.heterogeneity`) the client runs the
      first ``budget`` (int32 scalar) steps of its stream of epochs, within a scan of
      ``work.scan_length`` steps.
    """
    opt = copies.freeze(algorithm.client_optimizer, algorithm.local_copies)
    hetero = work is not None and work.active

    def gradient_fn(start: ClientStart):
        loss = bind(algorithm.client_loss, start)
        return (jax.value_and_grad(loss, has_aux=True) if algorithm.client_gradient is None
                else algorithm.client_gradient(loss))

    def client_update(params: Params, tokens, labels, mask, key, knowledge=(), client=0,
                      budget=None, state=(), server=()):
        params = copies.make_copies(params, algorithm.local_copies)
        start = ClientStart(params, knowledge, client, state, server,
                            Batch(tokens, labels, mask))
        loss_and_grad = gradient_fn(start)

        def step(params, inputs):
            i, m, e, j = stream_batch(key, mask, batch_size, inputs) if hetero else inputs
            rng = step_key(key, e, j)
            return loss_and_grad(params, Batch(tokens[i], labels[i], m), rng)

        if hetero:
            num_steps = work.scan_length(batch_size, local_epochs, tokens.shape[0])
            inputs = jnp.arange(num_steps, dtype=jnp.int32)
            real = (inputs < budget) & jnp.any(mask)
        else:
            idx, batch_mask = epoch_schedule(key, mask, batch_size, local_epochs)
            e, j = jnp.meshgrid(jnp.arange(idx.shape[0]), jnp.arange(idx.shape[1]),
                                indexing="ij")
            flat = lambda x: x.reshape((-1,) + x.shape[2:])
            inputs = (flat(idx), flat(batch_mask), flat(e), flat(j))
            real = jnp.any(flat(batch_mask), axis=-1)
        (params, opt_state), (losses, aux) = local_steps(
            step, opt, params, start_optimizer(algorithm, start), inputs, real)
        losses = jnp.where(real, losses, 0.0)
        aux = jax.tree.map(lambda a: jnp.where(real, a, 0.0), aux)
        n = jnp.sum(real)
        finite = all_finite((losses, params))
        denom = jnp.maximum(n, 1).astype(jnp.float32)
        aux = {k: jnp.sum(v) / denom for k, v in aux.items()}
        metrics = RoundMetrics(jnp.sum(losses) / denom, aux["accuracy"], n.astype(jnp.int32),
                               finite, aux)
        if optimizer_state:
            return params, metrics, start, opt_state
        return params, metrics, start

    return client_update
