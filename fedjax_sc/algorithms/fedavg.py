"""FedAvg (McMahan et al. 2017) for FedMDSC, as in Li et al. 2021, Sec. 3.3 and Fig. 2(A).

Every client downloads the global model, trains it on its own reviews with SGD + momentum for a
few local epochs (cross-entropy, Eq. 5), and the server takes the weighted mean of the clients'
parameters with weights N^k / N. Paper settings (Sec. 5.2): momentum 0.9, LR 0.01 (FDU) or 0.1
(IYY), batch 8 (FDU) or 64 (IYY), 2 local epochs, 50 (FDU) or 20 (IYY) rounds.
"""

from __future__ import annotations

import flax.linen as nn
import optax

from fedjax_sc.algorithms.aggregate import weighted_mean
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.losses import cross_entropy


def fedavg(model: nn.Module, learning_rate: float = 0.01, momentum: float = 0.9) -> Algorithm:
    """Builds FedAvg.

    Args:
      model: the classifier (e.g. :class:`fedjax_sc.models.text_classifier.TextClassifier`).
      learning_rate: client SGD step size (paper: 0.01 for FDU).
      momentum: client SGD momentum (paper: 0.9); its buffer is fresh every round.

    Returns:
      The :class:`Algorithm`.

    Raises:
      ValueError: on a negative learning rate or a momentum outside [0, 1).
    """
    if learning_rate < 0:
        raise ValueError(f"learning_rate must be >= 0, got {learning_rate}")
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    return Algorithm(
        name="fedavg",
        model=model,
        client_loss=cross_entropy(model),
        client_optimizer=optax.sgd(learning_rate, momentum=momentum or None),
        aggregator=weighted_mean,
    )
