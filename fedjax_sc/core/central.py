"""Centralised trainers for the baselines without privacy (Li et al. 2021, Sec. 5.4): what an
algorithm names in ``Algorithm.central`` (FS, ASP) to be trained in place of the federated
round.

Both keep the round's signature and states, so that evaluation (Ag, Ap), checkpoints and
reports are the same code for every algorithm:

* ``pooled`` (FS): every client's training split pooled into one client, trained by the
  federated round itself (aggregating one client is the identity).
* ``multitask`` (ASP): synchronous multi-task steps over every client at once
  (:mod:`fedjax_sc.core.multitask`), on global vocabulary ids.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from fedjax_sc.algorithms.base import CentralTrainer
from fedjax_sc.core.multitask import build_multitask_round
from fedjax_sc.core.round import build_round
from fedjax_sc.data.client_data import ClientData, host_client_data


def data(trainer: CentralTrainer, train: Any, local_vocab: bool) -> ClientData:
    """What ``trainer`` trains on (host arrays), from the scene's ``ClientArrays`` training
    split: ``pooled``, every client pooled into one (``ClientArrays.pooled``: in client order,
    nothing dropped or duplicated); ``multitask``, every client with global vocabulary ids
    (its steps train the whole ``[V, d]`` table).

    Raises:
      ValueError: an unknown trainer or schedule.
    """
    if trainer.check().name == "pooled":
        return host_client_data(train.pooled(), local_vocab=local_vocab)
    return host_client_data(train)


def builder(trainer: CentralTrainer) -> Callable[..., Callable]:
    """``build(algorithm, *, batch_size, local_epochs) -> round_step`` with the federated
    round's signature and states: :func:`~fedjax_sc.core.round.build_round` (pooled) or
    :func:`~fedjax_sc.core.multitask.build_multitask_round` with the trainer's schedule.

    Raises:
      ValueError: an unknown trainer or schedule.
    """
    if trainer.check().name == "pooled":
        return build_round
    return functools.partial(build_multitask_round, schedule=trainer.schedule)
