"""The members of a population run: seeds and a hyperparameter grid expanded into run configs.

``fedjax-sc train --seeds 0,1,2 --grid lr=0.01,0.05 --out DIR`` trains the product of the
values (grid names varying slowest in the order given, then the seeds) as one population
(:mod:`fedjax_sc.core.population`): one compiled round for all members. Each member is a
complete run folder under ``DIR`` (its own config.json with its values, metrics.jsonl,
report.json, checkpoints) that ``results``, ``compare`` and ``--resume`` read as any run, and
``DIR/population.json`` lists the members: folder (relative to DIR), seed, values, status.

What may differ between members: the seed (initialisation, the random vectors of words
without a pretrained vector, batch order, client sampling, noise), the values of
:data:`TRACED` (passed to the algorithm's builder as traced scalars) and the Ap phase's mu
(``ap_lr_mult``, traced in the members' one Ap program). Everything else changes the program
or the data and must be equal; :func:`check_members` names the setting that is not. Members
that differ only in the Ap phase's mu train once (:func:`shared_training`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_sc.run import registry, rundir, summary
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.plumbing.flags import flag

TRACED = {**{registry.config_field(k): k for k, o in registry.OPTIONS.items() if o.traced},
          "upload_noise": "upload_noise", "dp_noise": "dp_noise"}
"""Config field -> keyword of :func:`fedjax_sc.run.registry.build_algorithm`: the settings a
population may vary as traced values (one program for every value): the options marked
``traced`` in :data:`fedjax_sc.run.registry.OPTIONS`, and the upload's and DP-SGD's noise."""

GRID_NAMES = (*TRACED, "ap_lr_mult")
"""The names ``--grid`` accepts (``ap_lr_mult`` is the Ap phase's mu)."""

PER_MEMBER = {*GRID_NAMES, "seed", "out"}
"""Fields in which members may differ."""

AP_ONLY = ("ap_lr_mult",)
"""The grid's settings that change only the Ap phase: members that differ in nothing else
train the same rounds (:func:`shared_training`)."""


def parse_grid(specs: Sequence[str] | None, own: bool = False) -> dict[str, list[float]]:
    """``["lr=0.01,0.05", "lambda_kt=0,0.01"]`` -> ``{"lr": [0.01, 0.05], "lambda_kt": [0.0,
    0.01]}`` (order kept).

    Args:
      specs: the ``--grid`` values.
      own: the run's algorithm is a user's (``FILE.py:FUNCTION``): a name outside
        :data:`GRID_NAMES` is one of its own options (``context.options``, traced).

    Raises:
      ValueError: a spec without ``=``, an unknown name (the message lists :data:`GRID_NAMES`),
        a name given twice, a value that is not a number, or a repeated value.
    """
    grid: dict[str, list[float]] = {}
    for spec in specs or ():
        name, sep, values = spec.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or not values.strip():
            raise ValueError(f"--grid {spec!r}: write NAME=V1,V2,... (e.g. lr=0.01,0.05)")
        if name not in GRID_NAMES and not (own and name.isidentifier()):
            raise ValueError(f"--grid {spec!r}: {name!r} cannot vary within a population; "
                             f"choose from {', '.join(GRID_NAMES)} (or, for an algorithm of "
                             f"one's own, FILE.py:FUNCTION, a name of its context.options)")
        if name in grid:
            raise ValueError(f"--grid {name} given twice")
        try:
            numbers = [float(v) for v in values.split(",")]
        except ValueError:
            raise ValueError(f"--grid {spec!r}: the values must be numbers") from None
        if len(set(numbers)) != len(numbers):
            raise ValueError(f"--grid {spec!r}: a value is repeated")
        grid[name] = numbers
    return grid


def parse_seeds(spec: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``.

    Raises:
      ValueError: not comma-separated integers, or a repeated seed.
    """
    try:
        seeds = [int(s) for s in spec.split(",")]
    except ValueError:
        raise ValueError(f"--seeds {spec!r}: write comma-separated integers, e.g. 0,1,2") \
            from None
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {spec!r}: a seed is repeated")
    return seeds


def refuse_set_twice(grid: Sequence[str], seeds: Sequence[int] | None,
                     explicit: set[str]) -> None:
    """Refuses a setting given both on its own and by the population: a grid name (a config
    field, or a user's algorithm's option) or ``seed`` with ``seeds``, where ``explicit``
    holds the names the caller set itself (the flags on the command line, ``fsc.train``'s
    keywords and ``algorithm_options`` keys). Each member takes the grid's value, so the
    other would be dropped without a word.

    Raises:
      ValueError: naming both, e.g. ``--lr and --grid lr=...: give one of them``.
    """
    for name in grid:
        if name in explicit:
            given = flag(name) if name in GRID_NAMES else f"--algorithm-option {name}"
            raise ValueError(f"{given} and --grid {name}=...: each member takes the grid's "
                             f"value; give one of them")
    if seeds is not None and "seed" in explicit:
        raise ValueError("--seed and --seeds: give one of them")


def folder_name(values: dict[str, float], seed: int) -> str:
    """A member's folder: ``lr-0.01_lambda_kt-0.001_seed-0`` (``seed-0`` without a grid)."""
    return "_".join([*(f"{k}-{v:g}" for k, v in values.items()), f"seed-{seed}"])


def value_of(c: TrainConfig, name: str) -> Any:
    """A member's value of a grid name: its config field, or its own algorithm's option."""
    return getattr(c, name) if name in GRID_NAMES else c.algorithm_options[name]


def expand(config: TrainConfig, seeds: Sequence[int] | None,
           grid: dict[str, list[float]]) -> list[TrainConfig]:
    """The members' configs: the product of the grid's values (the first name varying slowest)
    and the seeds (default: ``config.seed``), each with ``out = config.out/<folder_name>``; a
    name outside :data:`GRID_NAMES` sets the member's ``algorithm_options``.

    Raises:
      ValueError: a member's values fail validation (:meth:`TrainConfig.resolved`).
    """
    seeds = [config.seed] if not seeds else list(seeds)
    names = list(grid)
    members = []
    for combo in itertools.product(*(grid[k] for k in names)):
        values = dict(zip(names, combo))
        for seed in seeds:
            out = str(Path(config.out) / folder_name(values, seed))
            fields = {k: v for k, v in values.items() if k in GRID_NAMES}
            own = {**config.algorithm_options,
                   **{k: v for k, v in values.items() if k not in GRID_NAMES}}
            members.append(dataclasses.replace(config, **fields, algorithm_options=own,
                                               seed=seed, out=out))
    for m in members:
        m.resolved()
    return members


def check_members(configs: Sequence[TrainConfig]) -> None:
    """Raises ``ValueError`` naming the first setting, outside :data:`PER_MEMBER`, in which two
    members differ (it changes the program or the data), or two members sharing a folder.
    ``configs`` are resolved."""
    first = _shared_fields(configs[0])
    for c in configs[1:]:
        for name, value in _shared_fields(c).items():
            if name not in PER_MEMBER and value != first[name]:
                raise ValueError(f"members of one population must share {name} (it changes "
                                 f"the program or the data): {first[name]!r} vs {value!r}")
    outs = [str(Path(c.out).resolve()) for c in configs]
    if len(set(outs)) != len(outs):
        raise ValueError("two members of a population share an output folder")


def _shared_fields(c: TrainConfig) -> dict[str, Any]:
    """``c``'s fields as :func:`check_members` and :func:`groups` compare them: of its own
    algorithm's options only the names and the values that are not numbers (a number may
    differ: it is traced)."""
    fields = dataclasses.asdict(c)
    fields["algorithm_options"] = {k: None if isinstance(v, (int, float)) else v
                                   for k, v in c.algorithm_options.items()}
    return fields


def varied(configs: Sequence[TrainConfig]) -> list[str]:
    """The :data:`TRACED` fields and the own algorithm's options whose values differ between
    the members (traced in the round), and ``lr`` under an ``lr_schedule``; the others reach
    the builder as Python values."""
    scheduled = configs[0].lr_schedule != "constant"  # the round's lr changes every round
    own = [k for k in configs[0].algorithm_options
           if len({c.algorithm_options[k] for c in configs}) > 1]
    return [k for k in TRACED
            if len({getattr(c, k) for c in configs}) > 1 or (k == "lr" and scheduled)] + own


def hparams(configs: Sequence[TrainConfig]) -> dict[str, np.ndarray]:
    """The varied values as float32 ``[P]`` arrays (:func:`varied`)."""
    return {k: np.asarray([value_of(c, k) for c in configs], np.float32)
            for k in varied(configs)}


def check_root(root: Path) -> None:
    """Refuses a population's ``--out`` folder whose ``population.json`` or ``report.md`` a
    population did not write: the folder of a single run, or files of the user's there (the
    population writes those two files at its root, its members into subfolders).

    Raises:
      FileExistsError: naming the folder and the file; nothing is written.
    """
    index = root / "population.json"
    single = [n for n in ("config.json", "metrics.jsonl", "checkpoints") if (root / n).exists()]
    if single:
        raise FileExistsError(f"{root} holds a single run ({single[0]}); a population writes "
                              f"its members into subfolders and its own population.json and "
                              f"report.md: choose another --out")
    ours = False
    if index.is_file():
        try:
            ours = bool(read_index(index))
        except ValueError:
            ours = False
    for name in ("population.json", "report.md"):
        if (root / name).exists() and not ours:
            raise FileExistsError(f"{root / name} was not written by a population (no "
                                  f"population.json of one beside it) and a population would "
                                  f"replace it: move it or choose another --out")


def read_index(path: Path) -> dict[str, Any]:
    """A population's ``population.json`` (:func:`write_index`): ``members`` (a list of
    ``{"folder", "seed", "values", "status"}``), ``grid`` and ``summary``.

    Raises:
      FileNotFoundError: no such file.
      ValueError: not valid JSON, or not a population's index (no list of members); names
        the file.
    """
    index = rundir.read_json(path)
    if not isinstance(index, dict) or not isinstance(index.get("members"), list):
        raise ValueError(f"{path}: not a population's index (no list of members)")
    return index


def write_index(path: Path, configs: Sequence[TrainConfig], status: Sequence[str],
                grid: Sequence[str] = ()) -> None:
    """Writes ``population.json`` (atomically): every member's folder relative to
    ``path``'s folder, seed, grid values and status (``running``, ``finished``, or ``diverged
    at round r``), and the summary over the seeds of each grid point that the finished
    members give (:mod:`fedjax_sc.run.summary`; also the population's ``report.md``)."""
    root = path.parent.resolve()
    members: list[dict[str, Any]] = []
    for c, s in zip(configs, status):
        folder = Path(c.out).resolve()
        members.append({"folder": os.path.relpath(folder, root), "seed": c.seed,
                        "values": {k: value_of(c, k) for k in grid}, "status": s})
    index = summary.write(path, {"members": members, "grid": list(grid)})
    rundir.write_text(path, json.dumps(index, indent=2) + "\n")


def shared_training(configs: Sequence[TrainConfig]) -> list[int | None]:
    """For each member, the index of an earlier member whose rounds it would repeat (equal
    but for :data:`AP_ONLY`, its folder and ``resume`` / ``overwrite``; the seed counts), or
    None: the members to train. A member shares training only while its folder holds no run
    of its own (no ``config.json``) or ``overwrite`` is on; a member with its own run resumes
    it. The one that is trained is the first of its kind that is not itself a sharer.

    ``--grid ap_lr_mult=0.01,1`` thus trains once and fine-tunes twice
    (:func:`fedjax_sc.run.api.train`: the trained member's checkpoints are copied into the
    other's folder, :func:`fedjax_sc.run.rundir.copy_training`, which then only redoes the
    evaluation and its own Ap phase)."""
    skip = {*AP_ONLY, "out", "resume", "overwrite"}
    trained: dict[str, int] = {}
    lead: list[int | None] = []
    for i, c in enumerate(configs):
        key = _settings_key(c, skip)
        fresh = c.overwrite or not (Path(c.out) / "config.json").exists()
        lead.append(trained[key] if key in trained and fresh else None)
        if lead[-1] is None:
            trained.setdefault(key, i)
    return lead


def _settings_key(c: TrainConfig, skip: set[str], *extra: Any, traced: bool = False) -> str:
    """``c``'s fields outside ``skip`` (and ``extra``) as one string: equal for configs that
    agree on them (``traced``: but for the numbers among its own algorithm's options, as
    :func:`check_members` compares them)."""
    fields = _shared_fields(c) if traced else dataclasses.asdict(c)
    fields = {k: v for k, v in fields.items() if k not in skip}
    return json.dumps([fields, *extra], sort_keys=True, default=str)


def restart_note(folders: Sequence[str], population: bool = False) -> str:
    """The one line that says :func:`restart_unsaved` started ``folders`` afresh (their names;
    ``population``: the other members resume)."""
    names = ", ".join(folders)
    return (f"--resume: {names} {'holds' if len(folders) == 1 else 'hold'} no checkpoint "
            f"(round 1 never completed): trained again from round 0"
            + ("; the other members resume and keep their files" if population else ""))


def restart_unsaved(configs: Sequence[TrainConfig]) -> tuple[list[TrainConfig], list[int]]:
    """``--resume``: each run whose folder holds its configuration but nothing it trained
    (:func:`fedjax_sc.run.rundir.never_trained`: it never completed round 1, e.g. it diverged
    in it, or its first compile failed) set to start afresh (``resume``
    off, ``overwrite`` on: its folder's run files are replaced once every check passed); the
    others as they are. Nothing is removed here.

    Returns:
      The configs, and the indices of the members that start afresh.

    Raises:
      ValueError: such a member's configuration differs from its folder's
        (:func:`fedjax_sc.run.rundir.check_out_dir`).
      FileExistsError: such a member's folder holds files a run does not write.
    """
    out, restarted = [], []
    for i, c in enumerate(configs):
        folder = Path(c.out)
        if c.resume and rundir.never_trained(folder):
            rundir.check_out_dir(folder, c.resolved())  # the settings it was started with
            foreign = rundir.foreign_entries(folder)
            if foreign:  # starting afresh replaces the folder's run files, and only those
                raise FileExistsError(
                    f"--resume: {folder} never completed round 1, so it would start again "
                    f"from round 0, but it holds files a run does not write "
                    f"({', '.join(foreign[:5])}); nothing was changed: move them or choose "
                    f"another --out")
            c = dataclasses.replace(c, resume=False, overwrite=True)
            restarted.append(i)
        out.append(c)
    return out, restarted


def groups(configs: Sequence[TrainConfig], cap: int | None = None
           ) -> list[list[TrainConfig]]:
    """The configs split into populations: runs that may share a program (equal outside
    :data:`PER_MEMBER`), the same ``resume`` flag and the same last checkpoint (so that every
    member starts at the same round), at most ``cap`` members each (None: :func:`fitting`).
    Order is kept within a group; groups come in the order of their first member."""
    keyed: dict[str, list[TrainConfig]] = {}
    for c in configs:
        keyed.setdefault(_settings_key(c, PER_MEMBER, rundir.last_round(Path(c.out)),
                                       traced=True), []).append(c)
    out = []
    for group in keyed.values():
        size = cap or fitting(group[0])
        out += [group[i:i + size] for i in range(0, len(group), size)]
    return out


def member_bytes(c: TrainConfig) -> int:
    """A rough upper bound of one member's memory, in bytes: float32 parameters (dominated by
    the [V, d] word embedding) held ``3 x (K + 1)`` times (the server's copy; each client's
    parameters, momentum and update during the round). ``c`` resolved.

    Raises:
      ValueError: a table scene's clients by its client column, which only its data knows
        (give the population size).
    """
    from fedjax_sc.data.corpus import FDU_DOMAINS
    clients = {"fdu": len(c.domains or FDU_DOMAINS), "iyy": 3,
               "synthetic": c.synthetic_clients}.get(c.scene)
    if clients is None and c.partition == "natural" and c.clients_per_round is None:
        raise ValueError(f"the {c.scene} scene's clients come from its data: give the "
                         f"population size (--population-size)")
    if c.partition != "natural":
        clients = int(c.num_clients)
    if c.clients_per_round is not None:
        clients = c.clients_per_round
    gru = 2 * 3 * c.hidden * (c.embed_dim + c.hidden + 2)
    params = (c.vocab_size + 2) * c.embed_dim + 2 * gru + 4 * c.hidden * c.mlp_hidden
    return 4 * params * 3 * (clients + 1)


def free_bytes() -> int:
    """Free memory of this process's first device (an accelerator's ``memory_stats``), else of
    the host (``os.sysconf``), in bytes."""
    import jax
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def fitting(c: TrainConfig) -> int:
    """The default population size: as many members as half the free memory holds by
    :func:`member_bytes` (at least 1). With several processes, the least free memory of any
    of them (an all-gather: every process must call it), so that all form the same groups."""
    from fedjax_sc.run.plumbing import processes
    free = free_bytes()
    if processes.several():
        from jax.experimental import multihost_utils
        mib = multihost_utils.process_allgather(np.int32(min(free >> 20, 2**31 - 1)))
        free = int(np.min(mib)) << 20  # MiB: JAX's integers are 32-bit by default
    return max(1, free // 2 // member_bytes(c.resolved()))
