"""Local training steps: the one masked step scan that the federated round, the multi-task
trainer and the Ap phase all run, and the shuffled mini-batch plans they feed it.

A client's local training is a ``lax.scan`` of optimizer steps over a fixed number of steps,
so that every client (and every round) has the same shapes and the program compiles once.
Clients with less data than the largest one, and the last short batch of an epoch, are
padded: a step whose batch has no real example is a *no-op* -- it leaves the parameters and
the optimizer state exactly as they were (``jnp.where(real, new, old)``; momentum must not move
them either), and its loss is reported as 0 and left out of the means.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax

from fedjax_sc import streams
from fedjax_sc.algorithms.base import Params

StepFn = Callable[[Params, Any], tuple[tuple[jax.Array, dict[str, jax.Array]], Params]]
"""``loss_and_grad(params, step_input) -> ((loss, aux), grads)`` for one step; ``step_input``
is the step's slice of the scan's inputs (a batch plan entry, a step index...)."""


def all_finite(tree: Any) -> jax.Array:
    """Whether every float leaf of ``tree`` is finite: a bool scalar (True for no leaf)."""
    return jnp.all(jnp.asarray([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)
                                if jnp.issubdtype(x.dtype, jnp.inexact)] + [True]))


def keep_where(real: Any, new: Any, old: Any) -> Any:
    """``new`` where ``real`` else ``old``, leaf by leaf.

    ``real`` is a bool scalar (the whole pytree), or a tuple with one mask per top-level part
    of ``new``/``old`` (tuples too), each a bool scalar or a ``[K]`` vector that selects rows
    of that part's leaves along their leading client axis.
    """
    if isinstance(real, tuple):
        return tuple(keep_where(r, n, o) for r, n, o in zip(real, new, old, strict=True))

    def select(n, o):
        r = jnp.reshape(real, jnp.shape(real) + (1,) * (jnp.ndim(n) - jnp.ndim(real)))
        return jnp.where(r, n, o)

    return jax.tree.map(select, new, old)


def local_steps(loss_and_grad: StepFn, optimizer: optax.GradientTransformation,
                params: Params, opt_state: Any, inputs: Any, real: Any
                ) -> tuple[tuple[Params, Any], tuple[jax.Array, dict[str, jax.Array]]]:
    """Masked optimizer steps as one ``lax.scan``.

    Args:
      loss_and_grad: see :data:`StepFn` (e.g. ``jax.value_and_grad(loss, has_aux=True)``
        behind a function that builds the step's batch from its input).
      optimizer: the optax transformation that turns gradients into updates.
      params, opt_state: where the steps start (a fresh ``optimizer.init(params)`` for a
        round's local training; carried across chunks in the Ap phase).
      inputs: the per-step inputs, a pytree whose leaves have a leading ``[S]`` axis.
      real: bool ``[S]``, False on padded steps; or a tuple of per-part masks for tuple
        ``params`` (``[S]`` or ``[S, K]``, see :func:`keep_where`).

    Returns:
      ``((params, opt_state), (losses, aux))`` after the S steps; ``losses`` and ``aux`` hold
      every step's values stacked on ``[S]`` as the loss returned them (padded steps
      included: mask them with ``real``).
    """

    def step(carry, x):
        params, opt_state = carry
        step_input, r = x
        (loss, aux), grads = loss_and_grad(params, step_input)
        updates, new_opt_state = optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        return (keep_where(r, new_params, params),
                keep_where(r, new_opt_state, opt_state)), (loss, aux)

    return jax.lax.scan(step, (params, opt_state), (inputs, real))


def step_key(key: jax.Array, epoch: jax.Array, step: jax.Array) -> jax.Array:
    """The key a client's loss gets at local step ``step`` (int32 scalar, the batch's index in
    its epoch) of epoch ``epoch``: ``fold_in(fold_in(fold_in(key, epoch), streams.STEP),
    step)`` for the client's round key ``key``, apart from the keys of the epoch's shuffle
    (:func:`epoch_order` folds the example indices into ``fold_in(key, epoch)``), and, like
    them, independent of the client's padding."""
    epoch_key = jax.random.fold_in(key, epoch)
    return jax.random.fold_in(jax.random.fold_in(epoch_key, streams.STEP), step)


