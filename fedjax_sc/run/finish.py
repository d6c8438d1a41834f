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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc import streams
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import communication, personalize, population
from fedjax_sc.core.evaluate import accuracy_list, mean_accuracy
from fedjax_sc.run import cross_device, hits, loading, rundir
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.plumbing import figures, processes
from fedjax_sc.run.plumbing.tracking import Tracker
from fedjax_sc.run.report import dp_report, environment, format_table, make_report
from fedjax_sc.run.setup import Setup, global_params, tested_files


def finish(c: TrainConfig, scene, setup: Setup, state, client_states, result,
           ap: personalize.Personalization | None, ap_seconds: float, test_data, comm,
           durations, log, tracker: Tracker, extra: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    """A member's report (report.json, report.md, the Ap_t lines of metrics.jsonl), after its
    last round and its Ap phase (``ap``, from :func:`personalize_members`, None without one;
    ``ap_seconds``: the member's share of that phase's wall time; ``durations``: the seconds
    of the rounds this invocation trained, recorded where metrics.jsonl lacks a round's);
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
    if ap is not None:
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
    # every round's seconds, also those of earlier invocations of a resumed run
    seconds = [r.get("seconds") for r in rundir.read_metrics(  # lost rounds: named at resume
        out / "metrics.jsonl", c.rounds, log=lambda _: None)]
    report["timing"] = {"round_seconds": seconds if len(seconds) == c.rounds else durations,
                        "ap_seconds": ap_seconds}
    report["environment"] = environment()
    report.update(extra or {})
    if c.dp_clip is not None:
        report["dp"] = dp_report(c, scene)
        log(f"DP-SGD: {report['dp']['note']}")
    rundir.write_text(out / "report.json", json.dumps(report, indent=2))
    # which test reviews the final models get right: paired comparisons without checkpoints
    hits.write(out, hits.record(scene, algorithm, global_params(setup, state.params),
                                state.params, client_states.private, test_data, mode,
                                c.rounds, tested_files(out), ap, c.clients_per_round))
    table = format_table(report) + ("" if comm is None else
                                     "\n\n" + communication.describe(comm))
    table += "\n\n" + cross_device.describe(extra) if extra else ""
    rundir.write_text(out / "report.md", table + _figure(out, log) + "\n")
    log(table)
    report["params"] = state.params
    report["private"] = client_states.private
    report["server_state"] = state.algorithm  # the algorithm's own (Hooks.server_init)
    report["client_state"] = client_states.algorithm  # stacked [N, ...] (Hooks.client_init)
    return report


def personalize_phase(c: TrainConfig, algorithm, state, client_states, train_data, test_data,
                      root, log, scene=None) -> personalize.Personalization:
    """One run's Ap phase (Eq. 16), as :func:`personalize_members` runs a population's."""
    return personalize_members([c], lambda values: algorithm, {}, [state], [client_states],
                               train_data, test_data, [root], [log],
                               c.ap_mode or algorithm.default_mode, scene)[0][0]


def personalize_members(cs: Sequence[TrainConfig], build: Callable[[dict[str, Any]], Any],
                        hparams: dict[str, Any], states: Sequence[Any],
                        client_states: Sequence[Any], train_data, test_data,
                        roots: Sequence[jax.Array], logs: Sequence[Callable[[str], None]],
                        mode: str, scene=None) -> tuple[list[personalize.Personalization], float]:
    """The Ap phase (Eq. 16) of every member in one compiled program
    (:func:`fedjax_sc.core.personalize.make_population_personalize`, the members in turn
    under ``lax.map``): each fine-tunes with its mu * LR for n_Z * z steps, evaluating every
    z.

    Args:
      cs: the members' configurations (they share all but the values of
        :data:`~fedjax_sc.run.members.GRID_NAMES` and the seed).
      build: ``build(values) -> Algorithm`` (:func:`fedjax_sc.run.setup.population_builder`).
      hparams: the values that differ between the members (config field -> float32 ``[P]``,
        :func:`fedjax_sc.run.members.hparams`); ``{}`` for one run.
      states / client_states: each member's server and client states (host copies).
      train_data / test_data: the clients' training and test splits
        (:class:`~fedjax_sc.data.client_data.ClientData`; one process's share, below).
      roots: each member's root key (its Ap randomness: ``fold_in(root, AP)``).
      logs: each member's log.
      mode: the Ap phase's inference mode (``--ap-mode`` or the algorithm's default), named
        in the log lines.
      scene: with a scene that is one process's share
        (:attr:`~fedjax_sc.data.scenes.Scene.share`), ``train_data`` and ``test_data`` hold
        its clients and ``client_states`` every client's: the share's clients fine-tune here
        and the curves of every client are gathered
        (:func:`fedjax_sc.run.loading.gather_clients`).

    Returns:
      ``(results, seconds)``: each member's :class:`~fedjax_sc.core.personalize.Personalization`
      and its share of the phase's wall time (seconds / P).
    """
    c = cs[0]
    lrs = [m.ap_lr_mult * m.lr for m in cs]
    emb_lrs = [None if m.embedding_lr is None else m.ap_lr_mult * m.embedding_lr for m in cs]
    values = dict(hparams)
    if len(set(lrs)) > 1:  # a grid over mu or lr: the fine-tuning LR traced per member
        values["ap_lr"] = np.asarray(lrs, np.float32)
        if emb_lrs[0] is not None:
            values["ap_embedding_lr"] = np.asarray(emb_lrs, np.float32)

    def member(v):
        algorithm = build({k: x for k, x in v.items() if not k.startswith("ap_")})
        return algorithm, client_sgd(v.get("ap_lr", lrs[0]), v.get("momentum", c.momentum),
                                     v.get("ap_embedding_lr", emb_lrs[0]))

    # one member after another inside the program on every device: under vmap every client's
    # evaluation batches of every member would be live at once, P times the memory that the
    # population's size was chosen for (members.member_bytes counts the rounds' states)
    # and the clients in blocks of M when a round trains M of them: the device then holds no
    # more clients at once in the Ap phase than in a round
    run = personalize.make_population_personalize(
        member, batch_size=c.batch_size, num_evals=c.ap_evals, steps_per_eval=c.ap_steps,
        member_axis="map", clients_per_call=c.clients_per_round)
    t0 = time.perf_counter()
    share = None if scene is None else scene.share
    if share is not None:
        client_states = [loading.rows(s, scene) for s in client_states]
    keys = jnp.stack([jax.random.fold_in(r, streams.AP) for r in roots])
    results = run(population.stack(states), population.stack(client_states), train_data,
                  test_data, keys, values, 0 if share is None else share[0])
    if share is not None:
        results = [r._replace(curve=loading.gather_clients(r.curve, scene),
                              correct=loading.gather_clients(r.correct, scene),
                              finite=loading.gather_clients(r.finite, scene))
                   for r in results]
    seconds = time.perf_counter() - t0
    for m, lr, result, log in zip(cs, lrs, results, logs):
        log(f"Ap phase: {m.ap_evals} x {m.ap_steps} fine-tuning steps at lr {lr:g} in "
            f"{seconds:.1f} s" + (f" ({len(cs)} members in one program)" if len(cs) > 1
                                  else "") + f"; Ap ({mode}) {result.ap(mode):.4f}; "
            + ", ".join(f"{k}: {result.ap(k):.4f}" for k in sorted(result.curve)))
        diverged = diverged_clients(result, None if scene is None else scene.client_names)
        if diverged:
            log(f"Ap phase: the fine-tuning went non-finite for {len(diverged)} of "
                f"{len(result.finite)} clients ({', '.join(diverged)}); each scores "
                f"0 from that evaluation on (a smaller --ap-lr-mult than {m.ap_lr_mult:g} "
                "avoids it)")
    return results, seconds / len(cs)


def diverged_clients(result: personalize.Personalization,
                     names: Sequence[str] | None = None) -> list[str]:
    """``"name from t = j"`` for every client whose Ap fine-tuning went non-finite (j: the
    first evaluation at which its model was not finite), in client order; ``[]`` when none
    did. ``names``: the clients' names (default ``client k``)."""
    start = result.nonfinite_from()
    return [f"{names[k] if names is not None else f'client {k}'} from t = {int(t)}"
            for k, t in enumerate(start) if t >= 0]


def _figure(out: Path, log) -> str:
    """Draws the run's ``convergence.png``
    (:func:`fedjax_sc.run.plumbing.figures.run_figure`) where matplotlib is installed; returns
    the line report.md embeds it with ("" without one)."""
    if not figures.have_matplotlib() or not processes.primary():
        return ""
    try:
        path = figures.run_figure(out)
    except (OSError, ValueError) as e:  # the run stands without its figure
        log(f"no convergence figure: {e}")
        return ""
    return "" if path is None else f"\n\n![Ag per round, then Ap_t]({path.name})"
