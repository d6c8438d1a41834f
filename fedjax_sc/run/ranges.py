"""The ranges of a configuration's numbers and choices, checked when it is resolved
(:meth:`fedjax_sc.run.config.TrainConfig.resolved`), before any corpus is read, each error
naming its flag: the client and server optimizers' settings (their builders check the same
ranges for the library's callers, :mod:`fedjax_sc.algorithms.hparams`), the
heterogeneous clients' (:class:`fedjax_sc.core.heterogeneity.LocalWork`) and how the clients
are made, sampled and padded (:func:`clients`). An algorithm's own options are checked by its
builder, built here once at placeholder sizes (a user's, when it is given options).
"""

from __future__ import annotations

from typing import Any

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.context import is_spec
from fedjax_sc.algorithms.optimizers import round_schedule
from fedjax_sc.core import participation
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.data import partition
from fedjax_sc.run import cross_device, registry
from fedjax_sc.run.plumbing.flags import flag

RANGES = {
    "lr": (lambda v: v >= 0, ">= 0"),
    "embedding_lr": (lambda v: v >= 0, ">= 0"),
    "momentum": (lambda v: 0 <= v < 1, "in [0, 1)"),
    "server_lr": (lambda v: v > 0, "> 0"),
}
"""``{field: (test, what)}``: the optimizers' numbers (``server_lr``: with a ``--server-opt``;
None, the optimizer's default, is not checked); ``--client-dropout`` and the other
heterogeneous-clients settings: :func:`local_work`."""


def check(c: Any) -> LocalWork:
    """Checks the numbers of :data:`RANGES` and the heterogeneous-clients setting of ``c`` (a
    ``TrainConfig``, or any object with its fields; its presets filled in).

    Returns:
      ``c``'s :class:`~fedjax_sc.core.heterogeneity.LocalWork` (:func:`local_work`).

    Raises:
      ValueError: ``--lr must be >= 0, got -1.0``: a number out of its range or not a number;
        a malformed ``--local-steps`` or ``--lr-schedule`` (or one beside ``--embedding-lr``
        or FedNova), or another setting :func:`local_work` refuses; a
        setting the algorithm's builder refuses (``FedProx mu must be >= 0``), or an
        ``--algorithm-option`` a user's builder never reads.
    """
    for name, (ok, what) in RANGES.items():
        hparams.check(flag(name), getattr(c, name), ok, what)
    if getattr(c, "lr_schedule", "constant") != "constant":
        round_schedule(c.lr_schedule, c.rounds)  # a malformed one names the flag
        if c.embedding_lr is not None or c.aggregation == "fednova":
            raise ValueError("--lr-schedule scales --lr alone, round by round: it does not "
                             "combine with --embedding-lr or --aggregation fednova"
                             + (" (the iyy scene's preset sets --embedding-lr 0.01, the "
                                "paper's Sec. 5.2)" if c.scene == "iyy" else ""))
    if getattr(c, "client_optimizer_state", "fresh") == "kept" and c.aggregation == "fednova":
        raise ValueError("--client-optimizer-state kept: --aggregation fednova normalises "
                         "each update by the steps of a momentum that starts at zero in "
                         "the round; a kept momentum breaks that")
    own = dict(getattr(c, "algorithm_options", None) or {})
    if registry.known(c.algorithm) and (not is_spec(c.algorithm) or own):
        # the algorithm built once at placeholder sizes: its builders check their own settings
        # (--prox-mu, --ditto-lambda, --pfedme-k, ...; a user's builder, the names of its
        # --algorithm-option) before any corpus is read
        registry.build_algorithm(
            c.algorithm, vocab_size=8, num_classes=2, embed_dim=c.embed_dim or 200,
            num_clients=2, upload_noise=c.upload_noise, dp_clip=c.dp_clip,
            dp_noise=c.dp_noise, server_opt=c.server_opt, algorithm_options=own,
            **{o: getattr(c, registry.config_field(o)) for o in registry.OPTIONS})
    return local_work(c)


