"""What the run hands a researcher's own algorithm: ``fedjax-sc train --algorithm
path/to/file.py:FUNCTION`` (or ``package.module:FUNCTION``) calls ``FUNCTION(context)`` with a
:class:`BuildContext` and trains the :class:`~fedjax_sc.algorithms.base.Algorithm` it returns
through the whole run: run folder, metrics, checkpoints and resume, tracking, populations
(``--seeds``, ``--grid lr=...``) and the report. Its own settings come from
``--algorithm-option NAME=VALUE`` (``context.options``) and vary in a population with
``--grid NAME=V1,V2``. docs/own-algorithm.md walks through one.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import optax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.models.text_classifier import GRU_INIT, TextClassifier


class BuildContext(NamedTuple):
    """The run's settings an algorithm is built from.

    Attributes:
      vocab_size, num_classes: the scene's V (with ``<pad>`` and ``<unk>``) and C.
      embed_dim, hidden, mlp_hidden, furl_dim, dtype: the model's d, BiGRU width per
        direction, MLP width, FURL user vector size and compute dtype (``--embed-dim``...).
      num_clients: N, the clients of the federation (a server mean over every client).
      learning_rate, momentum, embedding_learning_rate: the client SGD (``--lr``,
        ``--momentum``, ``--embedding-lr``); in a population (``--grid lr=...``) the varied
        ones are traced scalars: use them in arithmetic, never in a Python ``if``. Under
        ``--lr-schedule`` ``learning_rate`` is the round's (traced, one compiled round), so
        a hook that divides by the step size (SCAFFOLD's option II) divides by the one the
        round's local steps took.
      options: the algorithm's own settings, ``{name: value}`` from ``--algorithm-option
        NAME=VALUE`` (an int, a float or a string, as :func:`parse_option` reads it); a name
        the grid varies (``--grid q=0,1``) is a traced float32 scalar in a population. Read
        them while building (``context.options.get("q", 1.0)``): a run refuses an option its
        builder never read (a misspelt name would otherwise be ignored).
      gru_init: how the BiGRU's weights start (``--gru-init``; :meth:`text_classifier`
        uses it).
    """

    vocab_size: int
    num_classes: int
    embed_dim: int
    hidden: int
    mlp_hidden: int
    furl_dim: int
    dtype: str
    num_clients: int
    learning_rate: hparams.Value
    momentum: hparams.Value
    embedding_learning_rate: hparams.Value | None = None
    options: Mapping[str, Any] = types.MappingProxyType({})
    gru_init: str = GRU_INIT

    def text_classifier(self, **overrides: Any) -> TextClassifier:
        """The paper's Embedding-BiGRU-MLP classifier at the run's sizes (``overrides``
        replace any field)."""
        dims = dict(vocab_size=self.vocab_size, embed_dim=self.embed_dim, hidden=self.hidden,
                    mlp_hidden=self.mlp_hidden, num_classes=self.num_classes,
                    furl_dim=self.furl_dim, dtype=self.dtype, gru_init=self.gru_init)
        return TextClassifier(**{**dims, **overrides})

    def client_optimizer(self) -> optax.GradientTransformation:
        """The run's client SGD (:func:`~fedjax_sc.algorithms.optimizers.client_sgd`)."""
        return client_sgd(self.learning_rate, self.momentum, self.embedding_learning_rate)


def parse_option(text: str) -> tuple[str, int | float | str]:
    """``"q=0.5"`` -> ``("q", 0.5)``: one ``--algorithm-option``; the value an int where it
    reads as one (``"k=5"``), else a float (``1e-3``), else the string itself.

    Raises:
      ValueError: no ``=``, a name that is not a Python identifier, or a number that is not
        finite.
    """
    name, sep, value = str(text).partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise ValueError(f"--algorithm-option {text!r}: write NAME=VALUE, NAME a Python "
                         f"identifier (e.g. q=0.5)")
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        if not math.isfinite(number):
            raise ValueError(f"--algorithm-option {text!r}: the value must be finite")
        return name, number
    return name, value


