"""Client losses (Li et al. 2021, Eq. 5)."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms.base import Batch, ClientLoss, Params


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``values`` float ``[batch]`` over rows where ``mask`` bool ``[batch]`` is True.

    Returns 0 (not NaN) when no row is real, so a fully padded batch yields zero gradients.
    """
    m = mask.astype(values.dtype)
    return jnp.sum(values * m) / jnp.maximum(jnp.sum(m), 1.0)


def cross_entropy(model: nn.Module) -> ClientLoss:
    """Softmax cross-entropy of ``model``'s logits, averaged over the real rows (Eq. 5).

    Args:
      model: a module whose ``apply({"params": p}, tokens)`` returns logits ``[batch, C]``.

    Returns:
      A :data:`ClientLoss`; its aux dict holds ``accuracy`` on the batch's real rows.
    """

    def loss(params: Params, batch: Batch, rng: jax.Array):
        del rng  # deterministic model: no dropout in the paper's architecture
        logits = model.apply({"params": params}, batch.tokens)
        per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch.labels)
        correct = (jnp.argmax(logits, -1) == batch.labels).astype(jnp.float32)
        return masked_mean(per_example, batch.mask), {"accuracy": masked_mean(correct, batch.mask)}

    return loss
