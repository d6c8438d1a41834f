"""A run's algorithm and states: built from its configuration, saved to and restored from its
checkpoints (shared by the training loop, ``fedjax-sc compare`` and ``fedjax-sc probe``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np
import orbax.checkpoint as ocp

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.core.round import ClientStates, ServerState, init_states
from fedjax_sc.core.sharding import to_host
from fedjax_sc.data import scenes
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run import registry, rundir
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.config_file import config_from_json
from fedjax_sc.run.loading import corpus_files, load_scene
from fedjax_sc.run.plumbing import processes
from fedjax_sc.run.plumbing.uploads import NO_COMPRESSION
from fedjax_sc.run.ranges import local_work
from fedjax_sc.run.registry import build_algorithm


class Setup(NamedTuple):
    """A run's algorithm and round-0 states, rebuilt from its resolved config."""

    algorithm: Algorithm
    state: ServerState
    client_states: ClientStates
    root: jax.Array
    train_key: jax.Array
    global_private: Any = None
    """The private leaves as the server's global model holds them: their round-0 values (the
    server never receives a private leaf), one unstacked copy; ``{}`` without private leaves.
    A global model that reads a private leaf (FedFusion with a private embedding) uses these,
    as a server model whose private layers are never aggregated does (see
    :func:`global_params`)."""
    work: LocalWork = LocalWork()
    """How the clients differ in local work, dropout and stragglers, and the aggregation
    (:func:`fedjax_sc.run.ranges.local_work`); inactive by default: the plain round."""


def global_params(setup: Setup, shared: Any) -> Any:
    """The global model's parameters: the server's ``shared`` leaves joined with the round-0
    values of the private leaves (:attr:`Setup.global_private`)."""
    if not jax.tree.leaves(setup.global_private):
        return shared
    return masking.merge(shared, setup.global_private)


def algorithm_options(c: TrainConfig, scene: scenes.Scene) -> dict[str, Any]:
    """The keywords of :func:`~fedjax_sc.run.registry.build_algorithm` that ``c`` sets: the
    scene's sizes, the upload and server settings, and every option of
    :data:`~fedjax_sc.run.registry.OPTIONS`, read from its ``TrainConfig`` field."""
    return dict(
        name=c.algorithm, vocab_size=len(scene.vocab), num_classes=scene.num_classes,
        embed_dim=c.embed_dim, num_clients=scene.num_clients, pca_band=c.pca_band,
        upload_noise=c.upload_noise, upload_compression=c.upload_compression,
        dp_clip=c.dp_clip, dp_noise=c.dp_noise, server_opt=c.server_opt,
        algorithm_options=c.algorithm_options,
        **{o: getattr(c, registry.config_field(o)) for o in registry.OPTIONS})


def population_builder(c: TrainConfig, scene: scenes.Scene,
                       traced: dict[str, str]) -> Callable[[dict[str, Any]], Algorithm]:
    """``build(values) -> Algorithm`` for the members of a population: ``c``'s algorithm with
    the settings named in ``values`` (config field names, keys of ``traced`` which maps them
    to :func:`~fedjax_sc.run.registry.build_algorithm` keywords, or the names of a user's
    algorithm's own options) replaced by the given, traced, values
    (:mod:`fedjax_sc.core.population`)."""
    options = algorithm_options(c, scene)

    def build(values: dict[str, Any]) -> Algorithm:
        own = {k: v for k, v in values.items() if k not in traced}  # the user's own options
        return build_algorithm(**{**options, **{traced[k]: v for k, v in values.items()
                                                if k in traced},
                                  "algorithm_options": {**c.algorithm_options, **own}})

    return build


