"""The training loop: scene -> compiled rounds -> Ag per round -> checkpoints and a final report.

Writes into ``out``: ``config.json`` (the resolved configuration), ``vocab.json``,
``metrics.jsonl`` (one JSON object per round with ``"phase": "round"``, then one per Ap
evaluation with ``"phase": "ap"``: the Ap_t curve), ``checkpoints/`` (orbax, one per round, the
last two kept; server params and states, round and the clients' private leaves),
``report.json`` and ``report.md`` (per-client Ag^k and Ap^k table). ``resume=True`` continues
from the last checkpoint; because the round key is ``fold_in(seed key, round)``, a resumed run
ends with exactly the parameters of an uninterrupted one. Resuming a finished run (``rounds``
equal to the checkpoint's round) only redoes the evaluation and the Ap phase.

Scale: ``partition`` re-splits the scene's pooled domains into ``num_clients`` clients
(:mod:`fedjax_sc.data.partition`); ``clients_per_round`` samples M of them per round
(:class:`fedjax_sc.core.participation.ClientFeed`: data and private leaves stay on the host,
sampled rows are gathered and scattered back); the client axis of every round is sharded over
all devices (:mod:`fedjax_sc.core.sharding`); ``server_opt`` adds a FedOpt server
(:mod:`fedjax_sc.algorithms.fedopt`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fedjax_sc import streams
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import communication, participation, personalize, population, sharding
from fedjax_sc.core.evaluate import (
    accuracy_list,
    make_evaluate,
    make_personal_evaluate,
    mean_accuracy,
)
from fedjax_sc.core.round import ClientStates, build_round
from fedjax_sc.data.client_data import client_data, host_client_data
from fedjax_sc.run import members, rundir
from fedjax_sc.run.config import (  # noqa: F401 (re-exported: the run's configuration)
    DTYPES,
    EMBEDDINGS,
    SCENES,
    TrainConfig,
    config_diff,
    config_from_json,
    corpus_files,
    load_scene,
)
from fedjax_sc.run.registry import ALGORITHMS, build_algorithm  # noqa: F401
from fedjax_sc.run.report import dp_report, environment, format_table, make_report
from fedjax_sc.run.setup import (  # noqa: F401 (re-exported: a run's states)
    CheckpointError,
    Setup,
    build_setup,
    global_params,
    load_run,
    newest_verified,
    population_builder,
    restore_checkpoint,
    save_checkpoint,
)
from fedjax_sc.run.tracking import Tracker


class NonFiniteUpdateError(RuntimeError):
    """A client's local update produced NaN/inf; the round was not aggregated or saved."""


