"""FedOpt server updates (Reddi et al. 2021, "Adaptive Federated Optimization", Alg. 2; used by
FedNLP, Lin et al. 2022, Sec. 4).

The server treats the negated weighted mean client update as a gradient, the pseudo-gradient
``Delta = params - aggregate``, and applies an optax optimizer to it:
``params <- params + server_opt.update(Delta)``. The round does this whenever
``Algorithm.server_optimizer`` is set (:func:`fedjax_sc.core.round.build_round_parts`); the
optimizer's state is ``ServerState.opt_state`` and is saved in every checkpoint.

* ``sgd`` with learning rate 1 is exactly FedAvg (params - 1 * Delta = aggregate);
* ``momentum``: server momentum (FedAvgM, Hsu et al. 2019), SGD with heavy-ball momentum;
* ``adam`` / ``yogi`` / ``adagrad``: FedAdam / FedYogi / FedAdagrad.

Defaults (the paper leaves them to a grid search): learning rate 1.0 for sgd and momentum
(FedAvg's step), 0.01 for the adaptive ones, and their adaptivity ``eps`` = tau = 1e-3, the
middle of Reddi et al.'s grid (their Table 8 best values for text tasks lie in 1e-3..1e-2);
``momentum`` 0.9 and Adam/Yogi's b1 = 0.9, b2 = 0.99 as in Reddi et al. Sec. 5. optax's yogi
starts both moments at 1e-6 (Reddi et al.: m_0 = 0, v_0 >= tau^2), so its first steps move
params by ~1e-5 even on a zero pseudo-gradient.
"""

from __future__ import annotations

import optax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm

SERVER_OPTIMIZERS = ("sgd", "momentum", "adam", "yogi", "adagrad")
"""The server optimizers by name."""

DEFAULT_LR = {"sgd": 1.0, "momentum": 1.0, "adam": 0.01, "yogi": 0.01, "adagrad": 0.01}
"""The server learning rate eta of each server optimizer when none is given."""
DEFAULT_TAU = 1e-3
"""Adaptivity eps (Reddi et al.'s tau) of adam, yogi and adagrad."""
DEFAULT_MOMENTUM = 0.9
"""Server momentum (FedAvgM) and Adam/Yogi's b1 (Reddi et al. 2021)."""


def server_optimizer(name: str, learning_rate: float | None = None,
                     momentum: float = DEFAULT_MOMENTUM,
                     tau: float = DEFAULT_TAU) -> optax.GradientTransformation:
    """The optax transformation of a FedOpt server.

    Args:
      name: one of :data:`SERVER_OPTIMIZERS`.
      learning_rate: server learning rate eta (None: :data:`DEFAULT_LR`).
      momentum: beta of ``momentum`` (and b1 of adam/yogi).
      tau: adaptivity eps of adam, yogi, adagrad.

    Raises:
      ValueError: an unknown name, or a learning rate <= 0.
    """
    if name not in SERVER_OPTIMIZERS:
        raise ValueError(f"unknown server optimizer {name!r}; choose from {SERVER_OPTIMIZERS}")
    lr = DEFAULT_LR[name] if learning_rate is None else learning_rate
    hparams.check("server learning rate", lr, lambda v: v > 0, "> 0")
    if name == "sgd":
        return optax.sgd(lr)
    if name == "momentum":
        return optax.sgd(lr, momentum=momentum)
    if name == "adam":
        return optax.adam(lr, b1=momentum, b2=0.99, eps=tau)
    if name == "yogi":
        return optax.yogi(lr, b1=momentum, b2=0.99, eps=tau)
    return optax.adagrad(lr, initial_accumulator_value=0.0, eps=tau)


def fedopt(algorithm: Algorithm, name: str, learning_rate: float | None = None,
           momentum: float = DEFAULT_MOMENTUM, tau: float = DEFAULT_TAU) -> Algorithm:
    """``algorithm`` with a FedOpt server (any algorithm: only the server update changes).

    Raises:
      ValueError: see :func:`server_optimizer`; or ``algorithm`` already has a server rule
        (FedFusion's ``multi`` / ``single`` fusion weight, pFedMe's beta != 1), which FedOpt
        would replace.
    """
    if algorithm.server_optimizer is not None:
        raise ValueError(f"{algorithm.name} already has its own server update, which FedOpt "
                         "would replace (FedFusion multi/single: set its gamma momentum to 0; "
                         "pFedMe: beta = 1)")
    return algorithm._replace(server_optimizer=server_optimizer(name, learning_rate, momentum,
                                                                tau))
