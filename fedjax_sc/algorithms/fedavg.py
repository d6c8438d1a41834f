"""FedAvg (McMahan et al. 2017) for FedMDSC, as in Li et al. 2021, Sec. 3.3 and Fig. 2(A).

Every client downloads the global model, trains it on its own reviews with SGD + momentum for a
few local epochs (cross-entropy, Eq. 5), and the server takes the weighted mean of the clients'
parameters with weights N^k / N. Paper settings (Sec. 5.2): momentum 0.9, LR 0.01 (FDU) or 0.1
(IYY), batch 8 (FDU) or 64 (IYY), 2 local epochs, 50 (FDU) or 20 (IYY) rounds.

With a FURL user vector in the model (``TextClassifier(furl_dim=...)``; Bui et al. 2019) that
vector is the one private leaf; everything else is aggregated.
"""

from __future__ import annotations

import flax.linen as nn

from fedjax_sc.algorithms import predict
from fedjax_sc.algorithms.aggregate import weighted_mean
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.losses import cross_entropy
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd

FURL_RULES = {"private": r"^user/", "shared": r"^(embedding|encoder|classifier)/"}
"""Leaf rules of a model with a FURL user vector: the vector private, every other leaf
shared."""


def fedavg(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds FedAvg.

    Args:
      model: the classifier (:class:`fedjax_sc.models.text_classifier.TextClassifier`).
      learning_rate: client SGD step size (paper: 0.01 FDU, 0.1 IYY).
      momentum: client SGD momentum (paper: 0.9); its buffer is fresh every round.
      embedding_learning_rate: optional separate step size of the word embeddings (paper's
        IYY setting: 0.01).

    Returns:
      The :class:`Algorithm` (no private leaves unless the model has a FURL user vector).

    Raises:
      ValueError: on a negative learning rate or a momentum outside [0, 1).
    """
    predict_fn, global_fn = predict.single_branch(model)
    return Algorithm(
        name="fedavg",
        model=model,
        client_loss=cross_entropy(model),
        client_optimizer=client_sgd(learning_rate, momentum, embedding_learning_rate),
        aggregator=weighted_mean,
        predict=predict_fn,
        global_predict=global_fn,
        leaf_rules=FURL_RULES if getattr(model, "furl_dim", 0) else None,
    )
