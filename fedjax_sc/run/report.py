"""The end-of-run report: per-client Ag^k and Ap^k (Li et al. 2021, Eq. 14-16) as JSON and as
the Markdown table printed at the end of ``fedjax-sc train``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fedjax_sc.algorithms import dp_sgd
from fedjax_sc.core import personalize
from fedjax_sc.core.evaluate import accuracy_list, mean_accuracy
from fedjax_sc.data import scenes
from fedjax_sc.run.ranges import local_work


def make_report(c: Any, scene: scenes.Scene, ag: np.ndarray | None,
            personal: dict[str, np.ndarray], ap: personalize.Personalization | None,
            mode: str) -> dict[str, Any]:
    """The end-of-run report (``report.json``): Ag^k, the personalised accuracy before
    fine-tuning and Ap^k per client, their means, the Ap_t curve and the Ap settings, and per
    client the lines that were not UTF-8 and were decoded as latin-1 (``latin1_lines``), and,
    where a client's Ap fine-tuning went non-finite, the evaluation from which it scored 0
    (``Ap_nonfinite_from``: client -> t). A
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
        rows.append({"client": n, "N": int(scene.counts("train")[k]),
                     "M": int(scene.counts("test")[k]),
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
        start = ap.nonfinite_from()
        if (start >= 0).any():  # client -> the first evaluation its fine-tuned model was not finite
            report["Ap_nonfinite_from"] = {n: int(t) for n, t in zip(scene.client_names, start)
                                           if t >= 0}
    return report


def format_table(report: dict[str, Any]) -> str:
    """Markdown table of Ag^k and Ap^k per client and the Avg row (Ag, Ap; Eq. 15-16), in
    percent; "n/a" where the algorithm has no complete global model."""
    pct = lambda v: "n/a" if v is None else f"{100 * v:.1f}"
    alg, mode = report["algorithm"], report["ap_mode"]
    alg = alg.rpartition(":")[2] if ":" in alg else alg  # a user's FILE.py:FUNCTION
    lines = [f"| client | N^k | M^k | Ag^k ({alg}) | Ap^k ({alg}, {mode}) |",
             "|---|---:|---:|---:|---:|"]
    for r in report["clients"]:
        lines.append(f"| {r['client']} | {r['N']} | {r['M']} | {pct(r['Ag'])} | "
                     f"{pct(r['Ap'])} |")
    lines.append(f"| Avg | | | {pct(report['Ag'])} | {pct(report['Ap'])} |")
    return "\n".join(lines)


def dp_report(c: Any, scene: scenes.Scene) -> dict[str, Any]:
    """Each client's DP-SGD privacy after ``c.rounds`` rounds: noise multiplier z, sampling
    rate q = B / N^k, local steps and epsilon at ``c.dp_delta`` (RDP accountant of
    ``dp-accounting``; ``None`` when it is not installed, with the reason in ``note``).

    The steps are an upper bound, so epsilon is too: every round, the most a client can take
    (E ceil(N^k / B), or ``--local-steps``' N or HI, :meth:`LocalWork.scan_length`); a
    client that sits out rounds (sampling, dropout, straggling) spends less."""
    counts, work = scene.counts("train"), local_work(c)
    steps = [c.rounds * work.scan_length(c.batch_size, c.local_epochs, int(n)) if n else 0
             for n in counts]
    rates = [min(1.0, c.batch_size / max(int(n), 1)) for n in counts]
    eps = [dp_sgd.epsilon(c.dp_noise, q, t, c.dp_delta) for q, t in zip(rates, steps)]
    if any(e is None for e in eps):
        note = (f"z = {c.dp_noise}, C = {c.dp_clip}, q = B/N^k in [{min(rates):.4f}, "
                f"{max(rates):.4f}]; epsilon not computed: dp-accounting is not installed "
                f"(pip install 'fedjax_sc[dp]')")
    else:
        note = (f"z = {c.dp_noise}, C = {c.dp_clip}: epsilon in [{min(eps):.3g}, "
                f"{max(eps):.3g}] at delta = {c.dp_delta} per client (RDP, Poisson-sampling "
                f"approximation)")
    return {"noise_multiplier": c.dp_noise, "l2_norm_clip": c.dp_clip, "delta": c.dp_delta,
            "sampling_rate": rates, "steps": steps, "epsilon": eps, "note": note}


def environment() -> dict[str, str]:
    """The software and hardware a run ran on (recorded in ``report.json``): a rerun from the
    saved configuration gives the same figures bit for bit where these match; another JAX /
    XLA version or CPU may round differently (float32 training on FDU-MTL turns a 1e-7
    difference into about a point of early-round accuracy)."""
    import importlib.metadata as md
    import platform

    import jax

    def version(package: str) -> str:
        try:
            return md.version(package)
        except md.PackageNotFoundError:
            return "not installed"

    return {"python": platform.python_version(), "platform": platform.platform(),
            "machine": platform.machine(), "processor": platform.processor(),
            "device": f"{jax.devices()[0].platform}: {jax.devices()[0].device_kind} x "
                      f"{jax.device_count()}" + (f" in {jax.process_count()} processes"
                                                 if jax.process_count() > 1 else ""),
            **{p: version(p) for p in ("fedjax_sc", "jax", "jaxlib", "flax", "optax",
                                       "numpy", "orbax-checkpoint")}}


def round_row(r: int, m: Any, ag: np.ndarray | None, personal: dict[str, np.ndarray] | None,
              mode: str, seconds: float, comm: dict[str, Any] | None,
              clients: np.ndarray | None, hetero: bool) -> dict[str, Any]:
    """One round's line of ``metrics.jsonl``.

    Args:
      r: the round (1-based).
      m: the round's :class:`~fedjax_sc.core.round.RoundMetrics` as numpy ``[K]`` arrays.
      ag: Ag^k ``[K]`` or None; personal: ``{mode: [K]}`` or None; mode: the Ap mode.
      seconds: the round's wall time.
      comm: the communication summary (None for centralised training).
      clients: the indices of the sampled clients (partial participation), else None.
      hetero: heterogeneous clients: ``local_steps_per_client`` and ``participants`` (the
        clients that ran at least one step) are recorded. Either way the train loss and aux
        means cover the clients that ran a step (not one without training data), and are
        None when none did (every client dropped out); such a client's per-client train
        loss and aux figures are None.
    """
    took_part = m.steps > 0
    mean = lambda v: float(np.mean(v[took_part])) if took_part.any() else None  # noqa: E731
    row = {"phase": "round", "round": r, "train_loss": mean(m.train_loss),
           "Ag": None if ag is None else mean_accuracy(ag),
           "seconds": seconds, "client_steps_per_s": int(m.steps.sum()) / seconds,
           # a client that ran no step has no train loss or aux figure: null, not 0
           "train_loss_per_client": [x if ran else None for x, ran in
                                     zip(m.train_loss.round(5).tolist(), took_part)],
           "Ag_per_client": None if ag is None else accuracy_list(ag),
           "aux": {k: mean(v) for k, v in m.aux.items()},
           "aux_per_client": {k: [float(f"{x:.6g}") if ran else None  # a term of 3e-5
                                  for x, ran in zip(v.tolist(), took_part)]
                              for k, v in m.aux.items()},
           "communication": comm}
    if hetero:
        row["local_steps_per_client"] = m.steps.tolist()
        row["participants"] = int(np.count_nonzero(m.steps > 0))
    if clients is not None:
        row["clients"] = clients.tolist()
    if personal is not None:
        row["personal"] = {k: mean_accuracy(v) for k, v in personal.items()}
        row["personal_per_client"] = accuracy_list(personal[mode])
    return row