def build_setup(c: TrainConfig, scene: scenes.Scene,
                log: Callable[[str], None] = print) -> Setup:
    """The algorithm ``c`` names for ``scene`` and its initial states (GloVe-initialised when
    ``c.embeddings`` says so); the same for a fresh run, a resumed one and ``fedjax-sc probe``.

    Raises:
      ValueError: settings a centrally trained baseline cannot take (local steps, client
        dropout, upload compression or noise); the algorithm's builder's refusals.
    """
    algorithm, work = build_algorithm(**algorithm_options(c, scene)), local_work(c)
    if algorithm.central is not None and work.active:
        raise ValueError(f"{c.algorithm} is trained centrally: --local-steps, --client-dropout, "
                         f"--straggler-fraction and --aggregation do not apply")
    if algorithm.central is not None and (
            c.dp_clip is not None or c.pca_band or c.upload_noise
            or c.upload_compression != NO_COMPRESSION):
        raise ValueError(f"{c.algorithm} is trained centrally: upload compression, upload "
                         f"noise and DP-SGD do not apply")
    matrix = None
    if c.embeddings != "random":
        from fedjax_sc.data.embeddings import glove_6b_50d, word_vectors
        emb = (glove_6b_50d(scene.vocab, seed=c.seed) if c.embeddings == "glove-6b-50d" else
               word_vectors(c.embeddings, scene.vocab, seed=c.seed))
        matrix = emb.matrix
        name = "GloVe 6B 50d" if c.embeddings == "glove-6b-50d" else c.embeddings
        log(f"{name}: {emb.num_found} of {len(scene.vocab) - 2} words found "
            f"(coverage {emb.coverage:.1%}, d = {matrix.shape[1]}); the rest get small "
            f"random vectors")
        for note in emb.notes:
            log(f"{name}: {note}")
    root = jax.random.key(c.seed)
    init_key, train_key = jax.random.split(root)
    # the clients' states as host views of one client's: a template (the run's feed places
    # them, a checkpoint restores into them), never N copies on a device
    state, client_states = init_states(algorithm, init_params(algorithm.model, init_key, matrix),
                                       scene.num_clients, host=True)
    global_private = jax.tree.map(lambda x: x[0], client_states.private)
    return Setup(algorithm, state, client_states, root, train_key, global_private, work)


CHUNK_BYTES = 64 << 20
"""The largest chunk a checkpoint stores an array in (64 MiB): orbax's default is one chunk per
array, which the writer compresses, and the reader decompresses, in a buffer as large as the
array (a run's ``[N, V, d]`` client states: twice their size while saving or restoring)."""


def checkpoint_manager(folder: Path, *, keep: int | None = None,
                       create: bool = False) -> ocp.CheckpointManager:
    """The orbax manager of a checkpoints folder (``keep``: how many rounds it keeps, all when
    None; ``create``: make the folder).

    Its handler is orbax's PyTree handler with host NumPy arrays written as they are: orbax's
    default copies each one first (a guard against a caller that changes it while an
    asynchronous save runs), which doubled the peak memory of a run whose client states live
    on the host (where the installed orbax has no such option, its default copy is kept).
    :func:`save_checkpoint` waits for the save before anything writes the states
    again. The files are the standard ones: a folder saved by ``StandardSave`` restores here
    and the other way round.
    """
    th = ocp.type_handlers
    try:
        numpy_handler = th.NumpyHandler(deepcopy_host_arrays=False)
    except TypeError:  # an orbax without the option (older releases): its default, the copy
        numpy_handler = th.NumpyHandler()
    handlers = th.create_type_handler_registry(  # orbax's own, but for NumPy arrays
        *[(t, th.get_type_handler(t)) for t in (int, float, bytes, np.number, jax.Array, str)],
        (np.ndarray, numpy_handler))
    return ocp.CheckpointManager(
        folder, options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=create),
        item_handlers=ocp.PyTreeCheckpointHandler(type_handler_registry=handlers))


