"""FedProx (Li, Sahu et al. 2020, "Federated Optimization in Heterogeneous Networks", Eq. 2),
as compared in Li et al. 2021, Sec. 5.4 and Tables 2-3.

Each client minimises its local loss plus a proximal term that keeps its model near the
global model it downloaded at the start of the round::

    h_k(w) = F_k(w) + (mu / 2) ||w - w^t||^2

The term covers every trainable leaf the client holds (for FedAvg: the whole model; for a
private-shared model, the private leaves are pulled towards their own start values). With
local-vocabulary training the norm is over the client's rows of V^k; the other rows never move,
so it equals the norm over the full table. mu = 0 is FedAvg exactly.

``proximal(algorithm, mu)`` is the plug-in: it wraps any algorithm's client loss (FedKC on
FedProx is ``fedkc(proximal(fedavg(model)))``). Li et al. 2021 do not give mu; they use "the
settings reported in corresponding papers" (Sec. 5.2): default 0.01, the value FedProx's
authors report for Sent140, their LSTM sentiment task (their tuned values per data set: 1, 1,
1, 0.001, 0.01 for Synthetic, MNIST, FEMNIST, Shakespeare, Sent140).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

DEFAULT_MU = 0.01
"""mu of the proximal term (FedProx's Sent140 value; see the module docstring)."""


def squared_distance(params: Params, anchor: Params) -> jax.Array:
    """``||params - anchor||^2`` over all leaves (same structure): float32 scalar."""
    return sum(jnp.sum(jnp.square(p - a)) for p, a in
               zip(jax.tree.leaves(params), jax.tree.leaves(anchor)))


def proximal(algorithm: Algorithm, mu: float = DEFAULT_MU) -> Algorithm:
    """``algorithm`` with FedProx's proximal term added to its client loss.

    Args:
      algorithm: any algorithm (its loss is kept and the term added).
      mu: the proximal weight (>= 0).

    Returns:
      The :class:`Algorithm`; the loss's aux dict gains ``proximal`` (the term's
      value, float32 scalar). The Ap phase's fine-tuning is anchored at the model before
      fine-tuning.

    Raises:
      ValueError: mu < 0.
    """
    hparams.check("FedProx mu", mu, lambda v: v >= 0, ">= 0")
    base = algorithm.client_loss

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        value, aux = base(params, batch, rng, start)
        term = 0.5 * mu * squared_distance(params, jax.lax.stop_gradient(start.params))
        return value + term, {**aux, "proximal": term}

    return algorithm._replace(client_loss=loss)


def fedprox(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
            embedding_learning_rate: float | None = None, mu: float = DEFAULT_MU) -> Algorithm:
    """Builds FedProx: FedAvg (:func:`~fedjax_sc.algorithms.fedavg.fedavg`) + the proximal term.

    Args:
      model: the classifier (``TextClassifier``).
      learning_rate: the step size of the client SGD (paper: 0.01).
      momentum: its momentum (paper: 0.9).
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      mu: proximal weight (>= 0; default 0.01).

    Raises:
      ValueError: mu < 0 or invalid optimizer settings.
    """
    return proximal(fedavg(model, learning_rate, momentum, embedding_learning_rate),
                    mu)._replace(name="fedprox")
