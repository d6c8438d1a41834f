"""FS, fully shared training (Li et al. 2021, Sec. 5.4, Fig. 2(A) without privacy; Tables 2-3).

All clients' training sets are pooled into one training set and one model is trained on it
centrally, then evaluated on every client's test set (Ag^k) and fine-tuned per client for Ap. It is
FedAvg with a single client that holds all the data: its centralised trainer
(``CentralTrainer("pooled")``, :mod:`fedjax_sc.core.central`) pools the clients' training splits and
runs the same compiled round on that one client (aggregating one client is the identity). Same epoch
budget: ``rounds x local_epochs`` epochs over the pooled data, batch B.
"""

from __future__ import annotations

import flax.linen as nn

from fedjax_sc.algorithms.base import Algorithm, CentralTrainer
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM


def fs(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
       embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds FS (FedAvg's pieces, trained on the pooled data).

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the SGD (paper: 0.01).
      momentum: its momentum (paper: 0.9).
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).

    Raises:
      ValueError: invalid optimizer settings.
    """
    return fedavg(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="fs", central=CentralTrainer("pooled"))