class ReadOptions(Mapping):
    """A read-only mapping that remembers which keys were read (``[]``, ``get``, ``in``), so
    that a run can refuse the options an algorithm never looked at (:attr:`unread`)."""

    def __init__(self, values: Mapping[str, Any]):
        self._values, self._read = dict(values), set()

    def __getitem__(self, name: str) -> Any:
        self._read.add(name)
        return self._values[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The option ``name``, or ``default`` where it is not given; a given value is held to
        ``default``'s kind: an int where a float is the default becomes that float, a whole
        float where an int is (``k=5.0``) that int, a bool default takes ``true``/``false``
        (or 1/0), and a text where a number is the default, or another value where a bool
        is, is refused (a typo such as ``alpha=0.1x`` would otherwise reach the loss as
        a string). A traced grid value passes as it is.

        Raises:
          ValueError: one line naming ``--algorithm-option NAME=VALUE`` and the kind
            expected.
        """
        if name not in self:
            return default
        value = self._values[name]
        if isinstance(default, bool) and isinstance(value, (str, int, float)):
            word = str(value).lower()
            if word not in ("true", "false", "1", "0", "1.0", "0.0"):
                raise ValueError(f"--algorithm-option {name}={value}: true or false expected "
                                 f"(the builder's default is {default})")
            return word in ("true", "1", "1.0")
        if isinstance(default, (int, float)) and isinstance(value, str):
            raise ValueError(f"--algorithm-option {name}={value}: a number expected (the "
                             f"builder's default is {default!r})")
        if isinstance(default, int) and isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value,
                                                                                    bool):
            return float(value)
        return value

    def __contains__(self, name: object) -> bool:
        self._read.add(name)
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        self._read.update(self._values)  # iterating reads every option
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def read(self) -> list[str]:
        """The names looked up (given or not), sorted."""
        return sorted(self._read)

    @property
    def unread(self) -> list[str]:
        """The names given that were never read, sorted."""
        return sorted(set(self._values) - self._read)


def is_spec(name: str) -> bool:
    """Whether an ``--algorithm`` value names a user's function (``FILE.py:F``, ``mod:F``)."""
    return isinstance(name, str) and ":" in name


_LOADED: dict[str, Callable[[BuildContext], Any]] = {}


def load(spec: str) -> Callable[[BuildContext], Any]:
    """The function ``spec`` names: ``path/to/file.py:FUNCTION`` (a file, loaded once per
    process under a private module name) or ``package.module:FUNCTION`` (imported). As
    ``python path/to/file.py`` and ``python -m package.module`` do, the file's folder, or the
    current folder for a module, is put first on ``sys.path`` (where it is not on it yet), so
    that the file imports the modules beside it and a module of the folder a run is started
    from is found by the ``fedjax-sc`` command too (a run ``fsc.train`` started from a
    script records its function as ``module:FUNCTION``).

    Raises:
      ValueError: a malformed spec, a file or module that does not exist or fails to import
        (the cause on the same line), or a name that is not a callable in it.
    """
    if spec in _LOADED:
        return _LOADED[spec]
    where, _, function = spec.rpartition(":")
    if not where or not function.isidentifier():
        raise ValueError(f"--algorithm {spec!r}: write path/to/file.py:FUNCTION or "
                         f"package.module:FUNCTION")
    try:
        if where.endswith(".py"):
            path = Path(where)
            if not path.is_file():
                raise ValueError(f"--algorithm {spec!r}: no file {where}")
            _on_path(path.resolve().parent)
            name = f"fedjax_sc_user_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # dataclasses and pickling look modules up by name
            module_spec.loader.exec_module(module)
        else:
            _on_path(Path.cwd())
            module = importlib.import_module(where)
    except ValueError:
        raise
    except Exception as e:  # the user's module: any error it raises while importing
        raise ValueError(f"--algorithm {spec!r}: importing {where} failed "
                         f"({type(e).__name__}: {e})") from e
    fn = getattr(module, function, None)
    if not callable(fn):
        raise ValueError(f"--algorithm {spec!r}: {where} has no function {function!r}")
    _LOADED[spec] = fn
    return fn


def _on_path(folder: Path) -> None:
    """``folder`` first on ``sys.path`` unless it is on it already (or ``""``, the current
    folder, is and ``folder`` is the current folder)."""
    here = [Path(p or ".").resolve() for p in sys.path]
    if folder.resolve() not in here:
        sys.path.insert(0, str(folder))


def source_file(fn: Callable[..., Any]) -> Path | None:
    """The file that defines ``fn`` (a user's algorithm function), resolved; None where
    Python cannot tell (a builtin, a function made at run time)."""
    try:
        source = inspect.getsourcefile(fn)
    except TypeError:
        return None
    return None if source is None else Path(source).resolve()


def loaded_files() -> set[Path]:
    """The files of the user's algorithm functions this process has loaded
    (:func:`load`, or given to ``fsc.train``)."""
    return {f for f in map(source_file, _LOADED.values()) if f is not None}
