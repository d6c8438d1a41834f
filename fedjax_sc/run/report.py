"""The end-of-run report: per-client Ag^k and Ap^k (Li et al. 2021, Eq. 14-16) as JSON and as
the Markdown table printed at the end of ``fedjax-sc train``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedjax_sc.data import scenes
from fedjax_sc.run import personalize


def make_report(c: Any, scene: scenes.Scene, ag: np.ndarray | None,
            personal: dict[str, np.ndarray], ap: personalize.Personalization | None,
            mode: str) -> dict[str, Any]:
    """The end-of-run report (``report.json``): Ag^k, the personalised accuracy before
    fine-tuning and Ap^k per client, their means, the Ap_t curve and the Ap settings.

    Args:
      c: the resolved :class:`fedjax_sc.run.train.TrainConfig`.
      scene: the scene trained on.
      ag: float ``[K]`` Ag^k, or None when the algorithm has no global model.
      personal: ``{mode: float [K]}`` personalised accuracy before fine-tuning.
      ap: the Ap phase's result, or None when it was skipped.
      mode: the inference mode Ap reports.
    """
    pmode = mode if mode in personal else next(iter(personal))
    rows = []
    for k, n in enumerate(scene.client_names):
        rows.append({"client": n, "N": int(scene.train.counts[k]), "M": int(scene.test.counts[k]),
                     "Ag": None if ag is None else float(ag[k]),
                     "personal": float(personal[pmode][k]),
                     "Ap": None if ap is None else float(ap.ap_per_client(mode)[k])})
    report = {"scene": c.scene, "algorithm": c.algorithm, "rounds": c.rounds,
              "Ag": None if ag is None else float(ag.mean()),
              "personal": {k: float(v.mean()) for k, v in personal.items()},
              "ap_mode": mode, "Ap": None if ap is None else ap.ap(mode), "clients": rows}
    if ap is not None:
        report["Ap_modes"] = {k: ap.ap(k) for k in sorted(ap.curve)}
        report["Ap_t"] = ap.ap_t(mode).round(5).tolist()
        report["ap_settings"] = {"n_Z": c.ap_evals, "z": c.ap_steps, "mu": c.ap_lr_mult}
    return report


def format_table(report: dict[str, Any]) -> str:
    """Markdown table of Ag^k and Ap^k per client and the Avg row (Ag, Ap; Eq. 15-16), in
    percent; "n/a" where the algorithm has no complete global model."""
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}"
    alg, mode = report["algorithm"], report["ap_mode"]
    lines = [f"| client | N^k | M^k | Ag^k ({alg}) | Ap^k ({alg}, {mode}) |",
             "|---|---:|---:|---:|---:|"]
    for r in report["clients"]:
        lines.append(f"| {r['client']} | {r['N']} | {r['M']} | {pct(r['Ag'])} | "
                     f"{pct(r['Ap'])} |")
    lines.append(f"| Avg | | | {pct(report['Ag'])} | {pct(report['Ap'])} |")
    return "\n".join(lines)
