"""A run's data when it spans several processes: each process loads only the clients of its
own devices, and the vocabulary, the padded shapes and every figure stay those of one process.

When every client takes part in every round (no ``--clients-per-round``) and the run has
several processes, the client axis is split in contiguous blocks over the mesh's ``clients``
axis (:func:`fedjax_sc.core.sharding.client_block`), and process p reads only the clients of
its blocks (its *share*, :attr:`fedjax_sc.data.scenes.Scene.share`): the ``fdu`` scene opens
only its domains' files; ``table`` with ``--client-column`` reads the file and keeps only its
clients' rows. Each process counts its clients' training words; the counts, the largest
client of each split and (fdu) the digests of its files are exchanged
(:func:`fedjax_sc.run.plumbing.processes.allgather_json`), so every process builds the
vocabulary and the padded shapes of the whole scene, byte for byte those of one process, and the run
folder's fingerprint is the same. The evaluation (Ag, personalised accuracy) and the Ap phase
run in each process on its share, and the per-client results are gathered
(:func:`gather_clients`).

Every process loads every client, as with one process, with ``--clients-per-round`` (the
sampled clients change every round), for ``synthetic``, ``iyy``, a partition other than
``natural`` (the clients pool every domain), ``table`` without a client column, a centrally
trained baseline (FS, ASP), when a process's devices hold a whole member row (a population
with a member axis over the processes) or when some process's devices would hold padding
clients only.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np

from fedjax_sc.algorithms import context
from fedjax_sc.core import communication, participation, sharding
from fedjax_sc.data import partition, scenes, synthetic
from fedjax_sc.data.client_data import ClientData, host_client_data
from fedjax_sc.data.corpus import FDU_DOMAINS, read_fdu, read_iyy
from fedjax_sc.data.vocab import PAD, Vocabulary, count_tokens, merge_counts
from fedjax_sc.run import cross_device, rundir, table_scene
from fedjax_sc.run.config import NUM_CLASSES, TrainConfig
from fedjax_sc.run.plumbing import processes


def load_scene(c: TrainConfig) -> scenes.Scene:
    """The scene a resolved config names: its domains' corpora, re-partitioned into
    ``c.num_clients`` clients unless ``c.partition`` is ``natural``, then ``build_scene``
    (the table scene: :func:`fedjax_sc.run.table_scene.load`, C from its data; the synthetic
    scene with ``c.synthetic_zipf``: training sizes of
    :func:`fedjax_sc.data.partition.zipf_sizes`, seeded by ``c.partition_seed``, clipped to
    ``c.synthetic_train``; every client ``c.synthetic_test`` test rows, so it is no
    cross-device scene, :func:`fedjax_sc.run.cross_device.applies`)."""
    if c.scene == "table":
        got = table_scene.load(c)
        name = "table" if c.partition == "natural" else f"table-{c.partition}"
        return scenes.build_scene(name, got.corpora, num_classes=len(got.label_names),
                                  max_len=c.max_len, vocab_size=c.vocab_size,
                                  allow_empty=c.allow_empty_clients,
                                  label_names=got.label_names,
                                  allow_no_test=c.client_column is not None, unseen=got.unseen,
                                  notes=table_scene.notes(got))
    if c.scene == "fdu":
        corpora = read_fdu(c.data_dir, domains=c.domains or FDU_DOMAINS,
                           dev_holdout=c.dev_holdout)
    elif c.scene == "iyy":
        corpora = read_iyy(c.data_dir, dev_holdout=c.dev_holdout)
    else:  # --synthetic-zipf: Zipf sizes clipped to --synthetic-train, each --synthetic-test
        sizes = None if c.synthetic_zipf is None else partition.zipf_sizes(
            c.synthetic_clients, c.synthetic_zipf, seed=c.partition_seed,
            largest=c.synthetic_train).tolist()
        corpora = synthetic.synthetic_corpora(num_clients=c.synthetic_clients,
                                              train_per_client=c.synthetic_train,
                                              test_per_client=c.synthetic_test,
                                              max_len=c.max_len, seed=c.partition_seed,
                                              train_sizes=sizes)
    num_classes = NUM_CLASSES[c.scene]
    name = c.scene
    if c.partition != "natural":
        corpora = partition.partition_clients(
            corpora, c.partition, c.num_clients, num_classes, alpha=c.alpha, beta=c.beta,
            seed=c.partition_seed, min_partition_size=c.min_partition_size,
            self_balancing=c.self_balancing)
        name = f"{c.scene}-{c.partition}"
    return scenes.build_scene(name, corpora, num_classes=num_classes, max_len=c.max_len,
                              vocab_size=c.vocab_size, allow_empty=c.allow_empty_clients)


def corpus_files(c: TrainConfig) -> list[Path]:
    """The files a resolved config's scene reads (none for the synthetic scene)."""
    from fedjax_sc.data.corpus import IYY_FILES
    if c.scene == "fdu":
        return [Path(c.data_dir) / f"{d}.task.{s}" for d in c.domains or FDU_DOMAINS
                for s in ("train", "test")]
    if c.scene == "iyy":
        return [Path(c.data_dir) / name for pair in IYY_FILES.values() for name in pair]
    return table_scene.files(c) if c.scene == "table" else []


