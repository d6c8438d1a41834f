"""The figures of a cross-device scene (:func:`applies`: thousands
of small clients, many without test rows, and test rows of clients that never trained), beside
the paper's Ag.

* ``Ag`` stays the paper's (Li et al. 2021, Eq. 15): the unweighted mean of Ag^k over the
  clients that have test rows. With one or two test rows a client, it is a mean of 0s, 1s and
  halves.
* ``Ag_pooled``: the global model's accuracy over every test row of the clients that trained
  (correct rows / rows, each row counts once: LEAF's and FedJAX's figure).
* ``Ag_clients``: how many clients have test rows (the clients ``Ag`` averages), with
  ``Ag_coverage`` their share of the clients.
* ``Ag_unseen``: the accuracy over the test rows of clients that have no training rows
  (:attr:`~fedjax_sc.data.scenes.Scene.unseen`, pooled); ``unseen_rows`` their number.

The paper's scenes are never cross-device and their reports carry none of these keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fedjax_sc.core import participation
from fedjax_sc.data import scenes
from fedjax_sc.data.client_data import client_data


def applies(scene: scenes.Scene) -> bool:
    """True for a cross-device scene: some client has no test example and trains anyway
    (:attr:`~fedjax_sc.data.scenes.Scene.allow_no_test`), or the scene holds test examples of
    clients that never train (:attr:`~fedjax_sc.data.scenes.Scene.unseen`). The paper's
    scenes never are."""
    return scene.unseen is not None or (scene.allow_no_test
                                        and bool(np.any(scene.counts("test") == 0)))


PADDINGS = ("auto", *participation.PADDINGS)
"""``--padding``'s values: ``auto`` (:func:`padding` chooses by the scene) or one of
:data:`~fedjax_sc.core.participation.PADDINGS`."""


def padding(scene: scenes.Scene, choice: str = "auto") -> str:
    """How a sampled round pads its clients' example axis
    (:data:`~fedjax_sc.core.participation.PADDINGS`): ``choice`` itself unless it is ``auto``;
    for ``auto``, ``bucket`` (the largest sampled client, rounded up to a power of two) for a
    cross-device scene, ``global`` (the scene's largest client, one program, as runs were
    trained before) otherwise, so that other scenes' runs and their resumptions keep their
    figures bit for bit (a bucket changes them by float32 rounding only).

    Raises:
      ValueError: ``choice`` not one of :data:`PADDINGS` (:func:`check_padding`).
    """
    if check_padding(choice) != "auto":
        return choice
    return "bucket" if applies(scene) else "global"


def check_padding(choice: str) -> str:
    """``choice`` when it is one of :data:`PADDINGS`.

    Raises:
      ValueError: another value, in one line naming ``--padding``.
    """
    if choice not in PADDINGS:
        raise ValueError(f"--padding {choice!r}: choose from {', '.join(PADDINGS)}")
    return choice


def pooled_accuracy(per_client: Any, counts: Any) -> float | None:
    """Correct test rows over test rows of the clients with any: sum_k Ag^k M^k / sum_k M^k.

    Args:
      per_client: float ``[K]`` Ag^k (NaN where a client has no test row).
      counts: int ``[K]``, M^k.

    Returns:
      The pooled accuracy, or None when no client has a test row.
    """
    acc = np.asarray(per_client, np.float64)
    m = np.asarray(counts, np.float64)
    has = m > 0
    if not has.any():
        return None
    return float(np.sum(np.where(has, acc, 0.0) * m) / np.sum(m))


class Figures:
    """The cross-device figures of one scene, computed from Ag^k and the global model.

    Args:
      scene: the scene trained on (the figures are empty unless it is cross-device).
      global_eval: ``make_evaluate``'s function of the global model, or None (no global
        model: no figures).
    """

    def __init__(self, scene: scenes.Scene, global_eval: Callable | None):
        self.active = applies(scene) and global_eval is not None
        self.counts = scene.counts("test")
        self.global_eval = global_eval
        self.unseen = (None if scene.unseen is None or not self.active
                       else client_data(scene.unseen))

    def __call__(self, global_params: Callable[[], Any], ag: Any) -> dict[str, Any]:
        """``{"Ag_pooled", "Ag_clients", "Ag_coverage", "Ag_unseen", "unseen_rows"}`` for
        Ag^k ``ag`` (float ``[K]``) and the global model (``global_params()``, called only
        for a cross-device scene with unseen rows); ``{}`` for a scene that is not
        cross-device. ``Ag_unseen`` is None without unseen rows."""
        if not self.active or ag is None:
            return {}
        unseen = None
        if self.unseen is not None:
            unseen = float(np.asarray(self.global_eval(global_params(), self.unseen))[0])
        clients = int(np.count_nonzero(self.counts))
        return {"Ag_pooled": pooled_accuracy(ag, self.counts), "Ag_clients": clients,
                "Ag_coverage": clients / len(self.counts), "Ag_unseen": unseen,
                "unseen_rows": 0 if self.unseen is None else int(self.unseen.counts[0])}


def describe(figures: dict[str, Any]) -> str:
    """The figures as report.md's lines (empty for a scene that is not cross-device)."""
    if not figures:
        return ""
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}%"  # noqa: E731
    return (f"Cross-device: Ag (above) is the mean of Ag^k over the {figures['Ag_clients']:,} "
            f"clients with test rows ({100 * figures['Ag_coverage']:.1f}% of the clients); "
            f"Ag_pooled {pct(figures['Ag_pooled'])} over all their test rows; Ag_unseen "
            f"{pct(figures['Ag_unseen'])} over {figures['unseen_rows']:,} test rows of "
            f"clients without training rows.")
