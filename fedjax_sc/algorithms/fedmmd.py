"""FedMMD (Yao et al. 2018, "Two-Stream Federated Learning: Reduce the Communication Costs",
Sec. 3), as compared in Li et al. 2021, Sec. 5.4 and Tables 2-3.

Two streams see every local batch: the client's model being trained and the frozen global
model it downloaded at the start of the round. The local loss adds the squared MMD between the
two streams' pooled features (the BiGRU's sequence mean, input of the classifier), so the local
model learns its data without drifting from the global representation::

    L = CE(local) + lambda * MMD^2(o_local, stop_grad(o_global))

with the kernel of Yao et al.'s released code: a sum of 19 Gaussian kernels of variances 1e-6
to 1e6 (:func:`fedjax_sc.algorithms.losses.mmd`, ``kernel="multi"``), and lambda = 0.1, the
weight of that code's MNIST model (Li et al. "utilize the settings reported in corresponding
papers", Sec. 5.2). ``kernel="median"`` is one Gaussian kernel of median-heuristic width,
whose gradient is 10-30x weaker at the same lambda. lambda = 0 is FedAvg exactly.

``mmd_penalty(algorithm, weight)`` is the plug-in for any algorithm whose model has a
``features(tokens)`` method (``TextClassifier``). On FedAvg's cross-entropy the term reads the
features the classifier reads (:meth:`~fedjax_sc.algorithms.losses.CrossEntropy.with_feature_term`):
the local stream's BiGRU runs once per step, forward and backward, and a step costs about a
quarter more than FedAvg's (the frozen stream's forward pass) instead of twice as much.
"""

from __future__ import annotations

import flax.linen as nn
import jax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import MMD_KERNEL, MMD_KERNELS, CrossEntropy, mmd
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

DEFAULT_WEIGHT = 0.1
"""lambda of the MMD term (Yao et al.'s released MNIST setting; see the module docstring)."""


def mmd_penalty(algorithm: Algorithm, weight: float = DEFAULT_WEIGHT,
                bandwidth: float | None = None, kernel: str = MMD_KERNEL) -> Algorithm:
    """``algorithm`` with FedMMD's feature-MMD term added to its client loss.

    Args:
      algorithm: an algorithm whose model has ``features(tokens) -> [batch, f]``.
      weight: lambda (>= 0).
      bandwidth: the ``median`` kernel's sigma; None = median heuristic per batch.
      kernel: ``multi`` (Yao et al.'s 19 summed Gaussian kernels) or ``median``
        (:func:`fedjax_sc.algorithms.losses.mmd`).

    Returns:
      The :class:`Algorithm`; the loss's aux dict gains ``mmd`` (MMD^2, float32).

    Raises:
      ValueError: a negative weight, a non-positive bandwidth, an unknown ``kernel`` (or a
        bandwidth given with ``multi``), or a model without ``features``.
    """
    hparams.check("FedMMD weight", weight, lambda v: v >= 0, ">= 0")
    hparams.check("FedMMD bandwidth", bandwidth, lambda v: v > 0, "> 0")
    if kernel not in MMD_KERNELS or (kernel == "multi" and bandwidth is not None):
        raise ValueError(f"FedMMD kernel must be one of {MMD_KERNELS} (a bandwidth only with "
                         f"'median'), got {kernel!r} with bandwidth {bandwidth}")
    model = algorithm.model
    if not hasattr(model, "features"):
        raise ValueError(f"FedMMD needs a model with a features() method, got "
                         f"{type(model).__name__}")
    base = algorithm.client_loss

    def term(params: Params, local: jax.Array, batch: Batch, start: ClientStart):
        frozen = jax.lax.stop_gradient(
            model.apply({"params": start.params}, batch.tokens, method=model.features))
        value = mmd(local, frozen, batch.mask, bandwidth, kernel)
        return weight * value, {"mmd": value}

    if isinstance(base, CrossEntropy) and base.model is model and hasattr(model, "head"):
        # the features the cross-entropy's head reads: the BiGRU runs once for both
        return algorithm._replace(client_loss=base.with_feature_term(term))

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        value, aux = base(params, batch, rng, start)
        local = model.apply({"params": params}, batch.tokens, method=model.features)
        extra, extra_aux = term(params, local, batch, start)
        return value + extra, {**aux, **extra_aux}

    return algorithm._replace(client_loss=loss)


def fedmmd(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None, weight: float = DEFAULT_WEIGHT,
           bandwidth: float | None = None, kernel: str = MMD_KERNEL) -> Algorithm:
    """Builds FedMMD: FedAvg + the two-stream MMD term.

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the client SGD.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      weight: see :func:`mmd_penalty`.
      bandwidth: see :func:`mmd_penalty`.
      kernel: see :func:`mmd_penalty`.

    Raises:
      ValueError: see :func:`mmd_penalty`.
    """
    return mmd_penalty(fedavg(model, learning_rate, momentum, embedding_learning_rate),
                       weight, bandwidth, kernel)._replace(name="fedmmd")