def load(c: TrainConfig, mesh: jax.sharding.Mesh, checked: processes.Agreement,
         log: Callable[[str], None] = print) -> tuple[scenes.Scene, dict | None]:
    """The scene of resolved config ``c``: this process's share when the run may load one
    (the module docstring), else the whole scene; logs what it loaded.

    Args:
      c: the run's resolved configuration.
      mesh: the run's ``members x clients`` mesh (:func:`~fedjax_sc.core.sharding.
        population_mesh`).
      checked: the run's agreement; a share's exchanges start with
        :meth:`~fedjax_sc.run.plumbing.processes.Agreement.step`, so that a process that
        failed before stops every process.
      log: where the scene's lines go.

    Returns:
      ``(scene, files)``: ``files`` the digests of every corpus file (name -> size and
      SHA-256) gathered from the processes that read them, or None (compute them here).

    Raises:
      FileNotFoundError, ValueError: as :func:`load_scene`.
      RuntimeError: another process failed to load its share (names it and its error).
    """
    t0 = time.perf_counter()
    scene, files, note = _load(c, mesh, checked)
    counts = scene.counts("train"), scene.counts("test")
    log(f"scene {scene.name}: {scene.num_clients} clients, V = {len(scene.vocab)}, "
        f"L = {scene.max_len}, N = {int(counts[0].sum())} train / {int(counts[1].sum())} test "
        f"reviews ({time.perf_counter() - t0:.1f} s)")
    if scene.label_names is not None:  # the classes the data's labels made
        names = ", ".join(map(str, scene.label_names[:8]))
        log(f"{scene.num_classes} classes: {names}{', ...' if scene.num_classes > 8 else ''}")
    for line in (*scene.notes, *([note] if note else [])):
        log(line)
    latin1 = {st["client"]: st["n_latin1_lines"] for st in scene.stats if st["n_latin1_lines"]}
    if latin1:
        log("lines not valid UTF-8, decoded as latin-1: "
            + ", ".join(f"{k} {v:,}" for k, v in latin1.items()))
    if cross_device.applies(scene):
        unseen = 0 if scene.unseen is None else scene.unseen.max_examples
        log(f"cross-device: {int(np.sum(counts[1] == 0)):,} of {scene.num_clients:,} clients "
            f"without test rows (they train; no Ag^k); {unseen:,} test rows of clients "
            f"without training rows (Ag_unseen)")
        counts = counts[0], np.where(counts[1] == 0, 1, counts[1])  # not listed below
    empty = [f"{n} ({'no training' if not counts[0][k] else 'no test'} examples)"
             for k, n in enumerate(scene.client_names) if not counts[0][k] or not counts[1][k]]
    if empty:
        log("kept by --allow-empty-clients: " + ", ".join(empty))
    return scene, files


def whole(c: TrainConfig, scene: scenes.Scene, log: Callable[[str], None]) -> scenes.Scene:
    """``scene`` if it holds every client, else the whole scene loaded again (a centrally
    trained baseline pools every client's data in every process)."""
    if scene.share is None:
        return scene
    log(f"{c.algorithm} is trained centrally: every process loads every client")
    return load_scene(c)


