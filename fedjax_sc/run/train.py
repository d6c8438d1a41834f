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

import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from fedjax_sc import streams
from fedjax_sc.algorithms import dp_sgd
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import communication, participation, personalize, sharding
from fedjax_sc.core.evaluate import (
    accuracy_list,
    make_evaluate,
    make_personal_evaluate,
    mean_accuracy,
)
from fedjax_sc.core.round import ClientStates, build_round
from fedjax_sc.data import scenes
from fedjax_sc.data.client_data import client_data, host_client_data
from fedjax_sc.run import rundir
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
from fedjax_sc.run.report import format_table, make_report
from fedjax_sc.run.setup import (  # noqa: F401 (re-exported: a run's states)
    CheckpointError,
    Setup,
    build_setup,
    global_params,
    load_run,
    restore_checkpoint,
    save_checkpoint,
)


class NonFiniteUpdateError(RuntimeError):
    """A client's local update produced NaN/inf; the round was not aggregated or saved."""


def _check_out_dir(out: Path, c: TrainConfig) -> None:
    """Checks ``out`` before any work; deletes nothing (an overwritten run is removed by
    :func:`rundir.remove_run` once the new inputs are checked)."""
    saved = out / "config.json"
    if c.overwrite:
        if rundir.run_files(out):
            rundir.check_replaceable(out)
        return
    if not saved.exists():
        if c.resume:
            raise FileNotFoundError(f"--resume: no run to resume in {out} (no config.json)")
        if rundir.run_files(out):
            raise FileExistsError(f"{out} holds part of a run ({', '.join(rundir.run_files(out))}"
                                  f") but no config.json; pass --overwrite to replace it, or "
                                  f"choose another --out")
        return
    if not c.resume:
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it, "
                              f"--overwrite to replace it, or choose another --out")
    diff = config_diff(json.loads(saved.read_text()), c)
    if diff:
        raise ValueError(f"--resume with a different configuration than {saved}: {diff}")


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
    c = config.resolved()
    out = Path(c.out)
    _check_out_dir(out, c)

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

    setup = build_setup(c, scene, log)
    algorithm, state, client_states = setup.algorithm, setup.state, setup.client_states
    root, train_key = setup.root, setup.train_key
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
    comm = None
    if central is None:
        comm = communication.account(algorithm, state, host_train).summary()
        log(communication.describe(comm))
    else:
        log(f"{c.algorithm} is trained centrally: no communication")

    vocab_json = scene.vocab.to_json()
    data_print = rundir.fingerprint(corpus_files(c), vocab_json)
    if c.resume:
        note = rundir.check_resume_data(out, data_print, vocab_json)
        if note:
            log(note)
    elif c.overwrite and rundir.run_files(out):  # the new inputs are all checked
        rundir.remove_run(out)
        log(f"--overwrite: removed the earlier run in {out}")
    out.mkdir(parents=True, exist_ok=True)
    ckpt = ocp.CheckpointManager(out.resolve() / "checkpoints",
                                 options=ocp.CheckpointManagerOptions(max_to_keep=2, create=True))
    start = 0
    if c.resume and ckpt.latest_step() is not None:
        start = int(ckpt.latest_step())
        if start > c.rounds:
            raise ValueError(f"--resume: the checkpoint is at round {start}, past --rounds "
                             f"{c.rounds}")
        state, client_states = restore_checkpoint(ckpt, start, state, client_states)
        log(f"resumed from {out / 'checkpoints'} at round {start}")
    metrics_path = out / "metrics.jsonl"
    history = rundir.read_metrics(metrics_path, start, log)
    metrics_path.write_text("".join(json.dumps(r) + "\n" for r in history))
    (out / "config.json").write_text(json.dumps(dataclasses.asdict(c), indent=2))
    (out / "vocab.json").write_text(vocab_json)
    (out / "fingerprint.json").write_text(json.dumps(data_print, indent=2))

    mesh = sharding.client_mesh()
    state = sharding.put_replicated(state, mesh)
    feed = participation.ClientFeed(round_host, client_states.private, mesh,
                                    c.clients_per_round, c.sampling, c.seed)
    if feed.partial or mesh.size > 1:
        log(f"{feed.num_sampled} of {feed.num_clients} clients per round "
            f"({c.sampling if feed.partial else 'all'}); client axis of {feed.round_size} "
            f"over {mesh.size} device(s)")

    def accuracies():
        ag = (None if global_eval is None else
              np.asarray(global_eval(global_params(setup, state.params), test_data)))
        personal = (None if personal_eval is None else
                    {k: np.asarray(v) for k, v in personal_eval(
                        (state.params, feed.private), test_data).items()})
        return ag, personal

    ag, personal = accuracies()
    if start < c.rounds:
        t0 = time.perf_counter()
        builder = build_round if central is None else central.build
        data, private = feed.inputs(feed.sample(start + 1))
        # the round replaces the server and client states: XLA may reuse their buffers
        round_step = jax.jit(builder(algorithm, batch_size=c.batch_size,
                                     local_epochs=c.local_epochs), donate_argnums=(0, 1)
                             ).lower(state, ClientStates(private), data, train_key).compile()
        log(f"round compiled in {time.perf_counter() - t0:.1f} s; algorithm {c.algorithm}, "
            f"batch {c.batch_size}, lr {c.lr}, {c.local_epochs} local epochs, d = {c.embed_dim}")
    durations = []
    for r in range(start + 1, c.rounds + 1):
        t0 = time.perf_counter()
        idx = feed.sample(r)
        data, private = feed.inputs(idx)
        new_state, new_client_states, m = round_step(state, ClientStates(private), data,
                                                     train_key)
        real = len(idx)
        m = jax.tree.map(lambda x: np.asarray(x)[:real], m)
        finite = m.finite
        if not finite.all():
            k = int(np.flatnonzero(~finite)[0])
            who = (names[idx[k]] if feed.num_clients == scene.num_clients
                   else "all clients pooled")
            raise NonFiniteUpdateError(
                f"round {r}: client {int(idx[k])} ({who}) produced a non-finite update (mean "
                f"local loss {float(m.train_loss[k])}); nothing was aggregated or saved. "
                f"Try a smaller --lr.")
        state = new_state
        feed.update(idx, new_client_states.private)
        jax.block_until_ready((state.params, feed.private))
        seconds = time.perf_counter() - t0
        durations.append(seconds)
        ag, personal = accuracies()
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
        with metrics_path.open("a") as f:
            f.write(json.dumps(row) + "\n")
        save_checkpoint(ckpt, r, state, ClientStates(feed.private))
        eta = (c.rounds - r) * float(np.mean(durations))
        shown = "n/a" if ag is None else f"{row['Ag']:.4f}"
        extra = "" if personal is None else f" | personal ({mode}) {row['personal'][mode]:.4f}"
        log(f"round {r:3d}/{c.rounds} | train loss {row['train_loss']:.4f} | Ag {shown}{extra} "
            f"| {seconds:6.1f} s | {row['client_steps_per_s']:6.1f} client-steps/s "
            f"| ETA {_hms(eta)}")
    client_states = ClientStates(feed.private)
    ckpt.wait_until_finished()
    ckpt.close()

    ap, ap_seconds = None, 0.0
    if c.ap:
        t0 = time.perf_counter()
        train_data = jax.tree.map(jnp.asarray, host_train)
        ap = _personalize(c, algorithm, state, client_states, train_data, test_data, root, log)
        ap_seconds = time.perf_counter() - t0
        with metrics_path.open("a") as f:
            for t in range(ap.curve[mode].shape[1]):
                f.write(json.dumps({
                    "phase": "ap", "round": c.rounds, "t": t, "steps": t * c.ap_steps,
                    "Ap_t": {k: mean_accuracy(v[:, t]) for k, v in ap.curve.items()},
                    "Ap_t_per_client": accuracy_list(ap.curve[mode][:, t])}) + "\n")
    if personal is None:  # no private leaves: the personalised model is the global one
        personal = {"full": ag}

    report = make_report(c, scene, ag, personal, ap, mode)
    report["communication"] = comm
    report["training"] = "federated" if central is None else central.name
    report["timing"] = {"round_seconds": durations, "ap_seconds": ap_seconds}
    if c.dp_clip is not None:
        report["dp"] = dp_report(c, scene)
        log(f"DP-SGD: {report['dp']['note']}")
    (out / "report.json").write_text(json.dumps(report, indent=2))
    table = format_table(report) + ("" if comm is None else
                                     "\n\n" + communication.describe(comm))
    (out / "report.md").write_text(table + "\n")
    log(table)
    report["params"] = state.params
    report["private"] = client_states.private
    return report


