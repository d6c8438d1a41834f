"""Indiv: every client trains alone on its own data (Li et al. 2021, Sec. 5.4; the lower bound
of Tables 2-3).

The round's machinery with every leaf private: each client keeps its whole model across
rounds, nothing is uploaded, downloaded or aggregated, and the epoch budget is FedAvg's
(``rounds x local_epochs`` epochs; the optimizer state is fresh each round as in FedAvg). The
"global" Ag of the paper's Indiv column is each client's own model on its test set, which the
report gives as the personal accuracy (``global_predict`` is ``None``: there is no global
model).
"""

from __future__ import annotations

import flax.linen as nn

from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

RULES = {"private": r".*"}
"""Every leaf stays on its client."""


def indiv(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
          embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds Indiv (FedAvg's loss and optimizer, every leaf private).

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the client SGD.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).

    Raises:
      ValueError: invalid optimizer settings.
    """
    return fedavg(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="indiv", leaf_rules=RULES, global_predict=None)
