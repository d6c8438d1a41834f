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
(:class:`fedjax_sc.core.feed.PopulationFeed`: data and private leaves stay on the
host, sampled rows are gathered and scattered back); every round runs on a ``members x
clients`` mesh of all devices (:mod:`fedjax_sc.core.sharding`; ``1 x D`` for one run);
``server_opt`` adds a FedOpt server (:mod:`fedjax_sc.algorithms.fedopt`); ``lr_schedule``
scales the client LR round by round (traced, one program). Several processes
(:mod:`fedjax_sc.run.plumbing.processes`) train one run together: every process runs this
loop, process 0 writes the folder; each loads only its own clients where it can
(:mod:`fedjax_sc.run.loading`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.optimizers import round_schedule
from fedjax_sc.core import central as central_trainers
from fedjax_sc.core import communication, population, sharding
from fedjax_sc.core.evaluate import make_evaluate, make_personal_evaluate
from fedjax_sc.core.feed import CompiledRounds, PopulationFeed
from fedjax_sc.core.local import all_finite
from fedjax_sc.core.round import build_round
from fedjax_sc.data.client_data import client_data
from fedjax_sc.run import cross_device, folders, loading, members, rundir
from fedjax_sc.run.config import (  # noqa: F401 (re-exported: the run's configuration)
    DTYPES,
    EMBEDDINGS,
    SCENES,
    TrainConfig,
)
from fedjax_sc.run.config_file import (  # noqa: F401 (re-exported)
    config_diff,
    config_from_json,
)
from fedjax_sc.run.finish import finish, personalize_members
from fedjax_sc.run.loading import corpus_files, load_scene  # noqa: F401 (re-exported)
from fedjax_sc.run.plumbing import processes
from fedjax_sc.run.plumbing.tracking import Tracker, require
from fedjax_sc.run.registry import ALGORITHMS, build_algorithm  # noqa: F401
from fedjax_sc.run.report import round_row
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


class NonFiniteUpdateError(RuntimeError):
    """A client's local update produced NaN/inf; the round was not aggregated or saved."""


def train(config: TrainConfig, log: Callable[[str], None] = print,
          mesh: str | None = None) -> dict[str, Any]:
    """Runs federated training, then the Ap phase, as ``config`` says.

    Args:
      config: the run's configuration (``None`` fields resolved from the scene preset).
      log: where progress lines go.
      mesh: ``--mesh``, as :func:`train_population`'s (one run: ``1xD`` or None).

    Returns:
      The final report: ``{"rounds", "Ag" (None when not applicable), "Ap", "ap_mode",
      "clients": [{"client", "N", "M", "Ag", "personal", "Ap"}...], "params": final global
      params, "private": the clients' private leaves, "server_state" and "client_state": the
      algorithm's own final states (:class:`~fedjax_sc.algorithms.base.Hooks`; the clients'
      stacked ``[N, ...]``, ``()`` without one), ...}``.

    Raises:
      NonFiniteUpdateError: a client's update turned NaN/inf (names round and client).
      FileExistsError / FileNotFoundError / ValueError: output directory, data or config
        problems (all found before an overwritten run is deleted).
      CheckpointError: a checkpoint could not be written (names the round).
      OSError: the output folder cannot be written. MissingExtraError: a tracker not installed.
    """
    return train_population([config], log, mesh=mesh)[0]


def train_population(configs: Sequence[TrainConfig], log: Callable[[str], None] = print,
                     index: Path | None = None, grid: Sequence[str] = (),
                     mesh: str | None = None) -> list[dict[str, Any] | None]:
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
      mesh: ``"MxC"`` (``--mesh``): the devices of every process as a ``members x clients``
        mesh of M x C (:func:`fedjax_sc.core.sharding.population_mesh`; M divides P, M * C
        is the number of devices); None: chosen by :func:`~fedjax_sc.core.sharding.mesh_shape`
        (``1 x D``, the 1-D client mesh, for one member). The figures do not depend on it.

    Several processes (:mod:`fedjax_sc.run.plumbing.processes`): every process calls this with the
    same arguments; process 0 locks and writes the folders and logs, and a check that fails
    in any process before training stops every process.

    Returns:
      Every member's report (:func:`train`), None for a member that diverged.

    Raises:
      as :func:`train`; ValueError: members that differ in a setting that changes the
      program or the data (names it). RuntimeError: another process failed its checks.
    """
    log = processes.primary_log(log)
    checked = processes.Agreement("before training")
    try:
        cs = [config.resolved() for config in configs]
        members.check_members(cs)
        devices = sharding.population_mesh(len(cs), mesh)  # a bad --mesh: before anything
        require(cs)  # a tracking package that is missing is named before anything runs
        with contextlib.ExitStack() as locks:  # one process per run folder
            for m in cs:
                locks.enter_context(rundir.locked(Path(m.out)))
            reports = _train_locked(cs, log, index, grid, checked, devices)
    except Exception as e:
        checked.failed(e)  # the other processes stop too, if it is before training
        raise
    processes.barrier("run folders written")  # e.g. reproduce reads the reports next
    return reports


class _Prepared(NamedTuple):
    """What :func:`_prepare` built for the members, before any file changed."""

    scene: Any  # pooled into one client where the algorithm trains centrally
    client_names: tuple[str, ...]  # the scene's own clients
    files: list[Path]
    setups: list[Setup]
    hparams: dict[str, Any]
    build: Callable
    state: Any  # the members' stacked server states
    client_states: Any
    keys: jax.Array
    host_train: Any  # the clients' training data on the host
    round_host: Any  # what the round trains on (the centralised trainer's data where it has one)
    test_data: Any
    global_eval: Callable | None
    personal_eval: Callable | None
    mode: str  # the Ap phase's mode
    comm: Any  # the communication figures (None for a centralised trainer)


def _train_locked(cs: list[TrainConfig], log: Callable[[str], None], index: Path | None,
                  grid: Sequence[str], checked: processes.Agreement, mesh: jax.sharding.Mesh
                  ) -> list[dict[str, Any] | None]:
    """:func:`train_population` once the members' folders are locked; ``checked`` is reached
    once every check passed, before any file is changed; ``mesh`` is the population's.
    Two stages: :func:`_prepare` (scene, states, every check), :func:`_train_rounds` (resume
    or start afresh, the rounds, then each member's finish)."""
    for m in cs:
        rundir.check_out_dir(Path(m.out), m)
    return _train_rounds(cs, _prepare(cs, log, checked, mesh), checked, log, index, grid, mesh)


def _prepare(cs: list[TrainConfig], log: Callable[[str], None], checked: processes.Agreement,
             mesh: jax.sharding.Mesh) -> _Prepared:
    """The scene, the members' setups and round-0 states, the evaluations and the
    communication figures; every check of the settings that needs them (nothing written)."""
    c = cs[0]
    scene, files = loading.load(c, mesh, checked, log)  # a share with several processes
    names = tuple(scene.client_names)
    setups = [build_setup(m, scene, log if i == 0 else _quiet) for i, m in enumerate(cs)]
    algorithm = setups[0].algorithm  # the members' shared structure: evaluation, Ap modes
    if any(s.work != setups[0].work for s in setups):  # FedNova's a_k reads momentum, lr
        raise ValueError("--aggregation fednova: members of one population must share "
                         "momentum (and lr with fedprox): FedNova's normaliser is static")
    hparams = members.hparams(cs)
    build = population_builder(c, scene, members.TRACED)
    state, client_states = population.init_from_params(
        build, population.stack([global_params(s, s.state.params) for s in setups]), hparams,
        scene.num_clients, host=True)  # the feed places them on the devices or keeps them
    keys = jnp.stack([s.train_key for s in setups])
    if len(cs) > 1:
        log(f"population of {len(cs)} members in one program"
            + (f"; traced per member: {', '.join(hparams)}" if hparams else ""))
    # the Ap phase always fine-tunes per client; a centralised trainer says what it trains on
    central = algorithm.central
    if central is not None:  # pools every client's data
        scene = loading.whole(c, scene, log)
    host_train = loading.train_split(scene, c.local_vocab)
    round_host = (host_train if central is None
                  else central_trainers.data(central, scene.train, c.local_vocab))
    if c.clients_per_round is not None and central is not None:
        raise ValueError(f"{c.algorithm} is trained centrally: --clients-per-round does not "
                         f"apply")
    if c.clients_per_round is not None and c.clients_per_round > scene.num_clients:
        raise ValueError(f"--clients-per-round {c.clients_per_round} > {scene.num_clients} "
                         f"clients")
    if c.sampling == "size" and c.clients_per_round == scene.num_clients:
        raise ValueError(f"--sampling size with --clients-per-round {c.clients_per_round}, "
                         f"every client: each takes part, weighed by N^k; give M < N")
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
        comm = loading.communication_summary(algorithm, setups[0].state,
                                             setups[0].client_states, host_train, scene,
                                             checked)
        log(communication.describe(comm))
    else:
        log(f"{c.algorithm} is trained centrally: no communication")
    return _Prepared(scene, names, files, setups, hparams, build, state, client_states, keys,
                     host_train, round_host, client_data(scene.test), global_eval,
                     personal_eval, mode, comm)


def _train_rounds(cs: list[TrainConfig], p: _Prepared, checked: processes.Agreement,
                  log: Callable[[str], None], index: Path | None, grid: Sequence[str],
                  mesh: jax.sharding.Mesh) -> list[dict[str, Any] | None]:
    """The members' folders prepared (:func:`fedjax_sc.run.folders.prepare`: resumed or
    started afresh), rounds ``start + 1 .. rounds`` of the members (one compiled program),
    each round's metrics row, tracking and checkpoint; a member whose update is not finite
    stops; then each running member's finish (evaluation, Ap phase, report)."""
    c, size, scene, setups, names = cs[0], len(cs), p.scene, p.setups, p.client_names
    central = setups[0].algorithm.central
    trainer = (functools.partial(build_round, work=setups[0].work) if central is None
               else central_trainers.builder(central))
    if any(m.overwrite and rundir.run_files(Path(m.out)) for m in cs):
        # the new run's round traced (shapes only, nothing compiled) before an earlier run
        # is removed: an algorithm that fails to trace (a user's hook) leaves it in place
        own = p.client_states
        if scene.share:  # this process's clients, as its feed gives them to the round
            first, k = scene.share[0], p.round_host.num_clients
            own = jax.tree.map(lambda x: x[:, first:first + k], own)
        jax.eval_shape(population.build_population_round(
            p.build, batch_size=c.batch_size, local_epochs=c.local_epochs, trainer=trainer),
            p.state, own, p.round_host, p.keys, p.hparams)
    start, state, client_states = folders.prepare(cs, p.scene, p.files, p.state,
                                                  p.client_states, checked, log)
    say = ([log] if size == 1 else
           [lambda line, name=Path(m.out).name: log(f"[{name}] {line}") for m in cs])
    metrics_paths = [Path(m.out) / "metrics.jsonl" for m in cs]
    ckpts = [folders.manager(Path(m.out)) for m in cs]
    status = ["running"] * size
    trackers = [Tracker(m, index) for m in cs]  # W&B: a population's members are grouped
    if index is not None:
        members.write_index(index, cs, status, grid)

    state = sharding.put_members(state, mesh, clients=False)
    # the feed keeps every client's states (private leaves and the algorithm's own state)
    feed = PopulationFeed(p.round_host, client_states, mesh, [m.seed for m in cs],
                          c.clients_per_round, c.sampling,
                          *((scene.num_clients, scene.share[0]) if scene.share else ()),
                          padding=cross_device.padding(scene, c.padding), own=True)
    del client_states  # the feed's now: restored ones are written in place, not copied
    rows = int(dict(mesh.shape)[sharding.MEMBERS])
    if feed.partial or mesh.size > 1:
        log(f"{feed.num_sampled} of {feed.num_clients} clients per round "
            f"({c.sampling if feed.partial else 'all'}); client axis of {feed.round_size} "
            f"over {feed.devices} device(s)" + (f", {size} members over {rows} rows of a "
                                                f"{rows} x {feed.devices} mesh" if size > 1
                                                else "")
            + (f" in {jax.process_count()} processes" if processes.several() else ""))

    def accuracies(i):  # this process's clients on its default device, then gathered
        params = sharding.local(population.member(state.params, i))
        private = (None if p.personal_eval is None
                   else sharding.local(feed.member_private(i).private))
        return loading.accuracies(scene, p.global_eval, p.personal_eval,
                                  global_params(setups[i], params), params, private,
                                  p.test_data, feed.round_size if feed.partial else None)

    results = [accuracies(i) for i in range(size)]
    xdev = cross_device.Figures(scene, p.global_eval)  # {} unless a cross-device scene
    member_global = lambda i: global_params(setups[i], sharding.local(  # noqa: E731
        population.member(state.params, i)))
    if start < c.rounds:
        t0 = time.perf_counter()
        step = population.build_population_round(
            p.build, batch_size=c.batch_size, local_epochs=c.local_epochs, trainer=trainer,
            per_member_data=feed.partial, member_shards=rows)

        server_metrics = setups[0].algorithm.hooks.server_metrics

        def placed(states, private, data, keys, values):  # outputs placed as the inputs
            states, private, metrics = step(states, private, data, keys, values)
            # each member's server state after the aggregate and the server optimizer: the
            # clients' checks (metrics.finite) do not see a server step that diverges
            server_finite = jax.vmap(all_finite)(states)
            figures = jax.vmap(server_metrics)(states.algorithm) if server_metrics else {}
            return (jax.lax.with_sharding_constraint(
                        states, sharding.member_sharding(mesh, clients=False)),
                    jax.lax.with_sharding_constraint(
                        private, sharding.member_sharding(mesh, clients=True)), metrics,
                    server_finite, figures)

        data, private = feed.inputs(feed.sample(start + 1))
        # the round replaces the server and client states: XLA may reuse their buffers
        round_step = CompiledRounds(jax.jit(placed, donate_argnums=(0, 1)))
        round_step.compile(state, private, data, p.keys, p.hparams)  # one per padded shape
        log(f"round compiled in {time.perf_counter() - t0:.1f} s; algorithm {c.algorithm}, "
            f"batch {c.batch_size}, lr {c.lr}, {c.local_epochs} local epochs, d = {c.embed_dim}")
    durations = []
    lr_at = None if c.lr_schedule == "constant" else round_schedule(c.lr_schedule, c.rounds)
    for r in range(start + 1, c.rounds + 1):
        t0 = time.perf_counter()
        idxs = feed.sample(r)
        data, private = feed.inputs(idxs)
        values = p.hparams if lr_at is None else {  # the scheduled lr of round r, traced
            **p.hparams, "lr": np.asarray([m.lr * lr_at(r) for m in cs], np.float32)}
        new_state, new_client_states, ms, server_finite, server_figures = round_step(
            state, private, data, p.keys, values)
        ms = sharding.local(ms)  # the metrics of every process's clients
        server_finite, server_figures = jax.tree.map(
            np.asarray, sharding.local((server_finite, server_figures)))
        for i, idx in enumerate(idxs):
            m = jax.tree.map(lambda x: np.asarray(x)[i, :len(idx)], ms)
            if status[i] == "running" and not m.finite.all():
                k = int(np.flatnonzero(~m.finite)[0])
                who = (names[idx[k]] if feed.num_clients == scene.num_clients
                       else "all clients pooled")
                error = (f"round {r}: client {int(idx[k])} ({who}) produced a non-finite update "
                         f"(mean local loss {float(m.train_loss[k])}); round {r} was not "
                         f"saved (the folder keeps the last checkpoint). Try a smaller --lr"
                         + (" or --server-lr (a global model whose scores overflow gives "
                            "every client a nan loss)." if cs[i].server_opt else "."))
            elif status[i] == "running" and not server_finite[i]:
                error = (f"round {r}: the server's update made the global model non-finite "
                         f"(the clients' updates were finite: the aggregate or the server "
                         f"optimizer's step diverged); round {r} was not saved (the folder "
                         f"keeps the last checkpoint). Try a smaller --server-lr or the "
                         f"algorithm's server settings.")
            else:
                continue
            if size == 1:
                raise NonFiniteUpdateError(error)
            say[i](f"{error} This member stops; the others go on.")
            status[i] = f"diverged at round {r}"
        feed.update(idxs, new_client_states, [s == "running" for s in status])
        if "running" not in status:
            raise NonFiniteUpdateError(f"round {r}: every member of the population diverged")
        state = new_state
        jax.block_until_ready((state.params, feed.private))
        seconds = time.perf_counter() - t0
        durations.append(seconds)
        for i, idx in enumerate(idxs):
            if status[i] != "running":
                continue
            m = jax.tree.map(lambda x: np.asarray(x)[i, :len(idx)], ms)
            results[i] = ag, personal = accuracies(i)
            row = round_row(r, m, ag, personal, p.mode, seconds, p.comm,
                            idx if feed.partial else None, setups[i].work.active)
            row.update(xdev(lambda: member_global(i), ag))
            if server_figures:
                row["server"] = {k: float(v[i]) for k, v in server_figures.items()}
            if feed.partial:
                row["padding_ratio"] = feed.padding_ratio
            if lr_at is not None:
                row["lr"] = cs[i].lr * lr_at(r)
            rundir.append_text(metrics_paths[i], json.dumps(row) + "\n")
            trackers[i].round(row, list(names))
            save_checkpoint(ckpts[i], r, population.member(state, i), feed.member_private(i))
            # the last rounds' pace: the first includes compiling, and the load changes
            eta = (c.rounds - r) * float(np.mean(durations[-5:]))
            shown = "n/a" if ag is None else f"{row['Ag']:.4f}"
            loss = ("n/a (no client trained)" if row["train_loss"] is None
                    else f"{row['train_loss']:.4f}")
            extra = ("" if personal is None else
                     f" | personal ({p.mode}) {row['personal'][p.mode]:.4f}")
            say[i](f"round {r:3d}/{c.rounds} | train loss {loss} | Ag {shown}"
                   f"{extra} | {seconds:6.1f} s | {row['client_steps_per_s']:6.1f} "
                   f"client-steps/s | ETA {_hms(eta)}")
        if index is not None and f"diverged at round {r}" in status:
            members.write_index(index, cs, status, grid)
    for ck in ckpts:
        ck.wait_until_finished()
        ck.close()

    running = [i for i in range(size) if status[i] == "running"]
    aps, ap_seconds = {}, 0.0
    if c.ap and running:  # every running member's Ap phase in one program
        found, ap_seconds = personalize_members(
            [cs[i] for i in running], p.build,
            {k: np.asarray(v)[running] for k, v in p.hparams.items()},
            [sharding.local(population.member(state, i)) for i in running],
            [sharding.local(feed.member_private(i)) for i in running],
            jax.tree.map(jnp.asarray, p.host_train), p.test_data,
            [setups[i].root for i in running], [say[i] for i in running], p.mode, scene)
        aps = dict(zip(running, found))
    reports: list[dict[str, Any] | None] = []
    for i, m in enumerate(cs):
        if status[i] != "running":
            reports.append(None)
            continue
        reports.append(finish(m, scene, setups[i], sharding.local(population.member(state, i)),
                              sharding.local(feed.member_private(i)), results[i],
                              aps.get(i), ap_seconds, p.test_data, p.comm, durations, say[i],
                              trackers[i], xdev(lambda: member_global(i), results[i][0])))
        status[i] = "finished"
    for tracker, report in zip(trackers, reports):
        tracker.close(report)  # the report's Ag and Ap: the W&B run's summary
    if index is not None:
        members.write_index(index, cs, status, grid)
    return reports


def _quiet(line: str) -> None:
    """Drops a line (the members after the first repeat the first's setup lines)."""


def _hms(seconds: float) -> str:
    seconds = int(math.ceil(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"
