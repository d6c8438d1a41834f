"""Client optimizers (Li et al. 2021, Sec. 5.2): SGD with momentum, optionally a separate
learning rate for the word embeddings through optax's partitioned transforms."""

from __future__ import annotations

import optax

from fedjax_sc.algorithms import hparams, masking

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
