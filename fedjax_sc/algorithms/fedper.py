"""FedPer (Arivazhagan et al. 2019) for FedMDSC: Li et al. 2021, Sec. 5.4 and Fig. 2(B).

One branch; the embedding and the BiGRU are aggregated as in FedAvg, the MLP classifier stays
private on each client. The shared leaves do not form a complete model, so there is no global
model to score: Ag is reported as not applicable (the paper's Fig. 4 shows Ag ~ 0.5 for it, the
accuracy of the shared encoder with an untrained classifier).
"""

from __future__ import annotations

import flax.linen as nn

from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

RULES = {"private": r"^(classifier|user)/", "shared": r"^(embedding|encoder)/"}
"""FedPer's leaf rules: the classifier (and a FURL user vector) private, the embedding and
encoder shared."""


def fedper(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds FedPer: FedAvg's loss and optimizer with a private classifier (and FURL vector).

    Args and Raises: as :func:`fedjax_sc.algorithms.fedavg.fedavg`.
    """
    return fedavg(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="fedper", leaf_rules=RULES, global_predict=None)
