"""Centralised trainers for the baselines without privacy (Li et al. 2021, Sec. 5.4): what FS
and ASP provide as ``Algorithm.central`` in place of the federated round.

Both keep the round's signature and states, so that evaluation (Ag, Ap), checkpoints and
reports are the same code for every algorithm:

* :func:`pooled` (FS): every client's training split pooled into one client, trained by the
  federated round itself (aggregating one client is the identity).
* :func:`multitask` (ASP): synchronous multi-task steps over every client at once
  (:mod:`fedjax_sc.core.multitask`), on global vocabulary ids.
"""

from __future__ import annotations

import functools
from typing import Any

from fedjax_sc.algorithms.base import CentralTrainer
from fedjax_sc.core.multitask import SCHEDULES, build_multitask_round
from fedjax_sc.core.round import build_round
from fedjax_sc.data.client_data import ClientData, host_client_data


def pooled() -> CentralTrainer:
    """FS: the clients' training splits pooled into one client (``ClientArrays.pooled``: in
    client order, nothing dropped or duplicated), trained by :func:`build_round`."""

    def data(train: Any, local_vocab: bool) -> ClientData:
        return host_client_data(train.pooled(), local_vocab=local_vocab)

    return CentralTrainer("pooled", data, build_round)


def multitask(schedule: str = "alternate") -> CentralTrainer:
    """ASP: :func:`~fedjax_sc.core.multitask.build_multitask_round` with ``schedule`` (one of
    :data:`~fedjax_sc.core.multitask.SCHEDULES`) on every client's data with global vocabulary
    ids.

    Raises:
      ValueError: an unknown schedule.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown multi-task schedule {schedule!r}; choose from {SCHEDULES}")

    def data(train: Any, local_vocab: bool) -> ClientData:
        del local_vocab  # the multi-task steps train the whole [V, d] table
        return host_client_data(train)

    return CentralTrainer("multitask", data,
                          functools.partial(build_multitask_round, schedule=schedule))
