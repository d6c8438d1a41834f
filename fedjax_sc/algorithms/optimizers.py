"""Client optimizers (Li et al. 2021, Sec. 5.2): SGD with momentum, optionally a separate
learning rate for the word embeddings through optax's partitioned transforms."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import hparams, masking


class RoundStep(NamedTuple):
    """A count of the local steps taken in the current round, as a node of an optimizer's
    state (int32 scalar ``count``): a schedule within the round (FedRep's head steps, then
    body steps) keeps it here, so that a client optimizer state kept across rounds
    (:mod:`fedjax_sc.algorithms.kept_optimizer`) starts it afresh every round while it keeps
    the momentum."""

    count: jax.Array


EMBEDDING_RULE = r"^(private_)?embedding/"
"""Leaves of the word-embedding tables (``embedding/embedding``, ``private_embedding/...``)."""


LEARNING_RATE = 0.01
"""The client learning rate of the paper's FDU runs (Li et al. 2021, Sec. 5.2); the builders'
default."""
MOMENTUM = 0.9
"""The client SGD momentum of the paper (Sec. 5.2)."""


def client_sgd(learning_rate: float, momentum: float = MOMENTUM,
               embedding_learning_rate: float | None = None) -> optax.GradientTransformation:
    """SGD with momentum; with ``embedding_learning_rate`` the word-embedding tables get that
    step size and every other leaf ``learning_rate`` (the paper's IYY setting: 0.01 and 0.1).

    The partition is ``optax.multi_transform`` over labels from
    :func:`fedjax_sc.algorithms.masking.label_leaves`, so a model without an embedding table
    raises instead of silently training everything at one rate.

    Args:
      learning_rate: step size (>= 0); a float or a scalar array (traced in a population,
        :mod:`fedjax_sc.algorithms.hparams`), as every argument here.
      momentum: in [0, 1); 0 gives plain SGD.
      embedding_learning_rate: optional step size for the embedding tables (>= 0).

    Returns:
      An optax transformation.

    Raises:
      ValueError: a negative learning rate or a momentum outside [0, 1).
    """
    for name, lr in (("learning_rate", learning_rate),
                     ("embedding_learning_rate", embedding_learning_rate)):
        hparams.check(name, lr, lambda v: v >= 0, ">= 0")
    hparams.check("momentum", momentum, lambda v: 0.0 <= v < 1.0, "in [0, 1)")
    # a traced momentum keeps the trace (decay 0 is plain SGD to the bit)
    sgd = lambda lr: optax.sgd(lr, momentum=None if hparams.is_zero(momentum) else momentum)
    if embedding_learning_rate is None:
        return sgd(learning_rate)
    return optax.multi_transform(
        {"embedding": sgd(embedding_learning_rate), "rest": sgd(learning_rate)},
        lambda params: masking.label_leaves(
            params, {"embedding": EMBEDDING_RULE, "rest": r"^(?!(private_)?embedding/)"}))


def momentum_steps(steps: jax.Array, momentum: hparams.Value) -> jax.Array:
    """sum_{t=1..K} (1 - rho^t) / (1 - rho) for int32 scalar K and rho in [0, 1): the steps
    of a constant gradient under heavy-ball momentum (optax's); float32 scalar, K at rho = 0."""
    k, rho = steps.astype(jnp.float32), jnp.asarray(momentum, jnp.float32)
    safe = jnp.where(rho > 0, 1.0 - rho, 1.0)
    return jnp.where(rho > 0, (k - rho * (1.0 - rho ** k) / safe) / safe, k)


SCHEDULES = ("constant", "cosine", "step:EVERY:FACTOR", "exponential:FACTOR")
"""The forms of a round schedule of the client learning rate (:func:`round_schedule`)."""


def round_schedule(spec: str, rounds: int) -> Callable[[int], float]:
    """The client learning rate's multiplier in round r = 1..rounds, from optax's schedules
    (the schedule's step is r - 1, so round 1 trains at the initial LR):

    * ``constant``: 1 in every round (the paper's runs, as we read them);
    * ``cosine``: ``optax.cosine_decay_schedule(1, decay_steps=rounds)``, from 1 to 0 over the
      run (so ``--resume`` with another ``--rounds`` is refused: its rounds so far trained
      on another decay);
    * ``step:EVERY:FACTOR``: times FACTOR every EVERY rounds
      (``optax.exponential_decay(1, EVERY, FACTOR, staircase=True)``);
    * ``exponential:FACTOR``: times FACTOR every round.

    The Ap phase's mu multiplies the initial LR, whatever the schedule ("the initial LR used
    in global aggregation", Li et al. 2021, Sec. 5.6.2).

    Args:
      spec: one of :data:`SCHEDULES`.
      rounds: the run's number of rounds (>= 1).

    Returns:
      ``multiplier(r) -> float`` (a Python float in [0, 1]).

    Raises:
      ValueError: a malformed spec, EVERY < 1, or FACTOR outside (0, 1] (names the spec).
    """
    name, *args = str(spec).split(":")
    try:
        nums = [float(a) for a in args]
    except ValueError:
        nums = None
    forms = {"constant": 0, "cosine": 0, "step": 2, "exponential": 1}
    if name not in forms or nums is None or len(nums) != forms[name]:
        raise ValueError(f"--lr-schedule {spec!r}: choose from {', '.join(SCHEDULES)}")
    if name == "step" and (nums[0] < 1 or nums[0] != int(nums[0])):
        raise ValueError(f"--lr-schedule {spec!r}: EVERY must be a whole number >= 1")
    if nums and not 0.0 < nums[-1] <= 1.0:  # optax reads a rate of 0 as no decay
        raise ValueError(f"--lr-schedule {spec!r}: FACTOR must lie in (0, 1]")
    schedule = {"constant": lambda: optax.constant_schedule(1.0),
                "cosine": lambda: optax.cosine_decay_schedule(1.0, max(int(rounds), 1)),
                "step": lambda: optax.exponential_decay(1.0, int(nums[0]), nums[1],
                                                        staircase=True),
                "exponential": lambda: optax.exponential_decay(1.0, 1, nums[0])}[name]()
    return lambda r: float(schedule(r - 1))
