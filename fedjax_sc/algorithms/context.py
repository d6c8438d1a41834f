"""What the run hands a researcher's own algorithm: ``fedjax-sc train --algorithm
path/to/file.py:FUNCTION`` (or ``package.module:FUNCTION``) calls ``FUNCTION(context)`` with a
:class:`BuildContext` and trains the :class:`~fedjax_sc.algorithms.base.Algorithm` it returns
through the whole run: run folder, metrics, checkpoints and resume, tracking, populations
(``--seeds``, ``--grid lr=...``) and the report. docs/own-algorithm.md walks through one.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import optax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.models.text_classifier import TextClassifier


class BuildContext(NamedTuple):
    """The run's settings an algorithm is built from.

    Attributes:
      vocab_size, num_classes: the scene's V (with ``<pad>`` and ``<unk>``) and C.
      embed_dim, hidden, mlp_hidden, furl_dim, dtype: the model's d, BiGRU width per
        direction, MLP width, FURL user vector size and compute dtype (``--embed-dim``...).
      num_clients: N, the clients of the federation (a server mean over every client).
      learning_rate, momentum, embedding_learning_rate: the client SGD (``--lr``,
        ``--momentum``, ``--embedding-lr``); in a population (``--grid lr=...``) the varied
        ones are traced scalars: use them in arithmetic, never in a Python ``if``.
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

    def text_classifier(self, **overrides: Any) -> TextClassifier:
        """The paper's Embedding-BiGRU-MLP classifier at the run's sizes (``overrides``
        replace any field)."""
        dims = dict(vocab_size=self.vocab_size, embed_dim=self.embed_dim, hidden=self.hidden,
                    mlp_hidden=self.mlp_hidden, num_classes=self.num_classes,
                    furl_dim=self.furl_dim, dtype=self.dtype)
        return TextClassifier(**{**dims, **overrides})

    def client_optimizer(self) -> optax.GradientTransformation:
        """The run's client SGD (:func:`~fedjax_sc.algorithms.optimizers.client_sgd`)."""
        return client_sgd(self.learning_rate, self.momentum, self.embedding_learning_rate)


def is_spec(name: str) -> bool:
    """Whether an ``--algorithm`` value names a user's function (``FILE.py:F``, ``mod:F``)."""
    return isinstance(name, str) and ":" in name


_LOADED: dict[str, Callable[[BuildContext], Any]] = {}


def load(spec: str) -> Callable[[BuildContext], Any]:
    """The function ``spec`` names: ``path/to/file.py:FUNCTION`` (a file, loaded once per
    process under a private module name) or ``package.module:FUNCTION`` (imported).

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
            name = f"fedjax_sc_user_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # dataclasses and pickling look modules up by name
            module_spec.loader.exec_module(module)
        else:
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
