"""The personalisation metric Ap (Li et al. 2021, Sec. 5.3 Eq. 16, Sec. 5.6.2, Fig. 4).

After the last round every client fine-tunes its own model -- the global shared leaves joined
with its private leaves -- on its own training data for ``Z = n_Z * z`` steps with the
algorithm's client loss and a small learning rate (``mu * LR``, mu = 0.01 by default, Table 5),
and evaluates on its test set every z steps. ``Ap_t^k`` (t = 1..n_Z) are those accuracies,
``Ap^k`` their mean and ``Ap`` the mean over clients. Column 0 of the curve is the personalised
model before any fine-tuning (for FedAvg that is Ag^k, Remark 4; for FedFusion it is the
model with its reference extractor set to the current extractor, as every client that starts
training sets it (:mod:`fedjax_sc.core.copies`), so it differs from the model the rounds
evaluated, which fuses with the previous round's extractor). A model whose fine-tuning
turns non-finite (too large a mu) classifies nothing from then on: accuracy 0, not the share
of the class that argmax picks from nan scores; :attr:`Personalization.finite` records where.

The paper gives n_Z = 25 (Fig. 4) but not z: the default here is z = 10 steps (80 reviews at
batch 8, about 5% of an FDU client's training set), configurable.

All clients fine-tune at once under ``vmap``; the steps are a ``lax.scan``, evaluation is
inside the same compiled program. Step t of a client uses batch ``t mod nb`` of epoch
``t div nb`` (nb = the client's number of batches), so every step is a real one; with
local-vocabulary client data only the word-embedding rows of V^k are trained (exact, as in
:mod:`fedjax_sc.core.round`) and are written into the full tables for each evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, bind
from fedjax_sc.core import copies, leaves, participation, population
from fedjax_sc.core.evaluate import example_hits, mean_accuracy
from fedjax_sc.core.local import all_finite, epoch_order, local_steps, step_key
from fedjax_sc.core.round import (
    ClientStates,
    ServerState,
    gather_table_rows,
    scatter_table_rows,
)
from fedjax_sc.data.client_data import ClientData

DEFAULT_NUM_EVALS = 25
"""n_Z (paper Fig. 4: 25 personalisation steps are plotted)."""
DEFAULT_STEPS_PER_EVAL = 10
"""z: the paper does not give it (see the module docstring)."""
DEFAULT_LR_MULTIPLIER = 0.01
"""mu (paper Table 5: 0.01 is best on FDU and IYY)."""


class Personalization(NamedTuple):
    """Result of the Ap phase.

    Attributes:
      curve: ``{mode: float32 [num_clients, n_Z + 1]}`` test accuracy per inference mode;
        column 0 before fine-tuning, column t after t * z steps.
      steps_per_eval: z.
      correct: ``{mode: int32 [num_clients, max_examples]}``, per test example the number of
        the n_Z evaluations (t = 1..n_Z; t = 0 alone when n_Z = 0) that classify it correctly
        (0 at padding): ``correct / n_Z`` averaged over a client's real examples is its Ap^k,
        the per-example record a paired comparison of two methods' Ap needs
        (:func:`fedjax_sc.core.evaluate.paired_ag_difference`). None where not recorded.
      finite: bool ``[num_clients, n_Z + 1]``, whether the client's model was finite at each
        column of the curve (a column where it was not scores 0). None where not recorded.
    """

    curve: dict[str, np.ndarray]
    steps_per_eval: int
    correct: dict[str, np.ndarray] | None = None
    finite: np.ndarray | None = None

    def nonfinite_from(self) -> np.ndarray:
        """int ``[num_clients]``: the first column of the curve at which the client's model
        was not finite (its fine-tuning diverged: too large a mu), -1 where it stayed finite
        (also where ``finite`` was not recorded)."""
        k = np.asarray(next(iter(self.curve.values()))).shape[0]
        if self.finite is None:
            return np.full(k, -1)
        bad = ~np.asarray(self.finite, bool)
        return np.where(bad.any(axis=1), bad.argmax(axis=1), -1)

    def ap_per_client(self, mode: str) -> np.ndarray:
        """Ap^k (Eq. 16): float ``[num_clients]``, the mean of columns 1..n_Z (column 0 when
        n_Z = 0); NaN for a client without test examples."""
        c = np.asarray(self.curve[mode])
        return c[:, 1:].mean(axis=1) if c.shape[1] > 1 else c[:, 0]

    def ap(self, mode: str) -> float | None:
        """Ap = (1/K) sum_k Ap^k (Eq. 16), over the clients that have test examples."""
        return mean_accuracy(self.ap_per_client(mode))

    def ap_t(self, mode: str) -> np.ndarray:
        """The Ap_t curve (Fig. 4): float ``[n_Z + 1]``, the mean per column over the clients
        that have test examples."""
        c = np.asarray(self.curve[mode], dtype=np.float64)
        has = ~np.isnan(c[:, 0])
        return c[has].mean(axis=0) if has.any() else np.full(c.shape[1], np.nan)


def make_personalize(algorithm: Algorithm, optimizer: optax.GradientTransformation, *,
                     batch_size: int, num_evals: int = DEFAULT_NUM_EVALS,
                     steps_per_eval: int = DEFAULT_STEPS_PER_EVAL, eval_batch_size: int = 200,
                     table_paths: tuple[tuple[str, ...], ...] | None = None,
                     clients_per_call: int | None = None
                     ) -> Callable[[ServerState, ClientStates, ClientData, ClientData,
                                    jax.Array], Personalization]:
    """Builds the compiled Ap phase.

    Args:
      algorithm: the trained algorithm (its client loss and ``predict`` are used).
      optimizer: the fine-tuning optimizer, e.g. ``client_sgd(mu * LR, momentum)``; its state
        starts fresh and runs through all Z steps.
      batch_size: fine-tuning batch size (paper: the training batch size).
      num_evals: n_Z (>= 0).
      steps_per_eval: z (>= 0); 0 gives n_Z copies of the accuracy before fine-tuning.
      eval_batch_size: test examples per forward pass.
      table_paths: word-embedding tables trained by rows with local-vocabulary train data
        (default: every path of :func:`fedjax_sc.core.leaves.is_table`).
      clients_per_call: the clients fine-tuned at once (one call of the compiled program per block
        of them, the last block filled up with copies of its first client whose results are dropped;
        the device holds one block's data, states and full tables); None: all at once. A client's
        curve does not depend on it: its randomness and index are its own.

    Returns:
      ``personalize(server_state, client_states, train, test, rng, first=0) ->
      Personalization``; ``train`` may hold local-vocabulary ids, ``test`` must hold global
      ids; ``first``: the index of the first client of ``train`` in the whole scene (a
      process's share: client k's randomness and index are those of client ``first + k``).

    Raises:
      ValueError: negative n_Z / z, batch_size < 1, clients_per_call < 1, or (at call time)
        local ids in ``test`` or ``train`` and ``test`` of different client counts.
    """
    members = make_population_personalize(
        lambda values: (algorithm, optimizer), batch_size=batch_size, num_evals=num_evals,
        steps_per_eval=steps_per_eval, eval_batch_size=eval_batch_size, table_paths=table_paths,
        clients_per_call=clients_per_call)

    def personalize(state: ServerState, client_states: ClientStates, train: ClientData,
                    test: ClientData, rng: jax.Array, first: int = 0) -> Personalization:
        stacked = jax.tree.map(lambda x: x[None], (state, client_states, rng))
        return members(*stacked[:2], train, test, stacked[2], {}, first)[0]

    return personalize


def make_population_personalize(
        build: Callable[[dict[str, Any]], tuple[Algorithm, optax.GradientTransformation]], *,
        batch_size: int, num_evals: int = DEFAULT_NUM_EVALS,
        steps_per_eval: int = DEFAULT_STEPS_PER_EVAL, eval_batch_size: int = 200,
        table_paths: tuple[tuple[str, ...], ...] | None = None, member_axis: str = "auto",
        clients_per_call: int | None = None) -> Callable[..., list[Personalization]]:
    """The Ap phase of P members of a population (:mod:`fedjax_sc.core.population`) as one
    compiled program: each member fine-tunes its own model with its own algorithm values and
    learning rate (e.g. a grid over mu, Table 5, or over lambda_kt).

    Args:
      build: ``build(values) -> (algorithm, optimizer)`` of one member from its scalar values
        (traced inside the program; the structure must not depend on them).
      member_axis: how the members run (:func:`fedjax_sc.core.population.over_members`:
        ``lax.map`` on the CPU, ``vmap`` elsewhere by default).
      batch_size: as :func:`make_personalize`, shared by the members.
      num_evals: as :func:`make_personalize`.
      steps_per_eval: as :func:`make_personalize`.
      eval_batch_size: as :func:`make_personalize`.
      table_paths: as :func:`make_personalize`.
      clients_per_call: as :func:`make_personalize`.

    Returns:
      ``personalize(states, client_states, train, test, rngs, hparams, first=0) ->
      [Personalization] * P``: ``states`` / ``client_states`` stacked ``[P, ...]``, ``rngs``
      the members' Ap keys ``[P]``, ``hparams`` name -> float32 ``[P]`` (``build``'s
      values; ``{}`` when no value differs); ``train`` / ``test`` / ``first`` shared, as in
      :func:`make_personalize`. A population of one computes exactly what
      :func:`make_personalize` does.

    Raises:
      ValueError: negative n_Z / z, batch_size < 1, clients_per_call < 1, an unknown
        ``member_axis``, or (at call time) local ids in ``test`` or train and test of
        different numbers of clients.
    """
    if num_evals < 0 or steps_per_eval < 0 or batch_size < 1:
        raise ValueError(f"need num_evals >= 0, steps_per_eval >= 0, batch_size >= 1; got "
                         f"{num_evals}, {steps_per_eval}, {batch_size}")
    if clients_per_call is not None and clients_per_call < 1:
        raise ValueError(f"clients_per_call must be >= 1 or None, got {clients_per_call}")
    population.check_member_axis(member_axis)

    def member(state, client_states, rng, values, train, test, first):
        algorithm, optimizer = build(values)
        return _member_phase(algorithm, copies.freeze(optimizer, algorithm.local_copies),
                             batch_size, num_evals, steps_per_eval, eval_batch_size,
                             table_paths, state, client_states, train, test, rng, first)

    def run(states, client_states, train, test, rngs, hparams, first):
        return population.over_members(
            lambda s, c, k, v: member(s, c, k, v, train, test, first),
            (states, client_states, rngs, dict(hparams)), member_axis)

    compiled = jax.jit(run)

    def personalize(states: ServerState, client_states: ClientStates, train: ClientData,
                    test: ClientData, rngs: jax.Array, hparams: dict[str, Any],
                    first: int = 0) -> list[Personalization]:
        if test.vocab_ids is not None:
            raise ValueError("the test split must hold global vocabulary ids")
        if train.num_clients != test.num_clients:
            raise ValueError(f"train has {train.num_clients} clients, test "
                             f"{test.num_clients}")
        values = {k: jnp.asarray(v) for k, v in hparams.items()}
        n = train.num_clients
        block = n if clients_per_call is None else min(clients_per_call, n)
        if block == n:
            curve, correct, finite = jax.device_get(compiled(
                states, client_states, train, test, rngs, values, jnp.int32(first)))
        else:
            curve, correct, finite = _by_blocks(compiled, block, states, client_states, train,
                                                test, rngs, values, first)
        size = int(np.shape(rngs)[0])
        return [Personalization({k: np.asarray(v[i]) for k, v in curve.items()},
                                steps_per_eval,
                                {k: np.asarray(v[i]) for k, v in correct.items()},
                                np.asarray(finite[i]))
                for i in range(size)]

    return personalize


def _by_blocks(compiled, block, states, client_states, train, test, rngs, values, first):
    """``compiled`` on the clients in blocks of ``block`` (the last padded with copies of its
    first client, whose results are dropped), the curves joined on the client axis; host
    arrays."""
    client_states, train, test = jax.device_get((client_states, train, test))
    return participation.by_blocks(
        lambda lo, own, tr, te: compiled(states, own, tr, te, rngs, values,
                                         jnp.int32(first + lo)),
        train.num_clients, block, (client_states, train, test), (1, 0, 0), out_axis=1)


def _member_phase(algorithm, optimizer, batch_size, num_evals, steps_per_eval,
                  eval_batch_size, table_paths, state, client_states, train, test, rng,
                  first):
    """One member's Ap phase (traced): every client fine-tuned under ``vmap``; returns
    ``(curve, correct, finite)`` as :class:`Personalization` holds them, JAX arrays."""

    def one_client(shared, private, own, ids, vmask, tokens, labels, mask, test_tokens,
                   test_labels, test_mask, key, client, server, tables):
        full = masking.merge(shared, private)
        full = copies.make_copies(full, algorithm.local_copies)
        work = gather_table_rows(full, ids, tables)
        # a loss with a centre (FedProx) is centred at the model before fine-tuning; no
        # knowledge exchange in this phase; an algorithm's own states as training left them
        start = ClientStart(work, (), client, gather_table_rows(own, ids, tables),
                            gather_table_rows(server, ids, tables), Batch(tokens, labels, mask))
        loss = algorithm.personal_loss or algorithm.client_loss
        loss_and_grad = jax.value_and_grad(bind(loss, start), has_aux=True)
        predict = algorithm.predict
        count = jnp.sum(mask)
        num_batches = jnp.maximum((count + batch_size - 1) // batch_size, 1)

        def accuracy(work):  # (accuracy, which examples are right) per mode, finite
            params = scatter_table_rows(work, full, ids, vmask, tables)
            hits = example_hits(predict, params, test_tokens, test_labels, test_mask,
                                eval_batch_size)
            # a model gone non-finite answers nothing: every example wrong (argmax of nan
            # scores would pick class 0 and score that class's share)
            finite = all_finite(work)
            hits = jax.tree.map(lambda h: h & finite, hits)
            n = jnp.sum(test_mask).astype(jnp.float32)  # no test example: NaN, no accuracy
            acc = jax.tree.map(lambda h: jnp.where(
                n > 0, jnp.sum(h, dtype=jnp.int32).astype(jnp.float32) / jnp.maximum(n, 1.0),
                jnp.nan), hits)
            return acc, hits, finite

        def step(work, t):
            e, j = t // num_batches, t % num_batches
            pos = j * batch_size + jnp.arange(batch_size)
            order = epoch_order(jax.random.fold_in(key, e), mask)
            idx = order[jnp.minimum(pos, mask.shape[0] - 1)]
            rng = step_key(key, e, j)
            return loss_and_grad(work, Batch(tokens[idx], labels[idx], pos < count), rng)

        def chunk(carry, c):
            t = c * steps_per_eval + jnp.arange(steps_per_eval)
            real = (t % num_batches) * batch_size < count  # a client without data does not move
            carry, _ = local_steps(step, optimizer, *carry, t, real)
            return carry, accuracy(carry[0])

        before, before_hits, before_finite = accuracy(work)
        _, (after, hits, finite) = jax.lax.scan(chunk, (work, optimizer.init(work)),
                                                jnp.arange(num_evals))
        curve = jax.tree.map(lambda b, a: jnp.concatenate([b[None], a]), before, after)
        correct = jax.tree.map(lambda b, h: (jnp.sum(h, 0, dtype=jnp.int32) if num_evals
                                             else b.astype(jnp.int32)), before_hits, hits)
        return curve, correct, jnp.concatenate([before_finite[None], finite])

    local_rows = train.vocab_ids is not None
    tables = (leaves.table_paths(state.params, client_states.private, among=table_paths)
              if local_rows else [])
    ids, vmask = ((train.vocab_ids, train.vocab_mask) if local_rows else
                  (jnp.zeros((train.num_clients, 1), jnp.int32),) * 2)
    clients = first + jnp.arange(train.num_clients, dtype=jnp.int32)
    keys = jax.vmap(lambda k: jax.random.fold_in(rng, k))(clients)
    fn = lambda *a: one_client(*a, tables)
    return jax.vmap(fn, in_axes=(None,) + (0,) * 12 + (None,))(
        state.params, client_states.private, client_states.algorithm, ids, vmask,
        train.tokens, train.labels, train.mask, test.tokens, test.labels, test.mask, keys,
        clients, state.algorithm)

