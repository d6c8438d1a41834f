"""A run's saved configuration (its ``config.json``): read back for ``fedjax-sc train
--config`` (:func:`merge`), as the run it describes (:func:`config_from_json`), and compared
with a resuming run's (:func:`config_diff`).

Every key is checked against :class:`~fedjax_sc.run.config.TrainConfig`'s fields and the types
they declare before anything else happens (no corpus is read, no folder made): an ``int``
field takes a JSON integer only (not ``1.5``, ``"1"`` or ``true``), a ``float`` field a number
(an integer too), ``str`` a string, ``bool`` ``true`` / ``false``, ``X | None`` also ``null``,
a tuple a JSON list of the declared items. A key that is no field is refused. A field the file
lacks (a configuration written before that option existed) takes its default, and the caller
is told which ones did; a table run's lacking ``tokenizer`` is ``whitespace``, what it was
trained with (:func:`fedjax_sc.run.table_scene.saved_defaults`). ``scene`` and ``algorithm``,
which every run's ``config.json`` holds, must be in the file or on the command line.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from pathlib import Path
from typing import Any

from fedjax_sc.run import registry, table_scene
from fedjax_sc.run.config import EMBEDDINGS, TrainConfig
from fedjax_sc.run.plumbing.flags import flag
from fedjax_sc.run.plumbing.jsonfile import read_json

REQUIRED = ("scene", "algorithm")
"""The fields a saved configuration must hold unless the command line gives them."""
OWN = ("out", "resume", "overwrite", "seeds", "grid")
"""Options that belong to the new run: never taken from the saved configuration."""

_NAMES = {int: "an int", float: "a number", str: "a string", bool: "true or false"}


class _Mismatch(Exception):
    """A value that is not of the declared type."""


@functools.cache
def _hints() -> dict[str, Any]:
    return typing.get_type_hints(TrainConfig)


def _is_union(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union


def _describe(hint: Any) -> str:
    """What a JSON value of ``hint`` is, for the error message: ``an int``, ``a list of 2
    ints or null``."""
    if _is_union(hint):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return " or ".join(map(_describe, inner)) + " or null"
    if hint is tuple or typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if not args:
            return "a list"
        if args[-1] is Ellipsis:
            return f"a list of {_describe(args[0]).split(' ', 1)[1]}s"
        return f"a list of {len(args)} {_describe(args[0]).split(' ', 1)[1]}s"
    if hint is dict or typing.get_origin(hint) is dict:
        return "an object of numbers and strings"
    return _NAMES.get(hint, getattr(hint, "__name__", str(hint)))


def _value(hint: Any, value: Any) -> Any:
    """``value`` as a field of type ``hint`` holds it (an int of a float field as a float, a
    list as a tuple).

    Raises:
      _Mismatch: ``value`` is not of type ``hint``.
    """
    if _is_union(hint):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        for a in inner:
            try:
                return _value(a, value)
            except _Mismatch:
                pass
        raise _Mismatch
    if hint is tuple or typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, list):
            raise _Mismatch
        if not args:  # label_names: the JSON scalars of a table's labels
            if any(isinstance(v, (list, dict)) for v in value):
                raise _Mismatch
            return tuple(value)
        if args[-1] is Ellipsis:
            return tuple(_value(args[0], v) for v in value)
        if len(value) != len(args):
            raise _Mismatch
        return tuple(_value(a, v) for a, v in zip(args, value))
    if hint is dict or typing.get_origin(hint) is dict:  # algorithm_options
        if not isinstance(value, dict) or not all(
                isinstance(v, (int, float, str)) and not isinstance(v, bool)
                for v in value.values()):
            raise _Mismatch
        return dict(value)
    if isinstance(value, bool) != (hint is bool):
        raise _Mismatch
    if hint is float and isinstance(value, int):
        return float(value)
    if not isinstance(value, hint):
        raise _Mismatch
    return value


def check_fields(where: str, saved: dict[str, Any]) -> dict[str, Any]:
    """``saved``'s fields as a :class:`TrainConfig` holds them, each of its declared type.

    Raises:
      ValueError: ``<where>: "rounds" must be an int, got "1"``, or an unknown key (all of
        them named).
    """
    hints = _hints()
    unknown = sorted(k for k in saved if k not in hints)
    if unknown:
        raise ValueError(f"{where}: unknown key{'s' * (len(unknown) > 1)} "
                         f"{', '.join(json.dumps(k) for k in unknown)}: no setting of this "
                         f"version is called so")
    out = {}
    for k, v in saved.items():
        try:
            out[k] = _value(hints[k], v)
        except _Mismatch:
            raise ValueError(f"{where}: {json.dumps(k)} must be {_describe(hints[k])}, got "
                             f"{json.dumps(v)}") from None
    return out


def merge(path: str, args: dict[str, Any], given: set[str]) -> tuple[dict[str, Any], list[str]]:
    """``args`` (the parsed ``train`` options) with every option not ``given`` on the command
    line taken from the saved configuration ``path``, except :data:`OWN`; a user's algorithm's
    options given (``--algorithm-option``) replace only the saved options of their names.

    Returns:
      ``(merged, defaulted)``: the options, and the fields that ``path`` lacks and the command
      line does not give, which keep their defaults (a configuration of an older version).

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: one line starting ``--config PATH:``: not valid JSON, not an object, an
        unknown key, a value of another type than its field's, or no :data:`REQUIRED` field
        (when the command line does not give it either).
    """
    if Path(path).is_dir():
        raise FileNotFoundError(f"--config {path}: a folder; give its config.json "
                                f"(--config {Path(path) / 'config.json'})")
    if not Path(path).is_file():
        raise FileNotFoundError(f"--config {path}: no such file")
    where = f"--config {path}"
    try:
        saved = read_json(Path(path))
    except ValueError as e:  # "PATH:LINE: not valid JSON ...": the flag named first
        raise ValueError(f"--config {e}") from None
    if not isinstance(saved, dict):
        raise ValueError(f"{where}: not a run's config.json (a JSON object of its settings)")
    saved = check_fields(where, saved)
    saved = {**table_scene.saved_defaults(saved), **saved}
    for k in REQUIRED:
        if k not in saved and k not in given:
            raise ValueError(f"{where}: no {json.dumps(k)}, which every run's config.json "
                             f"holds; add it or give {flag(k)}")
    keep = given | set(OWN)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    defaulted = [k for k in args if k in fields and k not in keep and k not in saved]
    merged = {k: (v if k in keep or k not in saved else saved[k]) for k, v in args.items()}
    if "algorithm" not in given:
        _find_algorithm_file(Path(path), merged.get("algorithm"), bool(merged.get("resume")))
    if "algorithm_options" in given and isinstance(saved.get("algorithm_options"), dict):
        # --algorithm-option NAME=VALUE sets that option; the saved run's others stay
        merged["algorithm_options"] = {**saved["algorithm_options"],
                                       **args["algorithm_options"]}
    return {k: tuple(v) if isinstance(v, list) else v for k, v in merged.items()}, defaulted


def _find_algorithm_file(config: Path, spec: Any, resume: bool = False) -> None:
    """A saved ``FILE.py:F`` is relative to the folder the run was started in; rerun from
    another folder, it is not found there. Where the run's fingerprint.json records the file
    (:func:`fedjax_sc.run.loading.fingerprint`) and it exists, the error names it.

    Raises:
      ValueError: ``spec`` is a relative file that does not exist here while the recorded
        one does.
    """
    from fedjax_sc.algorithms.context import is_spec
    if not is_spec(spec):
        return
    where, _, function = spec.rpartition(":")
    if not where.endswith(".py") or Path(where).is_absolute() or Path(where).exists():
        return
    index = config.parent / "fingerprint.json"
    try:
        recorded = Path(read_json(index)["algorithm"]["file"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # the loader's own error names the spec
    if recorded.is_file():
        fix = (f"run from {recorded.parent} (--resume needs the configuration as saved)"
               if resume else f"add --algorithm {recorded}:{function}, or run from that "
                              f"folder")
        raise ValueError(f"--config {config}: --algorithm {spec} is relative to the folder "
                         f"the run was started in and is not found here; {index} records "
                         f"the file as {recorded}: {fix}")


def config_from_json(fields: dict[str, Any]) -> TrainConfig:
    """The resolved config a run's ``config.json`` holds (lists back to tuples; fields an
    older or newer version wrote that this one lacks are dropped; ``resume`` and ``overwrite``
    off).

    Raises:
      ValueError: settings :meth:`TrainConfig.resolved` refuses.
    """
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items() if k in known}
    fields = {**table_scene.saved_defaults(fields), **fields}
    return TrainConfig(**{**fields, "resume": False, "overwrite": False}).resolved()


def config_diff(saved: dict[str, Any], c: TrainConfig) -> dict[str, tuple[Any, Any]]:
    """``{field: (saved, now)}`` for the training settings in which a saved ``config.json``
    differs from ``c``. The rounds, the output folder and the Ap phase's settings may differ
    (a run continues, or only its evaluation is redone; not under ``--lr-schedule cosine``,
    whose decay spreads over the rounds), and so may ``padding`` (how the
    rounds are fed: the figures change by float32 rounding only; config.json then records the
    new one), the spelling of the data folder or files (and of a word-vector file) and the
    table scene's ``label_names``,
    read from its data (the data themselves are compared by their fingerprint,
    :func:`fedjax_sc.run.rundir.check_resume_data`), and an option the run's algorithm does not
    read (:func:`fedjax_sc.run.registry.reads`: a FedAvg run is the same whatever FedFusion's
    operator); a field an older version did not write is compared with its default (what that
    version did)."""
    ignore = {"rounds", "resume", "overwrite", "out", "ap", "ap_evals", "ap_steps", "data",
              "ap_lr_mult", "ap_mode", "data_dir", "tensorboard", "test_data", "label_names",
              "wandb", "wandb_project", "wandb_mode", "padding"}
    defaults = {**json.loads(json.dumps(dataclasses.asdict(TrainConfig()))),
                **table_scene.saved_defaults(saved)}
    now = json.loads(json.dumps(dataclasses.asdict(c)))
    if not {saved.get("embeddings"), c.embeddings} & set(EMBEDDINGS):
        ignore.add("embeddings")  # a word-vector file both times, its path spelt otherwise
    if "cosine" in (str(saved.get("lr_schedule")), str(c.lr_schedule)):
        ignore.discard("rounds")  # the cosine decay spreads over --rounds: another run
    return {k: (saved.get(k, defaults[k]), v) for k, v in now.items()
            if k not in ignore and registry.reads(c.algorithm, k)
            and saved.get(k, defaults[k]) != v}
