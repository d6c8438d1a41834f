"""A run's end, after its last round: the Ap phase (Eq. 16), the report (``report.json``,
``report.md``, the Ap_t lines of ``metrics.jsonl``) and the test-hits record
(``test_hits.json``, :mod:`fedjax_sc.run.hits`).

In a run of several processes every process runs the Ap phase on its default device, from
host copies of the states (:func:`fedjax_sc.core.sharding.local`): on its own clients when it
loaded a share of them (:mod:`fedjax_sc.run.loading`; the curves are gathered), else on every
client; process 0 writes the files (:mod:`fedjax_sc.run.rundir`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jax

from fedjax_sc import streams
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import communication, personalize
from fedjax_sc.core.evaluate import accuracy_list, mean_accuracy
from fedjax_sc.run import cross_device, hits, loading, rundir
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.plumbing import figures, processes
from fedjax_sc.run.plumbing.tracking import Tracker
from fedjax_sc.run.report import dp_report, environment, format_table, make_report
from fedjax_sc.run.setup import Setup, global_params, tested_files


def finish(c: TrainConfig, scene, setup: Setup, state, client_states, result, train_data,
           test_data, comm, durations, log, tracker: Tracker,
           extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A member's Ap phase and report (report.json, report.md), after its last round;
    ``extra``: figures added to the report (a cross-device scene's,
    :mod:`fedjax_sc.run.cross_device`).

    Returns:
      The report (:func:`fedjax_sc.run.train.train`), with the final ``params`` and the
      clients' ``private`` leaves.

    Raises:
      OSError: the run folder cannot be written.
    """
    algorithm = setup.algorithm
    mode = c.ap_mode or algorithm.default_mode
    out = Path(c.out)
    ag, personal = result
    ap, ap_seconds = None, 0.0
    if c.ap:
        t0 = time.perf_counter()
        ap = personalize_phase(c, algorithm, state, client_states, train_data, test_data,
                               setup.root, log, scene)
        ap_seconds = time.perf_counter() - t0
        rundir.append_text(out / "metrics.jsonl", "".join(json.dumps({
            "phase": "ap", "round": c.rounds, "t": t, "steps": t * c.ap_steps,
            "Ap_t": {k: mean_accuracy(v[:, t]) for k, v in ap.curve.items()},
            "Ap_t_per_client": accuracy_list(ap.curve[mode][:, t])}) + "\n"
            for t in range(ap.curve[mode].shape[1])))
        tracker.ap({k: [mean_accuracy(v[:, t]) for t in range(v.shape[1])]
                    for k, v in ap.curve.items()})
    if personal is None:  # no private leaves: the personalised model is the global one
        personal = {"full": ag}

    central = algorithm.central
    report = make_report(c, scene, ag, personal, ap, mode)
    report["communication"] = comm
    report["training"] = "federated" if central is None else central.name
    report["timing"] = {"round_seconds": durations, "ap_seconds": ap_seconds}
    report["environment"] = environment()
    report.update(extra or {})
    if c.dp_clip is not None:
        report["dp"] = dp_report(c, scene)
        log(f"DP-SGD: {report['dp']['note']}")
    rundir.write_text(out / "report.json", json.dumps(report, indent=2))
    # which test reviews the final models get right: paired comparisons without checkpoints
    hits.write(out, hits.record(scene, algorithm, global_params(setup, state.params),
                                state.params, client_states.private, test_data, mode,
                                c.rounds, tested_files(out), ap))
    table = format_table(report) + ("" if comm is None else
                                     "\n\n" + communication.describe(comm))
    table += "\n\n" + cross_device.describe(extra) if extra else ""
    rundir.write_text(out / "report.md", table + _figure(out, log) + "\n")
    log(table)
    report["params"] = state.params
    report["private"] = client_states.private
    return report


def personalize_phase(c: TrainConfig, algorithm, state, client_states, train_data, test_data,
                      root, log, scene=None) -> personalize.Personalization:
    """The Ap phase (Eq. 16): fine-tune with mu * LR for n_Z * z steps, evaluating every z.

    With a ``scene`` that is one process's share (:attr:`~fedjax_sc.data.scenes.Scene.share`),
    ``train_data`` and ``test_data`` hold its clients and ``client_states`` every client's:
    the share's clients fine-tune here and the curves of every client are gathered
    (:func:`fedjax_sc.run.loading.gather_clients`)."""
    lr = c.ap_lr_mult * c.lr
    emb_lr = None if c.embedding_lr is None else c.ap_lr_mult * c.embedding_lr
    run = personalize.make_personalize(
        algorithm, client_sgd(lr, c.momentum, emb_lr), batch_size=c.batch_size,
        num_evals=c.ap_evals, steps_per_eval=c.ap_steps)
    t0 = time.perf_counter()
    share = None if scene is None else scene.share
    if share is not None:
        client_states = client_states._replace(
            private=loading.rows(client_states.private, scene),
            algorithm=loading.rows(client_states.algorithm, scene))
    result = run(state, client_states, train_data, test_data,
                 jax.random.fold_in(root, streams.AP), 0 if share is None else share[0])
    if share is not None:
        result = result._replace(curve=loading.gather_clients(result.curve, scene),
                                 correct=loading.gather_clients(result.correct, scene))
    mode = c.ap_mode or algorithm.default_mode
    log(f"Ap phase: {c.ap_evals} x {c.ap_steps} fine-tuning steps at lr {lr:g} in "
        f"{time.perf_counter() - t0:.1f} s; Ap ({mode}) {result.ap(mode):.4f}; "
        + ", ".join(f"{k}: {result.ap(k):.4f}" for k in sorted(result.curve)))
    return result


def _figure(out: Path, log) -> str:
    """Draws the run's ``convergence.png``
    (:func:`fedjax_sc.run.plumbing.figures.run_figure`) where matplotlib is installed; returns the line report.md embeds it with ("" without one)."""
    if not figures.have_matplotlib() or not processes.primary():
        return ""
    try:
        path = figures.run_figure(out)
    except (OSError, ValueError) as e:  # the run stands without its figure
        log(f"no convergence figure: {e}")
        return ""
    return "" if path is None else f"\n\n![Ag per round, then Ap_t]({path.name})"
