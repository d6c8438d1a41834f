"""Accuracy of many clients at once: Ag^k and Ag (Li et al. 2021, Sec. 5.3, Eq. 14-15) and the
personalised accuracies Ap uses (Eq. 16, :mod:`fedjax_sc.run.personalize`).

Ag^k is the accuracy of the global (aggregated) model on client k's test set and Ag the
unweighted mean over clients. Evaluation of all clients is one jitted program: ``vmap`` over
clients, ``lax.scan`` over fixed-size batches of each client's (padded) test examples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.base import Params
from fedjax_sc.run.round import ClientData

Scores = Callable[[Params, jax.Array], Any]
"""``scores(params, tokens [batch, len]) -> [batch, C]`` array, or ``{mode: [batch, C]}``
(logits or probabilities: only the argmax matters)."""


def count_correct(scores: Scores, params: Params, tokens: jax.Array, labels: jax.Array,
                  mask: jax.Array, batch_size: int = 200) -> Any:
    """Number of correctly classified real examples of one client.

    Args:
      scores: see :data:`Scores`.
      params: one client's params.
      tokens: int32 ``[n, len]`` (global vocabulary ids); labels int32 ``[n]``; mask bool
        ``[n]``.
      batch_size: examples per forward pass (memory bound only).

    Returns:
      int32 scalar, or ``{mode: int32 scalar}`` when ``scores`` returns a dict.
    """
    n = tokens.shape[0]
    steps = math.ceil(n / batch_size)
    pad = steps * batch_size - n
    tokens = jnp.pad(tokens, ((0, pad), (0, 0))).reshape(steps, batch_size, -1)
    labels = jnp.pad(labels, (0, pad)).reshape(steps, batch_size)
    mask = jnp.pad(mask, (0, pad)).reshape(steps, batch_size)

    def body(total, batch):
        x, y, m = batch
        hits = jax.tree.map(lambda s: jnp.sum((jnp.argmax(s, -1) == y) & m), scores(params, x))
        return jax.tree.map(jnp.add, total, hits), None

    zero = jax.tree.map(lambda _: jnp.zeros((), jnp.int32),
                        jax.eval_shape(scores, params, tokens[0]))
    total, _ = jax.lax.scan(body, zero, (tokens, labels, mask))
    return total


def make_evaluate(scores: Scores | nn.Module, batch_size: int = 200,
                  stacked_params: bool = False) -> Callable[[Params, ClientData], Any]:
    """Builds ``evaluate(params, data) -> accuracy float32 [num_clients]`` (or a dict of them).

    Args:
      scores: a function as :data:`Scores` (e.g. an algorithm's ``predict`` or
        ``global_predict``), or a Flax module (its ``apply`` logits are used).
      batch_size: test examples per forward pass (memory bound, not a metric setting).
      stacked_params: False to evaluate one global model on every client (Ag^k, Eq. 14);
        True when ``params`` has a leading client axis (one personalised model per client);
        or a ``jax.vmap`` in_axes prefix of ``params`` (e.g. ``(None, 0)`` for a pair of
        unstacked and stacked parts).

    Returns:
      A jitted function. ``data`` must hold global vocabulary ids (``vocab_ids`` None). A
      client with no test example gets accuracy 0. The result is a dict ``{mode: [K]}`` when
      ``scores`` returns a dict.

    Raises:
      ValueError: (at call time) if ``data`` holds local-vocabulary ids.
    """
    if isinstance(scores, nn.Module):
        model = scores
        scores = lambda params, tokens: model.apply({"params": params}, tokens)
    per_client = jax.vmap(lambda p, x, y, m: count_correct(scores, p, x, y, m, batch_size),
                          in_axes=(_params_axis(stacked_params), 0, 0, 0))

    @jax.jit
    def evaluate(params: Params, data: ClientData):
        correct = per_client(params, data.tokens, data.labels, data.mask)
        denom = jnp.maximum(data.counts, 1).astype(jnp.float32)
        return jax.tree.map(lambda c: c.astype(jnp.float32) / denom, correct)

    def checked(params: Params, data: ClientData):
        if data.vocab_ids is not None:
            raise ValueError("evaluation needs global vocabulary ids; build the test split with "
                             "client_data(..., local_vocab=False)")
        return evaluate(params, data)

    return checked


def make_personal_evaluate(predict: Scores, batch_size: int = 200
                           ) -> Callable[[Params, Params, ClientData], Any]:
    """Builds ``evaluate(shared, private, data) -> {mode: accuracy float32 [num_clients]}``:
    client k's personalised model is ``shared`` (the server's leaves, no client axis) joined
    with ``private`` leaves ``[num_clients, ...]`` (row k) -- the personalised accuracy before
    any fine-tuning (column 0 of the Ap curve).

    Args:
      predict: an algorithm's ``predict`` (params -> ``{mode: probabilities}``).
      batch_size: test examples per forward pass.

    Raises:
      ValueError: (at call time) if ``data`` holds local-vocabulary ids.
    """
    from fedjax_sc.algorithms.masking import merge

    return make_evaluate(lambda both, tokens: predict(merge(*both), tokens), batch_size,
                         stacked_params=(None, 0))


def mean_accuracy(per_client: jax.Array) -> float:
    """Ag = (1/K) sum_k Ag^k (Eq. 15): the unweighted mean over clients."""
    return float(jnp.mean(per_client))


def _params_axis(stacked_params):
    if stacked_params is True:
        return 0
    if stacked_params is False:
        return None
    return stacked_params
