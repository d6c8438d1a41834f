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


def example_hits(scores: Scores, params: Params, tokens: jax.Array, labels: jax.Array,
                 mask: jax.Array, batch_size: int = 200) -> Any:
    """Which real examples of one client are classified correctly.

    Args:
      scores: see :data:`Scores`.
      params: one client's params.
      tokens: int32 ``[n, len]`` (global vocabulary ids); labels int32 ``[n]``; mask bool
        ``[n]``.
      batch_size: examples per forward pass (memory bound only).

    Returns:
      bool ``[n]`` (False at padding, and where a score is nan or +inf or every score is
      -inf: a diverged model classifies nothing; -inf on some classes rules them out), or
      ``{mode: bool [n]}`` when ``scores`` returns a dict.
    """
    n = tokens.shape[0]
    steps = math.ceil(n / batch_size)
    pad = steps * batch_size - n
    tokens = jnp.pad(tokens, ((0, pad), (0, 0))).reshape(steps, batch_size, -1)
    labels = jnp.pad(labels, (0, pad)).reshape(steps, batch_size)
    mask = jnp.pad(mask, (0, pad)).reshape(steps, batch_size)

    def body(_, batch):
        x, y, m = batch
        # a row with a nan or +inf score (a diverged model), or with every class at -inf,
        # is wrong, not argmax's pick of class 0; -inf on some classes rules them out, as a
        # masked logit does
        return None, jax.tree.map(lambda s: (jnp.argmax(s, -1) == y) & m
                                  & ~jnp.any(jnp.isnan(s) | (s == jnp.inf), -1)
                                  & jnp.any(s > -jnp.inf, -1), scores(params, x))

    _, hits = jax.lax.scan(body, None, (tokens, labels, mask))
    return jax.tree.map(lambda h: h.reshape(-1)[:n], hits)


def count_correct(scores: Scores, params: Params, tokens: jax.Array, labels: jax.Array,
                  mask: jax.Array, batch_size: int = 200) -> Any:
    """Number of correctly classified real examples of one client (arguments as
    :func:`example_hits`).

    Returns:
      int32 scalar, or ``{mode: int32 scalar}`` when ``scores`` returns a dict.
    """
    return jax.tree.map(lambda h: jnp.sum(h, dtype=jnp.int32),
                        example_hits(scores, params, tokens, labels, mask, batch_size))


