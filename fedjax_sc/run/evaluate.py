"""Evaluation metrics: Ag^k and Ag (Li et al. 2021, Sec. 5.3, Eq. 14-15).

Ag^k is the accuracy of the global (aggregated) model on client k's test set and Ag the
unweighted mean over clients. Evaluation of all clients is one jitted program: ``vmap`` over
clients, ``lax.scan`` over fixed-size batches of each client's (padded) test examples.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.base import Params
from fedjax_sc.run.round import ClientData


def make_evaluate(model: nn.Module, batch_size: int = 200, stacked_params: bool = False
                  ) -> Callable[[Params, ClientData], jax.Array]:
    """Builds ``evaluate(params, data) -> accuracy float32 [num_clients]``.

    Args:
      model: module whose ``apply({"params": p}, tokens)`` gives logits ``[batch, C]``.
      batch_size: test examples per forward pass (memory bound, not a metric setting).
      stacked_params: False to evaluate one global model on every client (Ag^k, Eq. 14);
        True when ``params`` has a leading client axis (one personalised model per client).

    Returns:
      A jitted function. ``data`` must hold global vocabulary ids (``vocab_ids`` None). A
      client with no test example gets accuracy 0.

    Raises:
      ValueError: (at call time) if ``data`` holds local-vocabulary ids.
    """

    def client_correct(params, tokens, labels, mask):
        n = tokens.shape[0]
        steps = math.ceil(n / batch_size)
        pad = steps * batch_size - n
        tokens = jnp.pad(tokens, ((0, pad), (0, 0))).reshape(steps, batch_size, -1)
        labels = jnp.pad(labels, (0, pad)).reshape(steps, batch_size)
        mask = jnp.pad(mask, (0, pad)).reshape(steps, batch_size)

        def body(total, batch):
            x, y, m = batch
            pred = jnp.argmax(model.apply({"params": params}, x), axis=-1)
            return total + jnp.sum((pred == y) & m), None

        total, _ = jax.lax.scan(body, jnp.zeros((), jnp.int32), (tokens, labels, mask))
        return total

    per_client = jax.vmap(client_correct, in_axes=(0 if stacked_params else None, 0, 0, 0))

    @jax.jit
    def evaluate(params: Params, data: ClientData) -> jax.Array:
        correct = per_client(params, data.tokens, data.labels, data.mask)
        return correct.astype(jnp.float32) / jnp.maximum(data.counts, 1).astype(jnp.float32)

    def checked(params: Params, data: ClientData) -> jax.Array:
        if data.vocab_ids is not None:
            raise ValueError("evaluation needs global vocabulary ids; build the test split with "
                             "client_data(..., local_vocab=False)")
        return evaluate(params, data)

    return checked


def mean_accuracy(per_client: jax.Array) -> float:
    """Ag = (1/K) sum_k Ag^k (Eq. 15): the unweighted mean over clients."""
    return float(jnp.mean(per_client))
