"""FedMMD (Yao et al. 2018, "Two-Stream Federated Learning: Reduce the Communication Costs",
Sec. 3), as compared in Li et al. 2021, Sec. 5.4 and Tables 2-3.

Two streams see every local batch: the client's model being trained and the frozen global
model it downloaded at the start of the round. The local loss adds the squared MMD between the
two streams' pooled features (the BiGRU's sequence mean, input of the classifier), so the local
model learns its data without drifting from the global representation::

    L = CE(local) + lambda * MMD^2(o_local, stop_grad(o_global))

with a Gaussian kernel (:func:`fedjax_sc.algorithms.losses.mmd`; bandwidth by the median
heuristic unless given). Yao et al. do not fix lambda for text models and Li et al. do not
state theirs: default 0.1 (the penalty is at most 2, a tenth of it is of the order of the
cross-entropy's late-training values). lambda = 0 is FedAvg exactly.

``mmd_penalty(algorithm, weight)`` is the plug-in for any algorithm whose model has a
``features(tokens)`` method (``TextClassifier``).
"""

from __future__ import annotations

import flax.linen as nn
import jax

from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import mmd
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

DEFAULT_WEIGHT = 0.1
"""lambda of the MMD term (not given by the papers; see the module docstring)."""


def mmd_penalty(algorithm: Algorithm, weight: float = DEFAULT_WEIGHT,
                bandwidth: float | None = None) -> Algorithm:
    """``algorithm`` with FedMMD's feature-MMD term added to its client loss.

    Args:
      algorithm: an algorithm whose model has ``features(tokens) -> [batch, f]``.
      weight: lambda (>= 0).
      bandwidth: Gaussian kernel sigma; None = median heuristic per batch.

    Returns:
      The :class:`Algorithm`; the loss's aux dict gains ``mmd`` (MMD^2, float32).

    Raises:
      ValueError: a negative weight, a non-positive bandwidth, or a model without
        ``features``.
    """
    if weight < 0 or (bandwidth is not None and bandwidth <= 0):
        raise ValueError(f"FedMMD needs weight >= 0 and bandwidth > 0, got {weight}, "
                         f"{bandwidth}")
    model = algorithm.model
    if not hasattr(model, "features"):
        raise ValueError(f"FedMMD needs a model with a features() method, got "
                         f"{type(model).__name__}")
    base = algorithm.client_loss

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        value, aux = base(params, batch, rng, start)
        local = model.apply({"params": params}, batch.tokens, method=model.features)
        frozen = jax.lax.stop_gradient(
            model.apply({"params": start.params}, batch.tokens, method=model.features))
        term = mmd(local, frozen, batch.mask, bandwidth)
        return value + weight * term, {**aux, "mmd": term}

    return algorithm._replace(client_loss=loss)


def fedmmd(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None, weight: float = DEFAULT_WEIGHT,
           bandwidth: float | None = None) -> Algorithm:
    """Builds FedMMD: FedAvg + the two-stream MMD term.

    Args:
      model: ``TextClassifier``.
      learning_rate, momentum, embedding_learning_rate: client SGD.
      weight, bandwidth: see :func:`mmd_penalty`.

    Raises:
      ValueError: see :func:`mmd_penalty`.
    """
    return mmd_penalty(fedavg(model, learning_rate, momentum, embedding_learning_rate),
                       weight, bandwidth)._replace(name="fedmmd")
