"""Run tracking: ``fedjax-sc train --tensorboard`` and ``--wandb`` send a run's metrics to
TensorBoard and to Weights & Biases while it trains; ``metrics.jsonl`` stays the record.

One :class:`Tracker` per run folder fans the same scalars out to every enabled backend:
:func:`round_scalars` and :func:`ap_scalars` turn a ``metrics.jsonl`` row into one flat
``{name: value}`` dict per step, and a backend only writes such dicts.

Per round (step = the round): ``Ag``, ``train_loss``, ``personal/<mode>``, ``seconds``,
``participants`` (with heterogeneous clients),
``upload_sent_MB_mean``, every aux term (``aux/<name>``) and, per client,
``Ag_per_client/<client>`` and ``train_loss_per_client/<client>``. After the last round the
Ap phase's curve: ``Ap_t/<mode>`` (step = t, the evaluation).

- TensorBoard (``pip install 'fedjax_sc[tensorboard]'``): tensorboardX's ``SummaryWriter``
  writes event files into ``<out>/tensorboard/`` (no TensorFlow needed), read by
  ``tensorboard --logdir <out>``; the step is the event's step.
- Weights & Biases (``pip install 'fedjax_sc[wandb]'``): one W&B run per run folder, its files
  in ``<out>/wandb/`` (``offline-run-*`` or ``run-*``), named after the folder; the members of
  a population each get their own run, grouped under the population folder's name. The run's
  config is ``config.json``'s fields; its summary, once the run ends, the report's ``Ag``,
  ``Ap`` and ``ap_mode``. W&B's steps only increase within a run, so the round and t are
  logged as metrics (``round``, ``t``) and each scalar is plotted against its own (W&B's
  ``define_metric``). The mode (``wandb_mode``) is ``offline`` unless ``online`` is asked for:
  an offline run stays on this machine until ``wandb sync <out>/wandb/offline-run-*``
  uploads it. The configuration decides the mode, ``WANDB_MODE`` does not, so that
  ``config.json`` says where a run's data went. A resumed run is a new W&B run holding the
  rounds trained after the resume.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

WANDB_MODES = ("offline", "online")
"""The values of ``wandb_mode``: ``offline`` writes the run under ``<out>/wandb`` only,
``online`` also streams it to the W&B server (needs ``wandb login``)."""
WANDB_MIN = (0, 19, 10)
"""The oldest wandb that holds several runs at once in one process (``reinit="create_new"``):
a population's members are logged side by side."""


class MissingExtraError(ImportError, RuntimeError):
    """A tracking backend's package is missing or too old; the message names the extra to
    install. A RuntimeError too, so that the CLI prints it as one line."""


def round_figures(row: dict[str, Any]) -> dict[str, float]:
    """A ``metrics.jsonl`` round row's top-level numbers: ``Ag``, ``train_loss``, ``seconds``,
    ``client_steps_per_s`` and, where the run has them, ``participants`` (heterogeneous
    clients), ``lr`` (a scheduled LR), ``padding_ratio`` (a cross-device feed) and the
    cross-device figures ``Ag_pooled``, ``Ag_clients``, ``Ag_coverage``, ``Ag_unseen``,
    ``unseen_rows`` (:mod:`fedjax_sc.run.cross_device`). Every number is taken, so a figure a
    later version adds to the row is never dropped; ``round`` and ``None`` entries are left
    out. One place for :func:`round_scalars` and the tidy CSV of ``results export --csv``."""
    return {k: v for k, v in row.items() if k != "round" and not isinstance(v, bool)
            and isinstance(v, (int, float))}