def dp_report(c: TrainConfig, scene: scenes.Scene) -> dict[str, Any]:
    """Each client's DP-SGD privacy after ``c.rounds`` rounds: noise multiplier z, sampling
    rate q = B / N^k, local steps and epsilon at ``c.dp_delta`` (RDP accountant of
    ``dp-accounting``; ``None`` when it is not installed, with the reason in ``note``)."""
    counts = np.asarray(scene.train.counts)
    steps = [c.rounds * c.local_epochs * math.ceil(int(n) / c.batch_size) for n in counts]
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
    if mode not in result.curve:
        raise ValueError(f"--ap-mode {mode!r}: {c.algorithm} has the modes "
                         f"{sorted(result.curve)}")
    log(f"Ap phase: {c.ap_evals} x {c.ap_steps} fine-tuning steps at lr {lr:g} in "
        f"{time.perf_counter() - t0:.1f} s; Ap ({mode}) {result.ap(mode):.4f}; "
        + ", ".join(f"{k}: {result.ap(k):.4f}" for k in sorted(result.curve)))
    return result


def _hms(seconds: float) -> str:
    seconds = int(math.ceil(seconds))
    h, rem = divmod(seconds, 3600)
    return f"{h}h{rem // 60:02d}m" if h else f"{rem // 60}m{rem % 60:02d}s"
