"""The end-of-run report: per-client Ag^k and Ap^k (Li et al. 2021, Eq. 14-16) as JSON and as
the Markdown table printed at the end of ``fedjax-sc train``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedjax_sc.core import personalize
from fedjax_sc.core.evaluate import mean_accuracy
from fedjax_sc.data import scenes


def make_report(c: Any, scene: scenes.Scene, ag: np.ndarray | None,
            personal: dict[str, np.ndarray], ap: personalize.Personalization | None,
            mode: str) -> dict[str, Any]:
    """The end-of-run report (``report.json``): Ag^k, the personalised accuracy before
    fine-tuning and Ap^k per client, their means, the Ap_t curve and the Ap settings, and per
    client the lines that were not UTF-8 and were decoded as latin-1 (``latin1_lines``). A
    client without test examples (kept with ``allow_empty``) has None (n/a) figures and is
    left out of the means.

    Args:
      c: the resolved :class:`fedjax_sc.run.train.TrainConfig`.
      scene: the scene trained on.
      ag: float ``[K]`` Ag^k, or None when the algorithm has no global model.
      personal: ``{mode: float [K]}`` personalised accuracy before fine-tuning.
      ap: the Ap phase's result, or None when it was skipped.
      mode: the inference mode Ap reports.
    """
    pmode = mode if mode in personal else next(iter(personal))
    value = lambda v: None if v is None or np.isnan(v) else float(v)
    rows = []
    for k, n in enumerate(scene.client_names):
        rows.append({"client": n, "N": int(scene.train.counts[k]), "M": int(scene.test.counts[k]),
                     "Ag": None if ag is None else value(ag[k]),
                     "personal": value(personal[pmode][k]),
                     "Ap": None if ap is None else value(ap.ap_per_client(mode)[k]),
                     "latin1_lines": int(scene.stats[k]["n_latin1_lines"])})
    report = {"scene": c.scene, "algorithm": c.algorithm, "rounds": c.rounds,
              "Ag": None if ag is None else mean_accuracy(ag),
              "personal": {k: mean_accuracy(v) for k, v in personal.items()},
              "ap_mode": mode, "Ap": None if ap is None else ap.ap(mode), "clients": rows,
              "latin1_lines": {r["client"]: r["latin1_lines"] for r in rows
                               if r["latin1_lines"]}}
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