def round_scalars(row: dict[str, Any], clients: Sequence[str]) -> dict[str, float]:
    """The scalars of one ``metrics.jsonl`` round row, as TensorBoard tags / W&B keys.

    Args:
      row: a ``"phase": "round"`` row (:func:`fedjax_sc.run.train.train_population`).
      clients: the names of all K clients; with partial participation the row's
        ``clients`` (the round's) name its per-slot entries (``train_loss_per_client``), the
        evaluation of every client (``Ag_per_client``) names all.

    Returns:
      ``{name: value}``: :func:`round_figures` (accuracies in [0, 1], losses in nats,
      ``seconds`` in seconds), ``personal/<mode>``, ``aux/<term>``, ``server/<name>`` (an
      algorithm's :attr:`~fedjax_sc.algorithms.base.Hooks.server_metrics`), ``upload_sent_MB_mean``
      in MB and the per-client ``Ag_per_client/<client>``, ``train_loss_per_client/<client>``;
      a ``None`` entry (no global model; no train loss or aux mean in a round where no client
      trained) is left out.
    """
    out: dict[str, float] = dict(round_figures(row))
    for mode, value in (row.get("personal") or {}).items():
        out[f"personal/{mode}"] = value
    for name, value in (row.get("aux") or {}).items():
        if value is not None:
            out[f"aux/{name}"] = value
    for name, value in (row.get("server") or {}).items():
        out[f"server/{name}"] = value
    comm = row.get("communication") or {}
    if "upload_sent_MB_mean" in comm:
        out["upload_sent_MB_mean"] = comm["upload_sent_MB_mean"]
    losses = row.get("train_loss_per_client") or []
    for key, values, ids in (  # every client evaluated; the round's clients trained
            ("Ag_per_client", row.get("Ag_per_client") or [], range(len(clients))),
            ("train_loss_per_client", losses, row.get("clients") or range(len(losses)))):
        for k, value in zip(ids, values):
            if value is not None and k < len(clients):
                out[f"{key}/{clients[k]}"] = value
    return out


def ap_scalars(curve: dict[str, Sequence[float]]) -> list[dict[str, float]]:
    """The Ap phase's mean curve per mode (``{mode: [n_Z + 1]}`` accuracies) as one dict per
    evaluation t: ``[{"Ap_t/<mode>": value}, ...]``."""
    steps = max((len(v) for v in curve.values()), default=0)
    return [{f"Ap_t/{mode}": values[t] for mode, values in curve.items() if t < len(values)}
            for t in range(steps)]


def summary_figures(report: dict[str, Any]) -> dict[str, Any]:
    """The report's summary figures (:func:`fedjax_sc.run.report.make_report`): ``Ag`` and
    ``Ap`` (accuracies in [0, 1]; left out when None) and ``ap_mode``."""
    return {k: report[k] for k in ("Ag", "Ap", "ap_mode") if report.get(k) is not None}


def require(configs: Sequence[Any]) -> None:
    """Checks, before anything is trained, that every backend the runs ask for can start.

    Args:
      configs: the runs' resolved :class:`~fedjax_sc.run.config.TrainConfig`.

    Raises:
      MissingExtraError: tensorboardX or wandb is not installed, or wandb is older than
        :data:`WANDB_MIN` (names the extra).
      ValueError: ``wandb_mode`` is not one of :data:`WANDB_MODES`.
    """
    if any(c.tensorboard for c in configs):
        _tensorboardx()
    if any(c.wandb for c in configs):
        _wandb()
        for c in configs:
            if c.wandb_mode not in WANDB_MODES:
                raise ValueError(f"--wandb-mode {c.wandb_mode!r}: choose from "
                                 f"{', '.join(WANDB_MODES)}")


def _tensorboardx():
    """tensorboardX's ``SummaryWriter``; raises :class:`MissingExtraError` without it."""
    try:
        from tensorboardX import SummaryWriter
    except ImportError as e:
        raise MissingExtraError("--tensorboard needs tensorboardX: pip install "
                                "'fedjax_sc[tensorboard]'") from e
    return SummaryWriter


def _wandb():
    """The ``wandb`` module; raises :class:`MissingExtraError` without it or when older than
    :data:`WANDB_MIN`."""
    need = ".".join(map(str, WANDB_MIN))
    try:
        import wandb
    except ImportError as e:
        raise MissingExtraError(f"--wandb needs wandb>={need}: pip install "
                                f"'fedjax_sc[wandb]'") from e
    version = tuple(int(x) for x in re.findall(r"\d+", getattr(wandb, "__version__", "0"))[:3])
    if version < WANDB_MIN:
        raise MissingExtraError(f"--wandb needs wandb>={need} (several runs in one process), "
                                f"found {wandb.__version__}: pip install -U "
                                f"'fedjax_sc[wandb]'")
    return wandb


