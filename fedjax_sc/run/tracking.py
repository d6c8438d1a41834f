"""Metrics for TensorBoard: ``fedjax-sc train --tensorboard`` writes event files into
``<out>/tensorboard/`` with tensorboardX's ``SummaryWriter`` (no TensorFlow needed; ``pip
install 'fedjax_sc[tensorboard]'``), read by ``tensorboard --logdir <out>``.

Per round (step = the round): ``Ag``, ``train_loss``, ``personal/<mode>``, ``seconds``,
``upload_sent_MB_mean``, every aux term (``aux/<name>``) and, per client,
``Ag_per_client/<client>`` and ``train_loss_per_client/<client>``. After the last round the
Ap phase's curve: ``Ap_t/<mode>`` (step = t, the evaluation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class Tracker:
    """Writes a run's metrics to TensorBoard, or nothing when ``enabled`` is False.

    Raises:
      ImportError: ``enabled`` without tensorboardX installed (names the extra).
    """

    def __init__(self, out: Path, enabled: bool):
        self.writer = None
        if enabled:
            try:
                from tensorboardX import SummaryWriter
            except ImportError as e:
                raise ImportError("--tensorboard needs tensorboardX: pip install "
                                  "'fedjax_sc[tensorboard]'") from e
            self.writer = SummaryWriter(str(out / "tensorboard"))

    def round(self, row: dict[str, Any], clients: list[str]) -> None:
        """One ``metrics.jsonl`` round row; ``clients`` names the per-client entries."""
        if self.writer is None:
            return
        r, add = row["round"], self.writer.add_scalar
        for key in ("Ag", "train_loss", "seconds"):
            if row.get(key) is not None:
                add(key, row[key], r)
        for mode, value in (row.get("personal") or {}).items():
            add(f"personal/{mode}", value, r)
        for name, value in (row.get("aux") or {}).items():
            add(f"aux/{name}", value, r)
        comm = row.get("communication") or {}
        if "upload_sent_MB_mean" in comm:
            add("upload_sent_MB_mean", comm["upload_sent_MB_mean"], r)
        for key in ("Ag_per_client", "train_loss_per_client"):
            for name, value in zip(clients, row.get(key) or []):
                if value is not None:
                    add(f"{key}/{name}", value, r)
        self.writer.flush()

    def ap(self, curve: dict[str, list[float]]) -> None:
        """The Ap phase's mean curve per mode (``Ap_t``, index t)."""
        if self.writer is None:
            return
        for mode, values in curve.items():
            for t, value in enumerate(values):
                self.writer.add_scalar(f"Ap_t/{mode}", value, t)
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
