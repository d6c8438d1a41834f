"""``fsc.train``: the whole run (run folder, metrics, checkpoints and resume, tracking,
populations, the report) for any algorithm from Python, what ``fedjax-sc train`` does from the
shell.

    import fedjax_sc as fsc
    from my_study import scaffold          # scaffold(context: fsc.BuildContext) -> Algorithm
    fsc.train(scaffold, out="runs/scaffold", scene="synthetic", seeds=[0, 1])
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedjax_sc.algorithms import context


def algorithm_spec(algorithm: str | Callable[..., Any]) -> str:
    """The ``--algorithm`` value of ``algorithm``: a name or spec as it is; a function as
    ``package.module:NAME`` when its module is importable by name, else ``path/file.py:NAME``
    (a function of the script being run), registered so that it is not loaded twice.

    Raises:
      ValueError: a function that is not at the top level of its module (a lambda, a
        closure: the run records where to find it, for resumes and reruns).
    """
    if isinstance(algorithm, str):
        return algorithm
    name = getattr(algorithm, "__qualname__", "")
    if not callable(algorithm) or not name.isidentifier():
        raise ValueError(f"train(algorithm=...): give a name, 'FILE.py:FUNCTION' or a "
                         f"function defined at the top level of a module, got {algorithm!r}")
    module = algorithm.__module__
    if module == "__main__" or module.startswith("fedjax_sc_user_") or module not in sys.modules:
        spec = f"{Path(inspect.getsourcefile(algorithm)).resolve()}:{name}"
    else:
        spec = f"{module}:{name}"
    context._LOADED.setdefault(spec, algorithm)
    return spec


def train(algorithm: str | Callable[..., Any], *, out: str | Path,
          seeds: Sequence[int] | None = None,
          grid: Mapping[str, Sequence[float]] | Sequence[str] | None = None,
          mesh: str | None = None, log: Callable[[str], None] = print,
          from_run: str | Path | None = None,
          **settings: Any) -> dict[str, Any] | list[dict[str, Any] | None]:
    """Trains ``algorithm`` as ``fedjax-sc train`` does: one run in ``out``, or with
    ``seeds`` / ``grid`` a population of runs under ``out`` (one folder per member and
    ``population.json``).

    Args:
      algorithm: a built-in name (``"fedavg"``, ``"kteps"``...), ``"path/to/file.py:F"``,
        or a function ``F(context: BuildContext) -> Algorithm`` (:mod:`fedjax_sc.algorithms.
        context`) defined at the top level of a module.
      out: the run folder (a population's root folder).
      seeds: the members' seeds (``--seeds``).
      grid: ``{"lr": [0.01, 0.05]}`` or ``["lr=0.01,0.05"]`` (``--grid``; the names of
        :data:`fedjax_sc.run.members.GRID_NAMES`, or of a user's algorithm's own options).
      mesh: ``--mesh``.
      log: where progress lines go.
      from_run: ``--from-run``: a run folder whose rounds (checkpoints, configuration,
        metrics) are copied into ``out`` (each member's folder) before it resumes, so that
        only what the settings change is done: the evaluation and the Ap phase with other
        Ap settings (more rounds continue its training). ``settings`` must match its
        configuration otherwise (checked before anything is copied; the error names those
        that differ). The folder is not changed.
      **settings: any field of :class:`~fedjax_sc.run.config.TrainConfig` (``scene``,
        ``rounds``, ``lr``, ``resume``, ``overwrite``, a user's algorithm's own
        ``algorithm_options={"q": 1.0}``...).

    ``resume`` of a population trains again from round 0 each member that holds no
    checkpoint (it never completed round 1, e.g. it diverged in it), in a population of
    their own, and says so in one line on stderr; the others resume. Members that differ
    only in the Ap phase's mu (``grid={"ap_lr_mult": ...}``) train once: the others copy the
    trained one's rounds and redo only their Ap phases
    (:func:`fedjax_sc.run.members.shared_training`).

    Returns:
      The run's report (as :func:`fedjax_sc.run.train.train`), or the members' reports
      (None for a member that diverged).

    Raises:
      ValueError / FileNotFoundError / FileExistsError: as ``fedjax-sc train`` (bad
        settings, data, or an existing run folder without ``resume`` / ``overwrite``).
      TypeError: a setting :class:`~fedjax_sc.run.config.TrainConfig` has no field for.
      NonFiniteUpdateError: a single run whose update is not finite, or a population whose
        every member diverged (one member alone stops, its report None).

    A setting given in ``settings`` and varied by ``grid`` (``lr=0.3, grid={"lr": ...}``, an
    ``algorithm_options`` key the grid names), or ``seed`` with ``seeds``, is refused
    (ValueError): each member would take the grid's value.
    """
    explicit = {*settings, *settings.get("algorithm_options", {})}
    return train_runs(algorithm, explicit, out=out, seeds=seeds, grid=grid, mesh=mesh,
                      log=log, from_run=from_run, **settings)


def train_runs(algorithm: str | Callable[..., Any], explicit: set[str], *, out: str | Path,
               seeds: Sequence[int] | None = None,
               grid: Mapping[str, Sequence[float]] | Sequence[str] | None = None,
               mesh: str | None = None, log: Callable[[str], None] = print,
               from_run: str | Path | None = None,
               **settings: Any) -> dict[str, Any] | list[dict[str, Any] | None]:
    """:func:`train`, with ``explicit`` the names of the settings the caller set itself
    (``fedjax-sc train``: the flags on its command line; the others hold their defaults or a
    ``--config`` file's values, which a grid may vary):
    :func:`fedjax_sc.run.members.refuse_set_twice`."""
    from fedjax_sc.run import members
    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.train import train as train_one
    from fedjax_sc.run.train import train_population
    config = TrainConfig(algorithm=algorithm_spec(algorithm), out=str(out), **settings)
    specs = ([f"{k}={','.join(map(str, v))}" for k, v in grid.items()]
             if isinstance(grid, Mapping) else list(grid or ()))
    parsed = members.parse_grid(specs, own=context.is_spec(config.algorithm))
    members.refuse_set_twice(list(parsed), seeds, explicit)
    if seeds is None and not specs:
        if from_run is not None:
            config = _copied_from(Path(from_run), [config])[0]
        (config,), fresh = members.restart_unsaved([config])
        if fresh:  # round 1 never completed (a failed first compile, a crash): nothing lost
            log(members.restart_note([str(config.out)]))
        return (train_one(config, log=log) if mesh is None
                else train_one(config, log=log, mesh=mesh))
    configs = members.expand(config, None if seeds is None else [int(s) for s in seeds],
                             parsed)
    if from_run is not None:
        configs = _copied_from(Path(from_run), configs)
    from fedjax_sc.run import rundir
    with rundir.locked(Path(config.out)):  # the root's population.json and report.md
        members.check_root(Path(config.out))
        index = Path(config.out) / "population.json"
        configs, restarted = members.restart_unsaved(configs)
        lead = members.shared_training(configs)
        if all(j is None for j in lead) and (not restarted or len(restarted) == len(configs)):
            return train_population(configs, log=log, index=index, grid=list(parsed),
                                    mesh=mesh)
        if mesh is not None:
            log(f"--mesh {mesh}: this population trains in parts (members that resume or "
                f"restart, or that share another's rounds); each part's mesh is chosen "
                f"automatically")
        return _train_in_parts(configs, restarted, lead, log, index, list(parsed))


def _copied_from(run: Path, configs: list[Any]) -> list[Any]:
    """``--from-run``: ``run``'s rounds copied into each config's folder that holds no run yet
    (:func:`fedjax_sc.run.rundir.copy_training`; a folder that holds one, e.g. from an
    earlier start of the same command, is resumed as it is), and every config set to resume.

    Raises:
      FileNotFoundError: ``run`` holds no checkpoint. ValueError: a setting other than the Ap
        phase's and the rounds differs from ``run``'s, ``--overwrite`` (the copy goes into a
        new folder), or a folder that is ``run`` itself. FileExistsError: a folder
        holds part of a run but no config.json (nothing is copied over it).
    """
    import dataclasses

    from fedjax_sc.run import rundir
    from fedjax_sc.run.config_file import config_diff
    from fedjax_sc.run.plumbing import processes
    if rundir.last_round(run) is None:
        raise FileNotFoundError(f"--from-run {run}: no checkpoint to start from")
    if any(c.overwrite for c in configs):
        raise ValueError("--from-run copies a run into a new --out folder: --overwrite does "
                         "not apply (remove the folder, or choose another --out)")
    if any(Path(c.out).resolve() == run.resolve() for c in configs):
        raise ValueError(f"--from-run {run}: --out names the same folder; the run is not "
                         f"changed, so choose another --out")
    saved = rundir.read_json(run / "config.json")
    for c in configs:  # before anything is copied
        diff = config_diff(saved, c.resolved())
        if diff:
            raise ValueError(f"--from-run {run}: settings differ from the run's {diff}; a "
                             f"run started from it may change only its Ap phase and rounds")
    for c in configs:
        if not (Path(c.out) / "config.json").exists():
            rundir.copy_training(run, Path(c.out))
    processes.barrier("--from-run: rounds copied")
    return [dataclasses.replace(c, resume=True, overwrite=False) for c in configs]


def _train_in_parts(configs: list[Any], restarted: list[int], lead: list[int | None],
                    log: Callable[[str], None], index: Path, grid: list[str]
                    ) -> list[dict[str, Any] | None]:
    """A population trained in parts, ``population.json`` written before and after:

    1. the members that resume (or start) as usual, as one population;
    2. on ``--resume``, the members that hold no checkpoint (they never completed round 1,
       :func:`fedjax_sc.run.members.restart_unsaved`), from round 0 as another (one line on
       stderr names them; a member that diverges again stops, as in a population);
    3. the members that share the training of another (``lead``,
       :func:`fedjax_sc.run.members.shared_training`; that one trains without its Ap phase
       in 1 or 2): its rounds are copied into their folders
       (:func:`fedjax_sc.run.rundir.copy_training`), then they and the members they copied
       resume for the evaluation and the Ap phase only, every member with its own mu, as one
       population (one compiled Ap program). A member whose trained one diverged is reported
       as it diverged (no folder of its own).

    The devices are split automatically (``--mesh`` applies to one population)."""
    import dataclasses

    from fedjax_sc.run import members, rundir
    from fedjax_sc.run.plumbing import processes
    from fedjax_sc.run.train import NonFiniteUpdateError, train_population
    sharers = [i for i, j in enumerate(lead) if j is not None]
    fresh = [i for i in restarted if i not in sharers]
    for i in sharers:  # a folder that cannot take the copy is named before any training
        rundir.check_out_dir(Path(configs[i].out), dataclasses.replace(configs[i],
                                                                        resume=False))
    if fresh and processes.primary():
        print("fedjax-sc: " + members.restart_note([Path(configs[i].out).name for i in fresh],
                                                   population=True),
              file=sys.stderr, flush=True)
    for i in sharers:
        log(f"{Path(configs[i].out).name}: trains as {Path(configs[lead[i]].out).name} does "
            f"(only the Ap phase differs): its rounds are copied once that one has finished")
    members.write_index(index, configs, ["running"] * len(configs), grid)
    reports: dict[int, dict[str, Any] | None] = {}

    def run(part: list[int], cs: list[Any]) -> None:
        if not part:
            return
        try:
            got = train_population(cs, log=log)
        except NonFiniteUpdateError as e:  # a part of one member, or all of it, diverged
            log(f"{e} ({', '.join(Path(c.out).name for c in cs)} stopped)")
            got = [None] * len(cs)
        reports.update(zip(part, got))

    leaders = {lead[i] for i in sharers}  # their Ap phase comes with their sharers'
    first = [i for i, j in enumerate(lead) if j is None and i not in fresh]
    for part in (first, fresh):
        run(part, [dataclasses.replace(configs[i], ap=configs[i].ap and i not in leaders)
                   for i in part])
    copied = [i for i in sharers if reports[lead[i]] is not None]
    for i in copied:
        where = Path(configs[i].out)
        if configs[i].overwrite and rundir.run_files(where):
            rundir.remove_run(where)
            log(f"--overwrite: removed the earlier run in {where}")
        rundir.copy_training(Path(configs[lead[i]].out), where)
    processes.barrier("population: shared training copied")
    again = sorted({lead[i] for i in copied} | set(copied))
    run(again, [dataclasses.replace(configs[i], resume=True, overwrite=False) for i in again])
    trained = [lead[i] if lead[i] is not None else i for i in range(len(configs))]
    members.write_index(index, configs, [
        "finished" if reports.get(i) is not None else
        f"diverged at round {(rundir.last_round(Path(configs[t].out)) or 0) + 1}"
        for i, t in enumerate(trained)], grid)
    return [reports.get(i) for i in range(len(configs))]


def table_scene(data: str | Path, *, text_column: str, label_column: str,
                client_column: str | None = None, **settings: Any):
    """A corpus of one's own as a :class:`~fedjax_sc.data.scenes.Scene`, read exactly as
    ``fedjax-sc train --scene table`` reads it (its checks, tokeniser, partition and
    vocabulary): a CSV, JSON-lines or Parquet file, a ``datasets`` folder or
    ``hf:BUILDER:FILE``.

    Args:
      data: the training rows (with ``split_column``: every row).
      text_column: the column of the review texts.
      label_column: the column of their labels (any values; the classes are the sorted
        distinct labels).
      client_column: one client per distinct value (a natural-id partition); without it give
        ``partition="iid"`` (or ``dirichlet``, with ``alpha``) and ``num_clients``.
      **settings: any other field of :class:`~fedjax_sc.run.config.TrainConfig` the table
        scene reads: ``test_data``, ``split_column``, ``test_fraction``, ``tokenizer``
        (``basic`` by default), ``max_len`` (200), ``vocab_size`` (50,000),
        ``partition_seed``, ``allow_empty_clients``...

    Returns:
      The scene: ``scene.train`` / ``scene.test`` for :func:`fedjax_sc.client_data`,
      ``scene.vocab`` for the model's ``vocab_size``.

    Raises:
      ValueError / FileNotFoundError: as ``fedjax-sc train --scene table`` (one line naming
        the file, column or setting).
      TypeError: a setting :class:`~fedjax_sc.run.config.TrainConfig` has no field for.
    """
    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.loading import load_scene
    config = TrainConfig(scene="table", data=str(data), text_column=text_column,
                         label_column=label_column, client_column=client_column,
                         **settings).resolved()
    return load_scene(config)