def _over_clients(per_example: Callable, scores: Scores | nn.Module, batch_size: int,
                  stacked_params, client_chunk: int) -> Callable[[Params, ClientData], Any]:
    """``per_example(scores, params, tokens, labels, mask, batch) -> pytree`` of one client,
    run for every client of ``data``: ``vmap`` over chunks of ``client_chunk`` clients, the
    chunks in a ``lax.scan`` (memory bounded for thousands of clients). Returns a jitted
    ``f(params, data) -> pytree`` with a leading client axis ``[K, ...]`` that refuses
    local-vocabulary ids."""
    if isinstance(scores, nn.Module):
        model = scores
        scores = lambda params, tokens: model.apply({"params": params}, tokens)
    axes = _params_axis(stacked_params)
    per_client = jax.vmap(lambda p, x, y, m: per_example(scores, p, x, y, m,
                                                         min(batch_size, x.shape[0])),
                          in_axes=(axes, 0, 0, 0))

    @jax.jit
    def run(params: Params, data: ClientData):
        k = data.tokens.shape[0]
        chunk = min(client_chunk, k)
        steps = math.ceil(k / chunk)
        # the last chunk is padded with copies of the last client, dropped below
        ids = jnp.minimum(jnp.arange(steps * chunk), k - 1).reshape(steps, chunk)

        def body(_, idx):
            p = _take_mapped(params, axes, idx)
            return None, per_client(p, data.tokens[idx], data.labels[idx], data.mask[idx])

        _, out = jax.lax.scan(body, None, ids)
        return jax.tree.map(lambda o: o.reshape((-1,) + o.shape[2:])[:k], out)

    def checked(params: Params, data: ClientData):
        if data.vocab_ids is not None:
            raise ValueError("evaluation needs global vocabulary ids; build the test split with "
                             "client_data(..., local_vocab=False)")
        return run(params, data)

    return checked


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
      A function (jitted inside). ``data`` must hold global vocabulary ids (``vocab_ids``
      None). A client with no test example gets NaN (no accuracy; :func:`mean_accuracy`
      leaves it out of the mean, reports show it as n/a). The result is a dict
      ``{mode: [K]}`` when ``scores`` returns a dict.

    Raises:
      ValueError: (at call time) if ``data`` holds local-vocabulary ids.
    """
    correct = _over_clients(count_correct, scores, batch_size, stacked_params, client_chunk)

    def evaluate(params: Params, data: ClientData):
        counts = jnp.asarray(data.counts).astype(jnp.float32)
        return jax.tree.map(lambda c: jnp.where(counts > 0, c.astype(jnp.float32)
                                                / jnp.maximum(counts, 1.0), jnp.nan),
                            correct(params, data))

    return evaluate


def make_example_hits(scores: Scores | nn.Module, batch_size: int = 200,
                      stacked_params: bool = False,
                      client_chunk: int = 64) -> Callable[[Params, ClientData], Any]:
    """Builds ``hits(params, data) -> bool [num_clients, max_examples]``: True where client
    k's test example i is classified correctly (False at padding, ``data.mask`` False), the
    per-example record behind Ag^k (Li et al. 2021, Eq. 14) that paired comparisons of two
    models on the same test examples need (:mod:`fedjax_sc.run.paper.compare`).

    Arguments and errors as :func:`make_evaluate`; a dict ``{mode: [K, n]}`` when ``scores``
    returns a dict. ``hits.sum(1) / data.counts`` is :func:`make_evaluate`'s accuracy.
    """
    return _over_clients(example_hits, scores, batch_size, stacked_params, client_chunk)


def _take_mapped(params: Params, axes, idx: jax.Array) -> Params:
    """Rows ``idx`` of the leaves of ``params`` whose vmap axis (prefix ``axes``) is 0."""
    if axes is None:
        return params
    if axes == 0:
        return jax.tree.map(lambda x: x[idx], params)
    return type(params)(_take_mapped(p, a, idx) for p, a in zip(params, axes))


def make_personal_evaluate(predict: Scores, batch_size: int = 200, hits: bool = False
                           ) -> Callable[[tuple[Params, Params], ClientData], Any]:
    """Builds ``evaluate((shared, private), data) -> {mode: accuracy float32 [num_clients]}``:
    client k's personalised model is ``shared`` (the server's leaves, no client axis) joined
    with ``private`` leaves ``[num_clients, ...]`` (row k) -- the personalised accuracy before
    any fine-tuning (column 0 of the Ap curve).

    Args:
      predict: an algorithm's ``predict`` (params -> ``{mode: probabilities}``).
      batch_size: test examples per forward pass.
      hits: True for the per-example record instead, ``{mode: bool [num_clients,
        max_examples]}`` (as :func:`make_example_hits`).

    Raises:
      ValueError: (at call time) if ``data`` holds local-vocabulary ids.
    """
    from fedjax_sc.algorithms.masking import merge

    build = make_example_hits if hits else make_evaluate
    return build(lambda both, tokens: predict(merge(*both), tokens), batch_size,
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


def paired_ag_difference(hits_a: Any, hits_b: Any, mask: Any, resamples: int = 10_000,
                         seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Ag(A) - Ag(B) of two models (or two methods over paired training seeds) on the same
    test examples, with a paired, per-client (stratified) bootstrap confidence interval.

    Ag is the unweighted mean over clients of each client's accuracy (Li et al. 2021,
    Eq. 14-15), so each bootstrap draw resamples every client's test examples with
    replacement (the same draw for both models: the pairing) and recomputes the mean of the
    per-client differences. With one model a side the interval measures how much the gap
    could move with another test sample of the same size, not the spread over training seeds.
    With S seeds a side (A's seed s paired with B's seed s), the difference is the mean over
    the seeds and each draw also resamples the S seed pairs with replacement (the same test
    draw for every seed: the test set is one), so the interval holds both the training
    seeds' spread and the test sample's noise: a two-level bootstrap.

    Args:
      hits_a: bool ``[K, n]`` (one model a side) or ``[S, K, n]`` (S seeds a side,
        paired by index), True where the model classifies client k's test example i
        correctly (:func:`make_example_hits`); or float scores in [0, 1] of the same shape,
        e.g. the share of the Ap phase's evaluations that get the example right
        (:attr:`fedjax_sc.core.personalize.Personalization.correct` / n_Z), for Ap (Eq. 16)
        in place of Ag.
      hits_b: the same for model B.
      mask: bool ``[K, n]``, True at real examples. Clients without any are left out.
      resamples: bootstrap draws.
      seed: the NumPy seed of the draws.
      level: the two-sided coverage of the interval.

    Returns:
      ``{"diff": float, "low": float, "high": float, "per_client": float [K] (mean over
      seeds; NaN where no test example), "per_seed": float [S] (each pair's difference),
      "wins": int (clients where A is ahead), "losses": int, "ties": int, "disagree": int
      (examples the two score differently: exactly one model gets them right, with bool
      hits; summed over the seeds), "resamples",
      "level"}``; differences are fractions (multiply by 100 for points).

    Raises:
      ValueError: if the shapes differ, no client has a test example, the hits are neither
        bool nor scores in [0, 1], ``resamples`` < 1 or ``level`` is not in (0, 1).
    """
    check_bootstrap(resamples, level)
    m = np.asarray(mask, dtype=bool)
    a, b = (np.asarray(x, dtype=np.float64) for x in (hits_a, hits_b))
    a, b = (x[None] if x.ndim == 2 else x for x in (a, b))
    if not a.shape == b.shape or a.shape[1:] != m.shape or a.ndim != 3:
        raise ValueError(f"hits must share one [K, n] or [S, K, n] shape and mask be [K, n], "
                         f"got {np.shape(hits_a)}, {np.shape(hits_b)}, {m.shape}")
    counts = m.sum(1)
    if not counts.any():
        raise ValueError("no client has a test example")
    if not (np.all((a >= 0) & (a <= 1)) and np.all((b >= 0) & (b <= 1))):
        raise ValueError("hits must be bool or scores in [0, 1]")
    pairs = a.shape[0]
    delta = np.where(m, a, 0.0) - np.where(m, b, 0.0)  # [S, K, n]
    per_seed_client = np.where(counts > 0, delta.sum(2) / np.maximum(counts, 1), np.nan)
    per_client = per_seed_client.mean(0)
    rng = np.random.default_rng(seed)
    draws = np.zeros(resamples)
    real = np.flatnonzero(counts)
    # the seed pairs of each draw (none drawn for one pair: the one-model draws unchanged)
    picks = (rng.integers(0, pairs, size=(resamples, pairs)) if pairs > 1 else
             np.zeros((resamples, 1), np.int64))
    for k in real:
        d = delta[:, k, m[k]]  # [S, n_k]
        step = max(1, 2**22 // d.size)  # draws per batch: about 32 MiB gathered
        for lo in range(0, resamples, step):
            rows = min(step, resamples - lo)
            means = d[:, rng.integers(0, d.shape[1], size=(rows, d.shape[1]))].mean(2)
            draws[lo:lo + rows] += np.take_along_axis(means.T, picks[lo:lo + rows], 1).mean(1)
    draws /= real.size
    tail = (1.0 - level) / 2
    low, high = np.quantile(draws, [tail, 1.0 - tail])
    # a client's mean over the seeds is a whole number of examples (or of evaluations, for
    # shares of n_Z) over n_k: a nonzero one is at least 1 / (n_k S n_Z), far above the
    # rounding that can leave a tie (-3, +2, +1 examples) at 1e-19
    ahead = np.where(np.abs(per_client[real]) < 1e-12, 0.0, per_client[real])
    return {"diff": float(np.nanmean(per_client)), "low": float(low), "high": float(high),
            "per_client": per_client,
            "per_seed": [float(np.nanmean(x)) for x in per_seed_client],
            "wins": int((ahead > 0).sum()),
            "losses": int((ahead < 0).sum()), "ties": int((ahead == 0).sum()),
            "disagree": int((delta != 0).sum()), "resamples": resamples, "level": level}


def check_bootstrap(resamples: int, level: float) -> None:
    """Raises ValueError unless ``resamples`` >= 1 and 0 < ``level`` < 1 (NaN refused)."""
    if not 0 < level < 1 or resamples < 1:
        raise ValueError(f"--level must lie in (0, 1) and --resamples be at least 1, got "
                         f"{level} and {resamples}")
