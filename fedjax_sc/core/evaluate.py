"""Accuracy of many clients at once: Ag^k and Ag (Li et al. 2021, Sec. 5.3, Eq. 14-15) and the
personalised accuracies Ap uses (Eq. 16, :mod:`fedjax_sc.core.personalize`).

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
import numpy as np

from fedjax_sc.algorithms.base import Params
from fedjax_sc.data.client_data import ClientData

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
                  stacked_params: bool = False,
                  client_chunk: int = 64) -> Callable[[Params, ClientData], Any]:
    """Builds ``evaluate(params, data) -> accuracy float32 [num_clients]`` (or a dict of them).

    Args:
      scores: a function as :data:`Scores` (e.g. an algorithm's ``predict`` or
        ``global_predict``), or a Flax module (its ``apply`` logits are used).
      batch_size: test examples per forward pass and client (at most the client's padded
        test size; memory bound, not a metric setting).
      stacked_params: False to evaluate one global model on every client (Ag^k, Eq. 14);
        True when ``params`` has a leading client axis (one personalised model per client);
        or a tuple of those for a tuple ``params`` (e.g. ``(None, 0)`` for a pair of
        unstacked and stacked parts).
      client_chunk: clients evaluated at once under ``vmap``; the chunks run in a
        ``lax.scan``, so memory is bounded for thousands of clients (memory bound only).

    Returns:
      A jitted function. ``data`` must hold global vocabulary ids (``vocab_ids`` None). A
      client with no test example gets NaN (no accuracy; :func:`mean_accuracy` leaves it out
      of the mean, reports show it as n/a). The result is a dict ``{mode: [K]}`` when
      ``scores`` returns a dict.

    Raises:
      ValueError: (at call time) if ``data`` holds local-vocabulary ids.
    """
    if isinstance(scores, nn.Module):
        model = scores
        scores = lambda params, tokens: model.apply({"params": params}, tokens)
    axes = _params_axis(stacked_params)
    per_client = jax.vmap(lambda p, x, y, m: count_correct(scores, p, x, y, m,
                                                           min(batch_size, x.shape[0])),
                          in_axes=(axes, 0, 0, 0))

    @jax.jit
    def evaluate(params: Params, data: ClientData):
        k = data.tokens.shape[0]
        chunk = min(client_chunk, k)
        steps = math.ceil(k / chunk)
        # the last chunk is padded with copies of the last client, dropped below
        ids = jnp.minimum(jnp.arange(steps * chunk), k - 1).reshape(steps, chunk)

        def body(_, idx):
            p = _take_mapped(params, axes, idx)
            return None, per_client(p, data.tokens[idx], data.labels[idx], data.mask[idx])

        _, correct = jax.lax.scan(body, None, ids)
        counts = data.counts.astype(jnp.float32)
        return jax.tree.map(lambda c: jnp.where(counts > 0, c.reshape(-1)[:k].astype(
            jnp.float32) / jnp.maximum(counts, 1.0), jnp.nan), correct)

    def checked(params: Params, data: ClientData):
        if data.vocab_ids is not None:
            raise ValueError("evaluation needs global vocabulary ids; build the test split with "
                             "client_data(..., local_vocab=False)")
        return evaluate(params, data)

    return checked


def _take_mapped(params: Params, axes, idx: jax.Array) -> Params:
    """Rows ``idx`` of the leaves of ``params`` whose vmap axis (prefix ``axes``) is 0."""
    if axes is None:
        return params
    if axes == 0:
        return jax.tree.map(lambda x: x[idx], params)
    return type(params)(_take_mapped(p, a, idx) for p, a in zip(params, axes))


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


def mean_accuracy(per_client: Any) -> float | None:
    """Ag = (1/K) sum_k Ag^k (Eq. 15): the unweighted mean over the clients that have test
    examples (NaN entries, clients without any, are left out); None when no client has any.

    Args:
      per_client: float ``[K]`` accuracies (NumPy or JAX), NaN where not defined.
    """
    values = np.asarray(per_client, dtype=np.float64)
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else None


def accuracy_list(per_client: Any, digits: int = 5) -> list[float | None]:
    """``per_client`` as a JSON-ready list: rounded floats, None where NaN (no test
    examples)."""
    return [None if np.isnan(v) else round(float(v), digits)
            for v in np.asarray(per_client, dtype=np.float64)]


def _params_axis(stacked_params):
    if stacked_params is True:
        return 0
    if stacked_params is False:
        return None
    return tuple(_params_axis(s) if isinstance(s, bool) else s for s in stacked_params)