def restore_checkpoint(ckpt: ocp.CheckpointManager, step: int, state: ServerState,
                       client_states: ClientStates) -> tuple[ServerState, ClientStates]:
    """The states saved at round ``step``, restored into the structure of the given ones and
    verified against the SHA-256 recorded when they were saved (a checkpoint written before
    digests existed is restored unverified).

    Raises:
      CheckpointError: the checkpoint cannot be read, or its content differs from what was
        saved (one line naming the round and the folder).
    """
    try:
        template = _checkpoint_tree(state, client_states)
        restored = ckpt.restore(step, args=ocp.args.PyTreeRestore(
            template, restore_args=ocp.checkpoint_utils.construct_restore_args(template)))
    except Exception as e:  # orbax / TensorStore raise many types for a damaged folder
        if processes.lost_contact(e):  # another process is gone: the folder is not at fault
            raise
        if isinstance(e, ValueError) and "structures do not match" in str(e):  # orbax's words
            raise CheckpointLayoutError(
                f"round {step} in {ckpt.directory} holds states of another structure than "
                f"this run's{_difference(ckpt, step, template)} (a run begun with another "
                f"version of the library or of its algorithm): nothing was moved; resume it "
                f"with the code it was begun with, or start afresh with --overwrite") from e
        raise CheckpointError(f"round {step} in {ckpt.directory} cannot be read "
                              f"({type(e).__name__}: {_first_line(e)})") from e
    expected = _digests(ckpt).get(str(step))
    if expected is not None and tree_digest(restored) != expected:
        raise CheckpointError(f"round {step} in {ckpt.directory} does not match the SHA-256 "
                              f"recorded when it was saved: its files were altered")
    # a state without leaves is not saved: keep the template's (empty) structure for it
    return (ServerState(restored["params"], restored["round"],
                        restored.get("opt_state", state.opt_state),
                        restored.get("upload_state", state.upload_state),
                        restored.get("server_algorithm", state.algorithm)),
            ClientStates(restored.get("private", client_states.private),
                         restored.get("client_algorithm", client_states.algorithm),
                         restored.get("client_upload", client_states.upload)))


def newest_verified(ckpt: ocp.CheckpointManager, state: ServerState,
                    client_states: ClientStates, log: Callable[[str], None] = print
                    ) -> tuple[int, tuple[ServerState, ClientStates]] | None:
    """The newest checkpoint that restores and verifies, and its states; None if none does.

    A checkpoint that fails is moved (never deleted) to ``corrupt-checkpoints/<round>`` beside
    the ``checkpoints`` folder (``<round>-2``, ``-3``... when that round was set aside before) (by process 0 of several), with a one-line warning naming it,
    and the next older one is tried. A checkpoint whose states have another structure than
    the run's is moved so only once an older one restores (then it was damaged); where none
    does, the run was begun by other code, and nothing is moved.

    Raises:
      CheckpointLayoutError: no checkpoint restores and some hold states of another
        structure than the run's (the newest such named; nothing moved).
    """
    def aside(step: int, e: CheckpointError) -> None:
        where = Path(ckpt.directory).parent / "corrupt-checkpoints" / str(step)
        copy = 1
        while where.exists():  # that round was set aside before (then trained again)
            copy += 1
            where = where.with_name(f"{step}-{copy}")
        if processes.primary():
            where.parent.mkdir(exist_ok=True)
            Path(ckpt.directory, str(step)).rename(where)
        processes.barrier(f"moved aside {where}")
        ckpt.reload()
        log(f"warning: {e}; moved it to {where} and trying the round before")

    other_layout: list[tuple[int, CheckpointLayoutError]] = []
    for step in sorted(ckpt.all_steps(), reverse=True):
        try:
            restored = restore_checkpoint(ckpt, step, state, client_states)
        except CheckpointLayoutError as e:
            other_layout.append((step, e))
            continue
        except CheckpointError as e:
            aside(step, e)
            continue
        for later, e in other_layout:  # newer than one that restores: damaged after all
            aside(later, e)
        return step, restored
    if other_layout:
        raise other_layout[0][1]
    return None


