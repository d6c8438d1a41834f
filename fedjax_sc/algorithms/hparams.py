"""Hyperparameters that may be traced values.

The builders (:func:`~fedjax_sc.algorithms.fedavg.fedavg`, ``kteps``, ``proximal``,
``mmd_penalty``, ``gaussian_noise``, ``dp_sgd``, ``fedopt``, ``client_sgd``) take
``float | jax.Array`` for the values a population varies per member
(:mod:`fedjax_sc.core.population`): learning rates, momentum, loss weights, noise scales. A
builder called under ``jax.vmap`` receives them as tracers, so it must never branch in Python
on them: these helpers check a value only when it is concrete, and tell a concrete zero (a
shortcut is allowed: the program may skip the term) from a traced one (the term is computed
and multiplied by the value, which gives the same parameters when it is 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import numpy as np

Value = float | jax.Array
"""A hyperparameter: a Python number, or a scalar array (traced in a population)."""


def is_traced(value: object) -> bool:
    """Whether ``value`` is a JAX tracer (its number is unknown while the program is built)."""
    return isinstance(value, jax.core.Tracer)


def concrete(value: object) -> float | None:
    """``value`` as a Python float, or None when it is None or traced."""
    if value is None or is_traced(value):
        return None
    return float(value)


def is_zero(value: object) -> bool:
    """True only for a concrete 0 (a traced value may be anything: not zero)."""
    return concrete(value) == 0.0


def check(name: str, value: object, ok: Callable[[float], bool], what: str) -> None:
    """Raises ``ValueError("<name> must be <what>, got <value>")`` when ``value`` is concrete and
    ``ok`` rejects it (or it is not a finite scalar number: a string, a bool, nan, inf); a traced
    value or None is not checked (the caller checks the numbers it feeds a population)."""
    if value is None or is_traced(value):
        return
    if isinstance(value, (str, bytes, bool)) or not isinstance(
            value, (int, float, np.number, np.ndarray, jax.Array)) or np.ndim(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {value}")
    if not ok(number):
        raise ValueError(f"{name} must be {what}, got {value}")
