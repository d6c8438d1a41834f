"""The ranges of a configuration's numbers, checked when it is resolved
(:meth:`fedjax_sc.run.config.TrainConfig.resolved`), before any corpus is read, each error
naming its flag: the client and server optimizers' settings (their builders check the same
ranges for the library's callers, :mod:`fedjax_sc.algorithms.hparams`) and the
heterogeneous clients' (:class:`fedjax_sc.core.heterogeneity.LocalWork`). An algorithm's own
options are checked by its builder.
"""

from __future__ import annotations

from typing import Any

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.context import is_spec
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.run import registry
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
        a malformed ``--local-steps`` or another setting :func:`local_work` refuses; a
        setting the algorithm's builder refuses (``FedProx mu must be >= 0``).
    """
    for name, (ok, what) in RANGES.items():
        hparams.check(flag(name), getattr(c, name), ok, what)
    if registry.known(c.algorithm) and not is_spec(c.algorithm):
        # the algorithm built once at placeholder sizes: its builders check their own settings
        # (--prox-mu, --ditto-lambda, --pfedme-k, ...) before any corpus is read
        registry.build_algorithm(
            c.algorithm, vocab_size=8, num_classes=2, embed_dim=c.embed_dim or 200,
            num_clients=2, upload_noise=c.upload_noise, dp_clip=c.dp_clip,
            dp_noise=c.dp_noise, server_opt=c.server_opt,
            **{o: getattr(c, registry.config_field(o)) for o in registry.OPTIONS})
    return local_work(c)


def local_work(c: Any) -> LocalWork:
    """The heterogeneous-clients setting of a resolved config (``--local-steps``,
    ``--client-dropout``, ``--straggler-fraction``, ``--straggler-policy``,
    ``--aggregation``), with the client optimizer's momentum and FedProx's eta * mu for
    FedNova's normaliser.

    Raises:
      ValueError: a malformed or out-of-range setting (names its flag).
    """
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