def tree_digest(tree: Any) -> str:
    """SHA-256 over every leaf of ``tree`` (its path, dtype, shape and bytes, in flattening
    order): what a checkpoint is verified against."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(to_host(tree))[0]:
        a = np.ascontiguousarray(leaf)
        h.update(f"{jax.tree_util.keystr(path)}|{a.dtype}|{a.shape}|".encode())
        h.update(a.reshape(-1).view(np.uint8))  # the bytes, not copied
    return h.hexdigest()


DIGESTS = "digests.json"
"""``checkpoints/digests.json``: round -> SHA-256 of the saved states (:func:`tree_digest`)."""


def _digests(ckpt: ocp.CheckpointManager) -> dict[str, str]:
    path = Path(ckpt.directory) / DIGESTS
    return rundir.read_json(path) if path.exists() else {}


def _difference(ckpt: ocp.CheckpointManager, step: int, template: Any) -> str:
    """``" (the checkpoint holds ['server']['v'] float32[8], which this run lacks)"``: the
    first leaf in which the saved tree and this run's differ, or "" where orbax's metadata
    cannot be read."""
    try:
        saved = ckpt.item_metadata(step).tree
    except Exception:  # noqa: BLE001 (the message goes on without it)
        return ""

    def leaves(tree, is_leaf=None) -> dict[str, str]:
        flat = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_leaf)[0]
        return {jax.tree_util.keystr(k): f"{np.dtype(v.dtype).name}{list(v.shape)}"
                for k, v in flat}

    was = leaves(saved, lambda x: hasattr(x, "shape") and not isinstance(x, dict))
    now = leaves(template)
    for key in sorted(set(was) | set(now)):
        if key not in now:
            return f" (the checkpoint holds {key} {was[key]}, which this run lacks)"
        if key not in was:
            return f" (this run has {key} {now[key]}, which the checkpoint lacks)"
        if was[key] != now[key]:
            return f" ({key} is {was[key]} in the checkpoint, {now[key]} in this run)"
    return ""


def _first_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [""])[0][:200]


def load_run(out: str | Path, at_round: int | None = None
             ) -> tuple[TrainConfig, ocp.CheckpointManager, int]:
    """The resolved config of the run in ``out``, its checkpoint manager and the round of the
    checkpoint to use: ``at_round`` (default: the last one saved).

    Raises:
      FileNotFoundError: ``out`` holds no config.json, no checkpoint, or none at
        ``at_round`` (the message lists the saved rounds).
      ValueError: a config.json that is not valid JSON (``file:line``) or whose settings
        are refused (:meth:`~fedjax_sc.run.config.TrainConfig.resolved`).
    """
    out = Path(out)
    saved = out / "config.json"
    if not saved.exists():
        raise FileNotFoundError(f"{saved} does not exist: not a fedjax-sc run directory")
    c = config_from_json(rundir.read_json(saved))
    folder = out.resolve() / "checkpoints"
    # no manager for a missing folder: orbax's would make an empty one, and reading writes nothing
    ckpt = checkpoint_manager(folder) if folder.is_dir() else None
    steps = sorted(int(s) for s in ckpt.all_steps()) if ckpt is not None else []
    if not steps:
        raise FileNotFoundError(f"{out / 'checkpoints'} holds no checkpoint")
    if at_round is not None and at_round not in steps:
        raise FileNotFoundError(f"{out / 'checkpoints'} holds no checkpoint of round "
                                f"{at_round}; saved rounds: {steps}")
    return c, ckpt, steps[-1] if at_round is None else at_round


class RestoredRun(NamedTuple):
    """A saved run, rebuilt (:func:`restore_run`)."""

    config: TrainConfig
    scene: scenes.Scene
    setup: Setup
    round: int
    state: ServerState
    client_states: ClientStates


def restore_run(out: str | Path, at_round: int | None = None) -> RestoredRun:
    """The run in ``out`` rebuilt from its config, its data (checked against the run's
    fingerprint) and its checkpoint of round ``at_round`` (default: the last one saved).

    Raises:
      FileNotFoundError: as :func:`load_run` and :func:`load_checked_scene`.
      ValueError: as :func:`load_run` and :func:`load_checked_scene`.
      CheckpointError: as :func:`restore_checkpoint`.
    """
    c, ckpt, step = load_run(out, at_round)
    scene = load_checked_scene(c, out)
    setup = build_setup(c, scene, log=lambda _: None)
    state, client_states = restore_checkpoint(ckpt, step, setup.state, setup.client_states)
    return RestoredRun(c, scene, setup, step, state, client_states)


def load_checked_scene(c: TrainConfig, out: str | Path) -> scenes.Scene:
    """The scene of the run in ``out`` (resolved config ``c``), loaded again from its data.

    Raises:
      ValueError: the corpus files or the vocabulary differ from what the run recorded in
        ``fingerprint.json`` (the message names each change); a run without one is loaded
        unchecked.
      FileNotFoundError: the corpus folder or one of its files is missing.
    """
    scene = load_scene(c)
    saved = Path(out) / "fingerprint.json"
    if saved.exists():
        now = rundir.fingerprint(corpus_files(c), scene.vocab.to_json())
        changes = rundir.fingerprint_changes(rundir.read_json(saved), now)
        if changes:
            raise ValueError(f"{out} was trained on other data than {c.data_dir or c.data} "
                             f"holds now: " + "; ".join(changes))
    return scene


def tested_files(out: str | Path) -> dict[str, Any]:
    """The test-split corpus files a run recorded in its ``fingerprint.json`` (name -> size and
    SHA-256; {} without one)."""
    saved = Path(out) / "fingerprint.json"
    files = rundir.read_json(saved).get("files", {}) if saved.exists() else {}
    return {k: v for k, v in files.items() if ".test" in k}


class CheckpointError(RuntimeError):
    """A round's checkpoint could not be written; the rounds before it are on disk."""