def train(config: TrainConfig, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Runs federated training, then the Ap phase, as ``config`` says.

    Args:
      config: the run's configuration (``None`` fields resolved from the scene preset).
      log: where progress lines go.

    Returns:
      The final report: ``{"rounds", "Ag" (None when not applicable), "Ap", "ap_mode",
      "clients": [{"client", "N", "M", "Ag", "personal", "Ap"}...], "params": final global
      params, "private": the clients' private leaves, ...}``.

    Raises:
      NonFiniteUpdateError: a client's update turned NaN/inf (names round and client).
      FileExistsError / FileNotFoundError / ValueError: output directory, data or config
        problems (all found before an overwritten run is deleted).
      CheckpointError: a checkpoint could not be written (names the round).
      OSError: the output folder cannot be written.
    """
    return train_population([config], log)[0]


def train_population(configs: Sequence[TrainConfig], log: Callable[[str], None] = print,
                     index: Path | None = None, grid: Sequence[str] = ()
                     ) -> list[dict[str, Any] | None]:
    """Trains P runs as one population (:mod:`fedjax_sc.core.population`): one compiled round
    for every member, each member's folder written as :func:`train` writes one run's.

    The members share everything but their seeds, the values of
    :data:`~fedjax_sc.run.members.TRACED` and the Ap phase's mu
    (:func:`~fedjax_sc.run.members.check_members`); a population of one is :func:`train`. A
    member whose update turns NaN/inf is reported, keeps its last checkpoint and stops; the
    others go on (with one member, :class:`NonFiniteUpdateError` is raised).

    Args:
      configs: the members' configurations (distinct ``out`` folders).
      log: where progress lines go (each prefixed with the member's folder when P > 1).
      index: where to keep ``population.json`` (:func:`~fedjax_sc.run.members.write_index`);
        None: none.
      grid: the names of the grid's settings, recorded in ``population.json``.

    Returns:
      Every member's report (:func:`train`), None for a member that diverged.

    Raises:
      as :func:`train`; ValueError: members that differ in a setting that changes the
      program or the data (names it).
    """
    cs = [config.resolved() for config in configs]
    members.check_members(cs)
    with contextlib.ExitStack() as locks:  # one process per run folder
        for m in cs:
            locks.enter_context(rundir.locked(Path(m.out)))
        return _train_locked(cs, log, index, grid)


def _train_locked(cs: list[TrainConfig], log: Callable[[str], None], index: Path | None,
                  grid: Sequence[str]) -> list[dict[str, Any] | None]:
    """:func:`train_population` once the members' folders are locked."""
    c, size = cs[0], len(cs)
    for m in cs:
        rundir.check_out_dir(Path(m.out), m)
    say = ([log] if size == 1 else
           [lambda line, name=Path(m.out).name: log(f"[{name}] {line}") for m in cs])

    t0 = time.perf_counter()
    scene = load_scene(c)
    names = scene.client_names
    log(f"scene {scene.name}: {scene.num_clients} clients, V = {len(scene.vocab)}, "
        f"L = {scene.max_len}, N = {int(scene.train.counts.sum())} train / "
        f"{int(scene.test.counts.sum())} test reviews ({time.perf_counter() - t0:.1f} s)")
    latin1 = {st["client"]: st["n_latin1_lines"] for st in scene.stats if st["n_latin1_lines"]}
    if latin1:
        log("lines not valid UTF-8, decoded as latin-1: "
            + ", ".join(f"{k} {v:,}" for k, v in latin1.items()))
    empty = [f"{n} ({'no training' if not scene.train.counts[k] else 'no test'} examples)"
             for k, n in enumerate(names)
             if not scene.train.counts[k] or not scene.test.counts[k]]
    if empty:
        log("kept by --allow-empty-clients: " + ", ".join(empty))

    setups = [build_setup(m, scene, log if i == 0 else _quiet) for i, m in enumerate(cs)]
    algorithm = setups[0].algorithm  # the members' shared structure: evaluation, Ap modes
    hparams = members.hparams(cs)
    build = population_builder(c, scene, members.TRACED)
    state, client_states = population.init_from_params(
        build, population.stack([global_params(s, s.state.params) for s in setups]), hparams,
        scene.num_clients)
    keys = jnp.stack([s.train_key for s in setups])
    if size > 1:
        log(f"population of {size} members in one program"
            + (f"; traced per member: {', '.join(hparams)}" if hparams else ""))
    # the Ap phase always fine-tunes per client; a centralised trainer says what it trains on
    central = algorithm.central
    host_train = host_client_data(scene.train, local_vocab=c.local_vocab)
    round_host = host_train if central is None else central.data(scene.train, c.local_vocab)
    if c.clients_per_round is not None and central is not None:
        raise ValueError(f"{c.algorithm} is trained centrally: --clients-per-round does not "
                         f"apply")
    if c.clients_per_round is not None and c.clients_per_round > scene.num_clients:
        raise ValueError(f"--clients-per-round {c.clients_per_round} > {scene.num_clients} "
                         f"clients")
    test_data = client_data(scene.test)
    has_private = bool(jax.tree.leaves(client_states.private))
    global_eval = (None if algorithm.global_predict is None
                   else make_evaluate(algorithm.global_predict))
    personal_eval = make_personal_evaluate(algorithm.predict) if has_private else None
    mode = c.ap_mode or algorithm.default_mode
    tokens = jax.ShapeDtypeStruct((1, scene.max_len), jnp.int32)
    modes = sorted(jax.eval_shape(algorithm.predict, global_params(
        setups[0], setups[0].state.params), tokens))
    if mode not in modes:  # found before any round trains or any file is removed
        raise ValueError(f"--ap-mode {mode!r}: {c.algorithm} has the modes {modes}")
    comm = None
    if central is None:
        comm = communication.account(algorithm, setups[0].state, host_train).summary()
        log(communication.describe(comm))
    else:
        log(f"{c.algorithm} is trained centrally: no communication")

    vocab_json = scene.vocab.to_json()
    data_print = rundir.fingerprint(corpus_files(c), vocab_json)
    found = []  # (round, states) of each resumed member's newest intact checkpoint
    for m in cs:
        out = Path(m.out)
        if m.resume:
            last = rundir.last_round(out)
            if last is None:
                raise FileNotFoundError(f"--resume: {out / 'checkpoints'} holds no checkpoint, "
                                        f"nothing to resume; start afresh with --overwrite")
            if last > m.rounds:
                raise ValueError(f"--resume: the checkpoint in {out} is at round {last}, past "
                                 f"--rounds {m.rounds}")
            note = rundir.check_resume_data(out, data_print, vocab_json)
            if note:
                log(note)
            found.append(newest_verified(_manager(out), population.member(state, len(found)),
                                         population.member(client_states, len(found)), log))
            if found[-1] is None:
                raise CheckpointError(f"--resume: no checkpoint in {out / 'checkpoints'} "
                                      f"restores intact (moved to corrupt-checkpoints/); start "
                                      f"afresh with --overwrite")
            for name in ("report.json", "report.md"):  # rewritten when the run ends
                (out / name).unlink(missing_ok=True)
        elif m.overwrite and rundir.run_files(out):  # the new inputs are all checked
            rundir.remove_run(out)
            log(f"--overwrite: removed the earlier run in {out}")
        out.mkdir(parents=True, exist_ok=True)
    ckpts = [_manager(Path(m.out)) for m in cs]
    start = min((step for step, _ in found), default=0)
    if start:  # every member from the newest round all of them hold intact
        restored = [states if step == start else restore_checkpoint(
            ckpts[i], start, population.member(state, i), population.member(client_states, i))
            for i, (step, states) in enumerate(found)]
        for ck in ckpts:  # rounds past the common one are trained again, identically
            for step in ck.all_steps():
                if step > start:
                    ck.delete(step)
        state, client_states = population.stack(restored)
        log(f"resumed from {', '.join(str(Path(m.out) / 'checkpoints') for m in cs)} at "
            f"round {start}")
    metrics_paths = [Path(m.out) / "metrics.jsonl" for m in cs]
    for m, path in zip(cs, metrics_paths):
        history = rundir.read_metrics(path, start, log)
        rundir.write_text(path, "".join(json.dumps(r) + "\n" for r in history))
        rundir.write_text(Path(m.out) / "config.json", json.dumps(dataclasses.asdict(m),
                                                                  indent=2))
        rundir.write_text(Path(m.out) / "vocab.json", vocab_json)
        rundir.write_text(Path(m.out) / "fingerprint.json", json.dumps(data_print, indent=2))
    status = ["running"] * size
    trackers = [Tracker(Path(m.out), m.tensorboard) for m in cs]
    if index is not None:
        members.write_index(index, cs, status, grid)

    mesh = sharding.client_mesh()
    state = sharding.put_replicated(state, mesh)
    feeds = [participation.ClientFeed(round_host, population.member(client_states.private, i),
                                      mesh, c.clients_per_round, c.sampling, m.seed)
             for i, m in enumerate(cs)]
    feed = feeds[0]
    if feed.partial or mesh.size > 1:
        log(f"{feed.num_sampled} of {feed.num_clients} clients per round "
            f"({c.sampling if feed.partial else 'all'}); client axis of {feed.round_size} "
            f"over {mesh.size} device(s)")

    def inputs(idxs):
        got = [f.inputs(idx) for f, idx in zip(feeds, idxs)]
        data = population.stack([d for d, _ in got]) if feed.partial else got[0][0]
        return data, ClientStates(population.stack([p for _, p in got]))

    def accuracies(i):
        params = population.member(state.params, i)
        ag = (None if global_eval is None else
              np.asarray(global_eval(global_params(setups[i], params), test_data)))
        personal = (None if personal_eval is None else
                    {k: np.asarray(v) for k, v in personal_eval(
                        (params, feeds[i].private), test_data).items()})
        return ag, personal

    results = [accuracies(i) for i in range(size)]
    if start < c.rounds:
        t0 = time.perf_counter()
        step = population.build_population_round(
            build, batch_size=c.batch_size, local_epochs=c.local_epochs,
            trainer=build_round if central is None else central.build,
            per_member_data=feed.partial)
        data, private = inputs([f.sample(start + 1) for f in feeds])
        # the round replaces the server and client states: XLA may reuse their buffers
        round_step = jax.jit(step, donate_argnums=(0, 1)).lower(
            state, private, data, keys, hparams).compile()
        log(f"round compiled in {time.perf_counter() - t0:.1f} s; algorithm {c.algorithm}, "
            f"batch {c.batch_size}, lr {c.lr}, {c.local_epochs} local epochs, d = {c.embed_dim}")
    durations = []
    for r in range(start + 1, c.rounds + 1):
        t0 = time.perf_counter()
        idxs = [f.sample(r) for f in feeds]
        data, private = inputs(idxs)
        new_state, new_client_states, ms = round_step(state, private, data, keys, hparams)
        for i, idx in enumerate(idxs):
            m = jax.tree.map(lambda x: np.asarray(x)[i, :len(idx)], ms)
            if status[i] == "running" and not m.finite.all():
                k = int(np.flatnonzero(~m.finite)[0])
                who = (names[idx[k]] if feed.num_clients == scene.num_clients
                       else "all clients pooled")
                error = (f"round {r}: client {int(idx[k])} ({who}) produced a non-finite update "
                         f"(mean local loss {float(m.train_loss[k])}); nothing was aggregated "
                         f"or saved. Try a smaller --lr.")
                if size == 1:
                    raise NonFiniteUpdateError(error)
                say[i](f"{error} This member stops; the others go on.")
                status[i] = f"diverged at round {r}"
            if status[i] == "running":
                feeds[i].update(idx, population.member(new_client_states.private, i))
        if "running" not in status:
            raise NonFiniteUpdateError(f"round {r}: every member of the population diverged")
        state = new_state
        jax.block_until_ready((state.params, [f.private for f in feeds]))
        seconds = time.perf_counter() - t0
        durations.append(seconds)
        for i, idx in enumerate(idxs):
            if status[i] != "running":
                continue
            m = jax.tree.map(lambda x: np.asarray(x)[i, :len(idx)], ms)
            results[i] = ag, personal = accuracies(i)
            steps = int(m.steps.sum())
            row = {"phase": "round", "round": r, "train_loss": float(np.mean(m.train_loss)),
                   "Ag": None if ag is None else mean_accuracy(ag),
                   "seconds": seconds, "client_steps_per_s": steps / seconds,
                   "train_loss_per_client": m.train_loss.round(5).tolist(),
                   "Ag_per_client": None if ag is None else accuracy_list(ag),
                   "aux": {k: float(np.mean(v)) for k, v in m.aux.items()},
                   "aux_per_client": {k: v.round(5).tolist() for k, v in m.aux.items()},
                   "communication": comm}
            if feed.partial:
                row["clients"] = idx.tolist()
            if personal is not None:
                row["personal"] = {k: mean_accuracy(v) for k, v in personal.items()}
                row["personal_per_client"] = accuracy_list(personal[mode])
            with metrics_paths[i].open("a") as f:
                f.write(json.dumps(row) + "\n")
            trackers[i].round(row, list(names) if not feed.partial else
                              [names[k] for k in idx])
            save_checkpoint(ckpts[i], r, population.member(state, i),
                            ClientStates(feeds[i].private))
            eta = (c.rounds - r) * float(np.mean(durations))
            shown = "n/a" if ag is None else f"{row['Ag']:.4f}"
            extra = ("" if personal is None else
                     f" | personal ({mode}) {row['personal'][mode]:.4f}")
            say[i](f"round {r:3d}/{c.rounds} | train loss {row['train_loss']:.4f} | Ag {shown}"
                   f"{extra} | {seconds:6.1f} s | {row['client_steps_per_s']:6.1f} "
                   f"client-steps/s | ETA {_hms(eta)}")
        if index is not None and f"diverged at round {r}" in status:
            members.write_index(index, cs, status, grid)
    for ck in ckpts:
        ck.wait_until_finished()
        ck.close()

    reports: list[dict[str, Any] | None] = []
    train_data = jax.tree.map(jnp.asarray, host_train) if c.ap else None
    for i, m in enumerate(cs):
        if status[i] != "running":
            reports.append(None)
            continue
        reports.append(_finish(m, scene, setups[i], population.member(state, i),
                               ClientStates(feeds[i].private), results[i], train_data,
                               test_data, comm, durations, say[i], trackers[i]))
        status[i] = "finished"
    for tracker in trackers:
        tracker.close()
    if index is not None:
        members.write_index(index, cs, status, grid)
    return reports


def _finish(c: TrainConfig, scene, setup: Setup, state, client_states, result, train_data,
            test_data, comm, durations, log, tracker: Tracker) -> dict[str, Any]:
    """A member's Ap phase and report (report.json, report.md), after its last round."""
    algorithm = setup.algorithm
    mode = c.ap_mode or algorithm.default_mode
    out = Path(c.out)
    ag, personal = result
    ap, ap_seconds = None, 0.0
    if c.ap:
        t0 = time.perf_counter()
        ap = _personalize(c, algorithm, state, client_states, train_data, test_data,
                          setup.root, log)
        ap_seconds = time.perf_counter() - t0
        with (out / "metrics.jsonl").open("a") as f:
            for t in range(ap.curve[mode].shape[1]):
                f.write(json.dumps({
                    "phase": "ap", "round": c.rounds, "t": t, "steps": t * c.ap_steps,
                    "Ap_t": {k: mean_accuracy(v[:, t]) for k, v in ap.curve.items()},
                    "Ap_t_per_client": accuracy_list(ap.curve[mode][:, t])}) + "\n")
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
    if c.dp_clip is not None:
        report["dp"] = dp_report(c, scene)
        log(f"DP-SGD: {report['dp']['note']}")
    rundir.write_text(out / "report.json", json.dumps(report, indent=2))
    table = format_table(report) + ("" if comm is None else
                                     "\n\n" + communication.describe(comm))
    rundir.write_text(out / "report.md", table + "\n")
    log(table)
    report["params"] = state.params
    report["private"] = client_states.private
    return report


def _manager(out: Path) -> ocp.CheckpointManager:
    """The checkpoints of run folder ``out``: one per round, the last two kept."""
    return ocp.CheckpointManager(out.resolve() / "checkpoints", options=ocp.
                                 CheckpointManagerOptions(max_to_keep=2, create=True))


def _quiet(line: str) -> None:
    """Drops a line (the members after the first repeat the first's setup lines)."""


def _personalize(c: TrainConfig, algorithm, state, client_states, train_data, test_data, root,
                 log) -> personalize.Personalization:
    """The Ap phase (Eq. 16): fine-tune with mu * LR for n_Z * z steps, evaluating every z."""
    lr = c.ap_lr_mult * c.lr
    emb_lr = None if c.embedding_lr is None else c.ap_lr_mult * c.embedding_lr
    run = personalize.make_personalize(
        algorithm, client_sgd(lr, c.momentum, emb_lr), batch_size=c.batch_size,
        num_evals=c.ap_evals, steps_per_eval=c.ap_steps)
    t0 = time.perf_counter()
    result = run(state, client_states, train_data, test_data,
                 jax.random.fold_in(root, streams.AP))
    mode = c.ap_mode or algorithm.default_mode
    log(f"Ap phase: {c.ap_evals} x {c.ap_steps} fine-tuning steps at lr {lr:g} in "
        f"{time.perf_counter() - t0:.1f} s; Ap ({mode}) {result.ap(mode):.4f}; "
        + ", ".join(f"{k}: {result.ap(k):.4f}" for k in sorted(result.curve)))
    return result


def _hms(seconds: float) -> str:
    seconds = int(math.ceil(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"
