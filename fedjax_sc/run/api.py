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
        :data:`fedjax_sc.run.members.GRID_NAMES`).
      mesh: ``--mesh``.
      log: where progress lines go.
      **settings: any field of :class:`~fedjax_sc.run.config.TrainConfig` (``scene``,
        ``rounds``, ``lr``, ``resume``, ``overwrite``...).

    ``resume`` of a population trains again from round 0 each member that holds no
    checkpoint (it never completed round 1, e.g. it diverged in it), in a population of
    their own, and says so in one line on stderr; the others resume.

    Returns:
      The run's report (as :func:`fedjax_sc.run.train.train`), or the members' reports
      (None for a member that diverged).

    Raises:
      ValueError / FileNotFoundError / FileExistsError: as ``fedjax-sc train`` (bad
        settings, data, or an existing run folder without ``resume`` / ``overwrite``).
    """
    from fedjax_sc.run import members
    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.train import train as train_one
    from fedjax_sc.run.train import train_population
    config = TrainConfig(algorithm=algorithm_spec(algorithm), out=str(out), **settings)
    specs = ([f"{k}={','.join(map(str, v))}" for k, v in grid.items()]
             if isinstance(grid, Mapping) else list(grid or ()))
    if seeds is None and not specs:
        return (train_one(config, log=log) if mesh is None
                else train_one(config, log=log, mesh=mesh))
    parsed = members.parse_grid(specs)
    configs = members.expand(config, None if seeds is None else [int(s) for s in seeds],
                             parsed)
    Path(config.out).mkdir(parents=True, exist_ok=True)
    index = Path(config.out) / "population.json"
    configs, restarted = members.restart_unsaved(configs)
    if not restarted or len(restarted) == len(configs):
        return train_population(configs, log=log, index=index, grid=list(parsed), mesh=mesh)
    return _resume_in_parts(configs, restarted, log, index, list(parsed))


def _resume_in_parts(configs: list[Any], restarted: list[int], log: Callable[[str], None],
                     index: Path, grid: list[str]) -> list[dict[str, Any] | None]:
    """``--resume`` of a population some of whose members hold no checkpoint
    (:func:`fedjax_sc.run.members.restart_unsaved`): the others resume as one population,
    then those train from round 0 as another (a member that diverges again stops, as in a
    population; the devices are split automatically); ``population.json`` written at the end.
    One line on stderr names them."""
    from fedjax_sc.run import members, rundir
    from fedjax_sc.run.plumbing import processes
    from fedjax_sc.run.train import NonFiniteUpdateError, train_population
    fresh = [configs[i] for i in restarted]
    if processes.primary():
        print(f"fedjax-sc: --resume: {', '.join(Path(c.out).name for c in fresh)} "
              f"{'holds' if len(fresh) == 1 else 'hold'} no checkpoint (never completed round "
              f"1): trained again from round 0; the other members resume and keep their files",
              file=sys.stderr, flush=True)
    reports: dict[str, dict[str, Any] | None] = {}
    for part in ([c for i, c in enumerate(configs) if i not in restarted], fresh):
        try:
            got = train_population(part, log=log)
        except NonFiniteUpdateError as e:  # a part of one member, or all of it, diverged
            log(f"{e} ({', '.join(Path(c.out).name for c in part)} stopped)")
            got = [None] * len(part)
        reports.update(zip((c.out for c in part), got))
    members.write_index(index, configs, [
        "finished" if reports[c.out] is not None else
        f"diverged at round {(rundir.last_round(Path(c.out)) or 0) + 1}" for c in configs], grid)
    return [reports[c.out] for c in configs]


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
    """
    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.loading import load_scene
    config = TrainConfig(scene="table", data=str(data), text_column=text_column,
                         label_column=label_column, client_column=client_column,
                         **settings).resolved()
    return load_scene(config)
