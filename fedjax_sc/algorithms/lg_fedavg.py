"""LG-FedAvg (Liang et al. 2020) for FedMDSC: Li et al. 2021, Sec. 5.4.

One branch; the word embedding and the BiGRU stay private ("local representations"), the MLP
classifier is aggregated. No complete global model exists: Ag is not applicable.
"""

from __future__ import annotations

import flax.linen as nn

from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

RULES = {"private": r"^(embedding|encoder|user)/", "shared": r"^classifier/"}
"""LG-FedAvg's leaf rules: the local representation (embedding, encoder, a FURL user vector)
private, the classifier shared."""


def lg_fedavg(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
              embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds LG-FedAvg: FedAvg's loss and optimizer with a private embedding and encoder.

    Args and Raises: as :func:`fedjax_sc.algorithms.fedavg.fedavg`.
    """
    return fedavg(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="lg_fedavg", leaf_rules=RULES, global_predict=None)