def epoch_order(key: jax.Array, mask: jax.Array) -> jax.Array:
    """A random order of one client's examples for one epoch: int32 ``[max_examples]``, the
    real ones (``mask`` True) first. Example i's place depends only on ``key`` and i, not on
    the amount of padding."""
    noise = jax.vmap(lambda i: jax.random.uniform(jax.random.fold_in(key, i)))(
        jnp.arange(mask.shape[0]))
    return jnp.argsort(jnp.where(mask, noise, 2.0)).astype(jnp.int32)


def epoch_schedule(key: jax.Array, mask: jax.Array, batch_size: int,
                   local_epochs: int) -> tuple[jax.Array, jax.Array]:
    """One client's shuffled mini-batch plan for a round.

    Each epoch visits every real example once in a fresh random order; the last batch of an
    epoch may be short (masked rows) and, for clients smaller than the largest one, whole
    trailing batches of each epoch are masked (no-op steps). The order of the real examples
    depends only on ``key`` and the example indices, not on how much padding follows them, so
    a client padded to a larger size trains exactly as it would alone.

    Args:
      key: PRNG key of this client and round.
      mask: bool ``[max_examples]``, True on real examples (a prefix).
      batch_size: B.
      local_epochs: E.

    Returns:
      ``(indices, batch_mask)``: int32 and bool ``[E, ceil(max_examples / B), B]``.
    """
    n = mask.shape[0]
    steps = math.ceil(n / batch_size)
    pad = steps * batch_size - n
    count = jnp.sum(mask)

    def one_epoch(k):
        order = jnp.concatenate([epoch_order(k, mask), jnp.zeros((pad,), jnp.int32)])
        real = jnp.arange(steps * batch_size) < count
        return order.reshape(steps, batch_size), real.reshape(steps, batch_size)

    epochs = jnp.arange(local_epochs)
    return jax.vmap(lambda e: one_epoch(jax.random.fold_in(key, e)))(epochs)


def stream_batch(key: jax.Array, mask: jax.Array, batch_size: int, s: jax.Array
                 ) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Batch ``s`` of one client's endless stream of shuffled epochs: the real batches of
    :func:`epoch_schedule` in the same order, with the same keys, and no padding batches
    between epochs (a budget of tau steps then means tau real steps; used by the round with
    heterogeneous local work, :mod:`fedjax_sc.core.heterogeneity`).

    Args:
      key: PRNG key of this client and round.
      mask: bool ``[max_examples]``, True on real examples (a prefix).
      batch_size: B.
      s: int32 scalar, the step.

    Returns:
      ``(indices, batch_mask, epoch, batch)``: int32 and bool ``[B]``, and the int32 epoch e
      and batch j of step s (e = s // ceil(N^k / B)), whose loss key is
      :func:`step_key` ``(key, e, j)`` as in the epoch plan. A client without examples gets an
      all-False mask.
    """
    n = mask.shape[0]
    count = jnp.sum(mask).astype(jnp.int32)
    per_epoch = jnp.maximum((count + batch_size - 1) // batch_size, 1)
    e, j = s // per_epoch, s % per_epoch
    pad = math.ceil(n / batch_size) * batch_size - n
    order = jnp.concatenate([epoch_order(jax.random.fold_in(key, e), mask),
                             jnp.zeros((pad,), jnp.int32)])
    indices = jax.lax.dynamic_slice(order, (j * batch_size,), (batch_size,))
    return indices, j * batch_size + jnp.arange(batch_size) < count, e, j