def _load(c: TrainConfig, mesh, checked) -> tuple[scenes.Scene, dict | None, str | None]:
    if not processes.several():
        return load_scene(c), None, None
    everyone = "every process loads every client"
    if c.clients_per_round is not None:
        return load_scene(c), None, (f"{everyone}: --clients-per-round samples other clients "
                                     f"every round")
    fdu = c.scene == "fdu" and c.partition == "natural"
    if not fdu and not (c.scene == "table" and c.client_column is not None):
        return load_scene(c), None, (f"{everyone} (--scene {c.scene}, --partition "
                                     f"{c.partition}: only fdu and table with --client-column, "
                                     f"natural partition, load a share)")
    names = label_names = corpora = unseen = None
    notes: tuple[str, ...] = ()
    if fdu:
        names = tuple(c.domains or FDU_DOMAINS)
    else:
        got = table_scene.load(c)
        corpora, label_names, unseen, notes = (got.corpora, got.label_names, got.unseen,
                                               table_scene.notes(got))
        names = tuple(corpora)
    spans = _spans(mesh, len(names))
    if spans is None:
        scene = (load_scene(c) if corpora is None else scenes.build_scene(
            "table", corpora, num_classes=len(label_names), max_len=c.max_len,
            vocab_size=c.vocab_size, allow_empty=c.allow_empty_clients,
            label_names=label_names, allow_no_test=True, unseen=unseen, notes=notes))
        return scene, None, (f"{everyone}: its devices hold every client, or some process's "
                             f"devices hold padding clients only")
    first, stop = spans[jax.process_index()]
    checked.step()  # a process that failed before this point stops every process here
    error, local, files = None, None, {}
    try:
        if fdu:
            local = read_fdu(c.data_dir, domains=names[first:stop], dev_holdout=c.dev_holdout)
            files = {p.name: rundir.file_digest(p) for p in corpus_files(
                dataclasses.replace(c, domains=names[first:stop]))}
        else:
            local = {n: corpora[n] for n in names[first:stop]}
        num_classes = 2 if fdu else len(label_names)
        splits = scenes.check_corpora(local, num_classes, c.max_len, c.allow_empty_clients,
                                      allow_no_test=not fdu)
        owned = [n for k, n in enumerate(names[first:stop], first)
                 if not any(lo <= k < hi for lo, hi in spans[:jax.process_index()])]
        mine = {"counts": merge_counts([count_tokens(local[n]["train"].texts) for n in owned]),
                "largest": {s: max(len(local[n][s]) for n in local) for s in splits},
                "total": {s: sum(len(local[n][s]) for n in owned) for s in splits}}
    except Exception as e:
        error, mine = e, {"error": processes.describe(e) or type(e).__name__}
    got = processes.allgather_json(mine)
    if error is not None:
        raise error
    for k, g in enumerate(got):
        if "error" in g:
            raise RuntimeError(f"process {k} of {len(got)} stopped before training: "
                               f"{g['error']}")
    for s in ("train", "test"):
        if not sum(g["total"][s] for g in got) and not (s == "test" and unseen):
            raise ValueError(f"no client has any {s} example")
    vocab = Vocabulary.from_counts(merge_counts([collections.Counter(g["counts"]) for g in got]),
                                   max_size=c.vocab_size)
    largest = {s: max(g["largest"][s] for g in got) for s in splits}
    arrays = scenes.encode_splits(local, splits, vocab, c.max_len, largest)
    stats = scenes.client_stats(local, splits, arrays["train"], c.max_len, num_classes)
    every = [None] * len(names)
    gathered = {}
    for g in processes.allgather_json({"first": first, "stats": stats, "files": files}):
        every[g["first"]:g["first"] + len(g["stats"])] = g["stats"]
        gathered.update(g["files"])
    scene = scenes.Scene(
        name=c.scene, client_names=names, train=arrays["train"], test=arrays["test"],
        dev=arrays.get("dev"), vocab=vocab, num_classes=num_classes, max_len=c.max_len,
        stats=tuple(every), label_names=None if label_names is None else tuple(label_names),
        share=(first, stop), allow_no_test=not fdu, notes=notes,
        unseen=None if not unseen else scenes.ClientArrays.stack(
            [vocab.encode(unseen.texts, c.max_len)], [unseen.labels], c.max_len))
    note = (f"each process loads only the clients of its devices (process 0: clients "
            f"{spans[0][0]}..{spans[0][1] - 1} of {len(names)})")
    return scene, ({k: gathered[k] for k in sorted(gathered)} if fdu else None), note