class _TensorBoard:
    """Event files in ``<out>/tensorboard/`` (step: the event's step)."""

    def __init__(self, out: Path):
        self.writer = _tensorboardx()(str(out / "tensorboard"))

    def write(self, scalars: dict[str, float], axis: str, step: int) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)

    def flush(self) -> None:
        self.writer.flush()

    def summary(self, figures: dict[str, Any]) -> None:
        """TensorBoard keeps no run summary: the figures are in the last steps."""

    def close(self) -> None:
        self.writer.close()


class _WandB:
    """One W&B run in ``<out>/wandb/`` (:data:`WANDB_MODES`); each scalar is plotted against
    the axis (``round`` or ``t``) it was first written with."""

    def __init__(self, c: Any, population: Path | None):
        wandb = _wandb()
        out = Path(c.out).resolve()
        try:
            self.run = wandb.init(
                project=c.wandb_project, name=out.name, dir=str(out), mode=c.wandb_mode,
                group=None if population is None else population.resolve().parent.name,
                config=json.loads(json.dumps(dataclasses.asdict(c))), reinit="create_new",
                settings=wandb.Settings(console="off"))
        except wandb.errors.Error as e:  # e.g. online without `wandb login`
            raise RuntimeError(f"--wandb: the W&B run of {out} could not start: "
                               f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                               ) from e
        for axis in ("round", "t"):
            self.run.define_metric(axis)
        self.defined: set[str] = set()

    def write(self, scalars: dict[str, float], axis: str, step: int) -> None:
        for name in sorted(scalars.keys() - self.defined):
            self.run.define_metric(name, step_metric=axis)
        self.defined |= scalars.keys()
        self.run.log({axis: step, **scalars})

    def flush(self) -> None:
        """``run.log`` hands every row to W&B's writer at once."""

    def summary(self, figures: dict[str, Any]) -> None:
        self.run.summary.update(figures)

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """Writes one run folder's metrics to its enabled backends (TensorBoard, W&B), or nothing
    when none is enabled (or in a process other than process 0 of several).

    Args:
      config: the run's resolved :class:`~fedjax_sc.run.config.TrainConfig` (``out``,
        ``tensorboard``, ``wandb``, ``wandb_project``, ``wandb_mode``; the whole of it is the
        W&B run's config).
      population: the population's ``population.json`` when the run is a member of one (its
        folder's name is the W&B group); None: a run of its own.

    Raises:
      MissingExtraError: a backend's package is missing (:func:`require` says so earlier).
      RuntimeError: the W&B run could not start (names the folder and W&B's reason).
    """

    def __init__(self, config: Any, population: Path | None = None):
        from fedjax_sc.run.plumbing.processes import primary
        self.backends: list[Any] = []
        if not primary():  # several processes: process 0 alone tracks the run
            return
        if config.tensorboard:
            self.backends.append(_TensorBoard(Path(config.out)))
        if config.wandb:
            self.backends.append(_WandB(config, population))

    def round(self, row: dict[str, Any], clients: list[str]) -> None:
        """One ``metrics.jsonl`` round row; ``clients`` names all K clients
        (:func:`round_scalars`)."""
        if self.backends:
            self._write([round_scalars(row, clients)], "round", row["round"])

    def ap(self, curve: dict[str, list[float]]) -> None:
        """The Ap phase's mean curve per mode (``Ap_t``, index t)."""
        if self.backends:
            self._write(ap_scalars(curve), "t", 0)

    def _write(self, steps: list[dict[str, float]], axis: str, first: int) -> None:
        for backend in self.backends:
            for step, scalars in enumerate(steps, first):
                backend.write(scalars, axis, step)
            backend.flush()

    def close(self, report: dict[str, Any] | None = None) -> None:
        """Ends every backend, after recording ``report``'s :func:`summary_figures` (None: a
        run that stopped without a report)."""
        for backend in self.backends:
            if report is not None:
                backend.summary(summary_figures(report))
            backend.close()