def local_work(c: Any) -> LocalWork:
    """The heterogeneous-clients setting of a resolved config (``--local-steps``,
    ``--client-dropout``, ``--straggler-fraction``, ``--straggler-policy``,
    ``--aggregation``), with the client optimizer's momentum and FedProx's eta * mu for
    FedNova's normaliser.

    Raises:
      ValueError: a malformed or out-of-range setting (names its flag), or one under which no
        client ever trains (``--client-dropout 1``; every client straggling under ``drop``):
        the library's :class:`LocalWork` allows it, a run would report an untrained model.
    """
    if c.client_dropout == 1.0:
        raise ValueError("--client-dropout 1: every client misses every round, so no model "
                         "would train; give a probability below 1")
    if c.straggler_fraction == 1.0 and c.straggler_policy == "drop":
        raise ValueError("--straggler-fraction 1 with --straggler-policy drop: every update "
                         "would be discarded; give a fraction below 1 or --straggler-policy "
                         "partial")
    steps = steps_range = None
    if c.local_steps is not None:
        lo, sep, hi = str(c.local_steps).partition(":")
        try:
            steps_range = (int(lo), int(hi)) if sep else None
            steps = None if sep else int(lo)
        except ValueError:
            raise ValueError(f"--local-steps {c.local_steps!r}: give N or LO:HI "
                             f"(integers)") from None
    nova = c.aggregation == "fednova"  # only FedNova reads the optimizer's settings
    prox = c.lr * c.prox_mu if nova and c.algorithm in ("fedprox", "fedprox_kc") else 0.0
    return LocalWork(steps, steps_range, c.client_dropout, c.straggler_fraction,
                     c.straggler_policy, c.aggregation, c.momentum if nova else 0.0,
                     prox).check()


def clients(c: Any) -> None:
    """Checks how the clients of resolved config ``c`` are made, drawn and fed:
    ``--partition`` with ``--num-clients``, ``--alpha``, ``--beta`` and flwr-datasets'
    settings, ``--synthetic-zipf``, ``--sampling``, ``--clients-per-round`` and
    ``--padding`` (:data:`fedjax_sc.run.cross_device.PADDINGS`).

    Raises:
      ValueError: an unknown partition, sampling or padding; a partition's missing or
        extra setting; ``--synthetic-zipf`` not above 1, with another scene or another
        partition than natural; ``--clients-per-round`` < 1, ``--sampling size`` without
        it (each names its flag).
    """
    if c.partition not in partition.PARTITIONS:
        raise ValueError(f"unknown partition {c.partition!r}; choose from "
                         f"{partition.PARTITIONS}")
    if c.partition == "natural":
        if c.num_clients is not None or c.alpha is not None or c.beta is not None:
            others = partition.PARTITIONS[1:]
            raise ValueError(f"--num-clients, --alpha and --beta split a pooled corpus: they "
                             f"need a --partition other than natural ({', '.join(others[:-1])} "
                             f"or {others[-1]})")
    elif c.num_clients is None or c.num_clients < 1:
        raise ValueError(f"--partition {c.partition} needs --num-clients >= 1")
    for name in ("alpha", "beta"):
        if getattr(c, name) is not None and not getattr(c, name) > 0:
            raise ValueError(f"--{name} must be > 0, got {getattr(c, name)}")
    partition.check_flwr(c.partition, c.alpha, c.beta, c.min_partition_size,
                         c.self_balancing)
    if c.synthetic_zipf is not None:
        if c.scene != "synthetic" or c.partition != "natural":
            raise ValueError("--synthetic-zipf sets the synthetic clients' sizes: it needs "
                             "--scene synthetic and the natural partition")
        if not c.synthetic_zipf > 1:
            raise ValueError(f"--synthetic-zipf must be > 1, got {c.synthetic_zipf}")
    if c.sampling not in participation.SAMPLINGS:
        raise ValueError(f"unknown sampling {c.sampling!r}; choose from "
                         f"{participation.SAMPLINGS}")
    if c.clients_per_round is not None and c.clients_per_round < 1:
        raise ValueError(f"--clients-per-round must be >= 1, got {c.clients_per_round}")
    if c.sampling == "size" and c.clients_per_round is None:
        raise ValueError("--sampling size draws a round's --clients-per-round M clients; "
                         "without it every client takes part, weighed by N^k")
    cross_device.check_padding(c.padding)