def _spans(mesh, n: int) -> list[tuple[int, int]] | None:
    """Each process's real clients ``(first, stop)`` of ``n`` on ``mesh``; None when every
    process holds them all or some process would hold none."""
    c = sharding.client_devices(mesh)
    rows = -(-n // c) * c
    spans = [(lo, min(hi, n)) for lo, hi in (sharding.client_block(mesh, rows, p)
                                             for p in range(jax.process_count()))]
    if any(lo >= hi for lo, hi in spans) or all(s == (0, n) for s in spans):
        return None
    return spans


def fingerprint(c: TrainConfig, files: dict | None, vocab_json: str) -> dict[str, Any]:
    """:func:`fedjax_sc.run.rundir.fingerprint` of the run, from the gathered digests
    ``files`` of :func:`load` when given (the same record as one process writes); with a
    user's algorithm (``--algorithm FILE.py:F`` or ``module:F``) also its source file
    (``"algorithm": {"file", "bytes", "sha256"}``), which ``--resume`` tells of when it
    changed."""
    if files is None:
        record = rundir.fingerprint(corpus_files(c), vocab_json)
    else:
        record = {"files": files, **{k: v for k, v in
                                     rundir.fingerprint([], vocab_json).items() if k != "files"}}
    if context.is_spec(c.algorithm):
        source = context.source_file(context.load(c.algorithm))
        if source is not None:
            record["algorithm"] = {"file": str(source), **rundir.file_digest(source)}
    return record


def train_split(scene: scenes.Scene, local_vocab: bool) -> ClientData:
    """The scene's training split as host arrays (:func:`~fedjax_sc.data.client_data.
    host_client_data`); a share's local vocabularies padded to the whole scene's width
    (``max_k |V^k| + 2``), so that every shape is the whole scene's."""
    data = host_client_data(scene.train, local_vocab=local_vocab)
    if scene.share is None or data.vocab_ids is None:
        return data
    width = max(st["local_vocab_size"] for st in scene.stats) + 2
    extra = width - data.vocab_ids.shape[1]
    return data._replace(vocab_ids=np.pad(data.vocab_ids, ((0, 0), (0, extra)),
                                          constant_values=PAD),
                         vocab_mask=np.pad(data.vocab_mask, ((0, 0), (0, extra))))


def gather_clients(tree: Any, scene: scenes.Scene) -> Any:
    """Per-client results of a share (leaves ``[stop - first, ...]``, NumPy or JAX) as the
    whole scene's (NumPy ``[K, ...]``, same dtypes), gathered from every process (a
    collective with a share: every process must call it); ``tree`` itself without one."""
    if scene.share is None:
        return tree
    leaves, treedef = jax.tree.flatten(tree)
    leaves = [np.asarray(x) for x in leaves]
    got = processes.allgather_json({"first": scene.share[0],
                                    "leaves": [x.tolist() for x in leaves]})
    out = []
    for j, x in enumerate(leaves):
        merged = np.zeros((scene.num_clients,) + x.shape[1:], x.dtype)
        for g in got:
            rows = np.asarray(g["leaves"][j], x.dtype).reshape((-1,) + x.shape[1:])
            merged[g["first"]:g["first"] + len(rows)] = rows
        out.append(merged)
    return jax.tree.unflatten(treedef, out)


def rows(tree: Any, scene: scenes.Scene) -> Any:
    """The share's rows of every leaf of ``tree`` (leading client axis ``[K, ...]``)."""
    if scene.share is None:
        return tree
    first, stop = scene.share
    return jax.tree.map(lambda x: x[first:stop], tree)


def communication_summary(algorithm, state, client_states, train: ClientData,
                          scene: scenes.Scene, checked: processes.Agreement) -> dict[str, Any]:
    """:meth:`~fedjax_sc.core.communication.Communication.summary` of every client, from each
    process's share (:func:`gather_clients`, after :meth:`~fedjax_sc.run.plumbing.processes.
    Agreement.step`)."""
    figures = communication.account(algorithm, state, train, client_states=client_states)
    if scene.share is not None:
        checked.step()
        figures = communication.Communication(*gather_clients(tuple(figures), scene))
    return figures.summary()


def accuracies(scene: scenes.Scene, global_eval, personal_eval, global_params, params,
               private, test: ClientData, block: int | None = None) -> tuple[Any, Any]:
    """Ag^k (``global_eval(global_params, test)``; None without) and the personalised
    accuracies (``personal_eval((params, private rows), test)``; None without) of every
    client, float32 ``[K]`` (a dict of them per mode), from this process's share.
    ``block``: :func:`by_blocks`."""
    ag = None if global_eval is None else np.asarray(global_eval(global_params, test))
    personal = (None if personal_eval is None else
                by_blocks(personal_eval, params, rows(private, scene), test, block))
    return gather_clients((ag, personal), scene)


def by_blocks(evaluate: Callable, params: Any, private: Any, test: ClientData,
              block: int | None) -> Any:
    """``evaluate((params, private), test)`` of every client, as NumPy with the client axis
    first. ``block``: where the private leaves are host arrays of all N clients (partial
    participation), ``block`` clients at a time
    (:func:`fedjax_sc.core.participation.by_blocks`), so that the device holds a round's
    worth of them, not N; None: all at once."""
    k = int(test.tokens.shape[0])
    if block is None or block >= k:
        return jax.tree.map(np.asarray, evaluate((params, private), test))
    return participation.by_blocks(lambda lo, mine, data: evaluate((params, mine), data), k,
                                   block, (private, test), (0, 0))