class CheckpointLayoutError(CheckpointError):
    """A checkpoint holds states of another tree structure than the run restoring it (begun
    with another version of the library or of its algorithm): not damage, so not moved."""


def save_checkpoint(ckpt: ocp.CheckpointManager, r: int, state: ServerState,
                    client_states: ClientStates) -> None:
    """Saves round ``r`` and waits until it is on disk, so that a failure is reported at the
    round it belongs to.

    Raises:
      CheckpointError: the save failed (one line: round, folder, cause).
    """
    tree = _checkpoint_tree(state, client_states)
    try:
        chunks = jax.tree.map(lambda _: ocp.SaveArgs(chunk_byte_size=CHUNK_BYTES), tree)
        ckpt.save(r, args=ocp.args.PyTreeSave(tree, save_args=chunks))
        ckpt.wait_until_finished()
        kept = {str(s) for s in ckpt.all_steps()}
        digests = {k: v for k, v in _digests(ckpt).items() if k in kept}
        digests[str(r)] = tree_digest(tree)  # every process: a collective
        rundir.write_text(Path(ckpt.directory) / DIGESTS, json.dumps(digests, indent=1))
    except Exception as e:  # orbax raises many types; all end the run the same way
        if processes.lost_contact(e):  # another process is gone: the folder is not at fault
            raise
        raise CheckpointError(
            f"round {r}: saving the checkpoint to {ckpt.directory} failed ({type(e).__name__}: "
            f"{_first_line(e)}); rounds up to {r - 1} are saved: free space or fix the "
            f"folder, then rerun with --resume") from e


def _checkpoint_tree(state: ServerState, client_states: ClientStates) -> dict[str, Any]:
    """What a checkpoint holds: server params, round and states, the private leaves, the
    algorithm's own server and client states and the clients' upload memories (a part without
    leaves is left out, so a run of a stateless algorithm saves what it always did)."""
    tree = {"params": state.params, "round": state.round}
    for name, value in (("opt_state", state.opt_state), ("upload_state", state.upload_state),
                        ("private", client_states.private),
                        ("server_algorithm", state.algorithm),
                        ("client_algorithm", client_states.algorithm),
                        ("client_upload", client_states.upload)):
        if jax.tree.leaves(value):
            tree[name] = value
    return tree
