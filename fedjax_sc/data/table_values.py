"""What a table file's label and client values mean (:mod:`fedjax_sc.data.table`): a CSV's
values typed as they are written, and the values refused because they would split or merge
classes or clients without a word (``pos`` and ``pos ``, ``1`` and ``true``, ``1.0`` and
``1.00``, numbers beside words, a test file's values of another kind). Host-side only."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fedjax_sc.data.table_files import Rows

_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
"""An integer as it is written canonically: ``7``, not ``007`` or ``+7``."""
_NUMBER = re.compile(r"[-+]?(([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?|inf|nan)",
                     re.IGNORECASE)
"""A decimal number (``0.5``, ``1e-3``, ``inf``, ``nan``; not ``1_000``): an infinite label is
then refused as such, a NaN one as missing."""


def as_written(r: Rows, columns: Sequence[str], decimals: Sequence[str] = ()) -> Rows:
    """A CSV's label and client ``columns``, read as strings, typed where that loses nothing:
    integers when every value is an integer written canonically (so labels 0..C-1 and numeric
    client ids keep their values and their order); for the ``decimals`` columns (the labels),
    numbers when every value is one and no two spellings are the same number; else the
    strings as written (``007`` and ``7`` two clients; ``1`` and ``true`` not one class, as
    pyarrow's inference would make them).

    Raises:
      ValueError: two spellings of one number (``1.0`` and ``1.00``), naming both rows.
    """
    if r.kind not in ("csv", "tsv"):
        return r
    table = r.table
    for name in dict.fromkeys(c for c in columns if c in table.column_names):
        col = table.column(name)
        if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
            continue
        values = col.to_pylist()
        given = [v.strip() for v in values if v is not None and v.strip()]
        if not given:
            continue
        if all(_INTEGER.fullmatch(v) for v in given):
            typed = pa.array([int(v) if v and v.strip() else None for v in values], pa.int64())
        else:
            if name not in decimals or not all(_NUMBER.fullmatch(v) for v in given):
                continue
            numbers = {v: float(v) for v in set(given)}
            same: dict[float, tuple[str, int]] = {}  # a number's first spelling, its row
            for i, v in enumerate(values):
                if v is None or not v.strip():
                    continue
                first = same.setdefault(numbers[v.strip()], (v.strip(), i))
                if first[0] != v.strip():
                    raise ValueError(f"{r.where(i)}: column {name!r}: {v.strip()!r} is the "
                                     f"number {first[0]!r} of {r.where(first[1])} written "
                                     f"otherwise; write it one way")
            typed = pa.array([None if v is None or not v.strip() else numbers[v.strip()]
                              for v in values], pa.float64())
        table = table.set_column(table.column_names.index(name), name, typed)
    return Rows(table, r.path, r.kind, r.rows)


def refuse_blank_variants(col: pa.ChunkedArray, r: Rows, column: str,
                          case: bool = False) -> None:
    """Refuses string values that differ only by spaces around them (``pos`` and ``pos ``),
    or with ``case`` (the labels) by upper and lower case too (``Positive`` and
    ``positive``): each would be a class, or a client, of its own.

    Raises:
      ValueError: naming the row of the second spelling and the first.
    """
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        return
    key = (lambda v: v.strip().casefold()) if case else (lambda v: v.strip())  # noqa: E731
    spellings: dict[str, int] = {}
    for v in pc.unique(col).to_pylist():  # the distinct values first: one pass in Arrow
        if v is not None:
            spellings[key(v)] = spellings.get(key(v), 0) + 1
    if all(n == 1 for n in spellings.values()):
        return
    seen: dict[str, tuple[str, int]] = {}
    for i, v in enumerate(col.to_pylist()):  # a clash: the rows of its two spellings
        if v is None:
            continue
        first = seen.setdefault(key(v), (v, i))
        if first[0] != v:
            how = ("spaces around them" if first[0].strip() == v.strip()
                   else "case" + (" and spaces" if first[0] != first[0].strip()
                                  or v != v.strip() else ""))
            raise ValueError(f"{r.where(i)}: column {column!r}: {v!r} and {first[0]!r} "
                             f"({r.where(first[1])}) differ only by {how}; each would be a "
                             f"value of its own: write it one way")


def refuse_mixed_labels(col: pa.ChunkedArray, classes: list, r: Rows, column: str) -> None:
    """Refuses string labels of which some read as integers and some do not (``0``, ``1``,
    ``2`` and one ``pos``): each would be a class of its own, C one too many, without a word.

    Raises:
      ValueError: naming the first row of the fewer kind (``path:line``) and the others.
    """
    numbers = [c for c in classes if isinstance(c, str) and _NUMBER.fullmatch(c.strip())]
    if not numbers or len(numbers) == len(classes):
        return
    words = [c for c in classes if c not in numbers]
    odd, rest = (words, numbers) if len(words) <= len(numbers) else (numbers, words)
    first = int(np.flatnonzero(pc.is_in(col, value_set=pa.array(odd)).to_numpy(
        zero_copy_only=False))[0])
    raise ValueError(f"{r.where(first)}: column {column!r}: label {col[first].as_py()!r} "
                     f"among labels that are {'numbers' if rest is numbers else 'words'} "
                     f"({', '.join(map(repr, rest[:4]))}{', ...' if len(rest) > 4 else ''}): "
                     f"each would be a class of its own; write every label one way")


def kind_of(t: pa.DataType) -> str:
    """``string``, ``bool`` or ``number``: the kinds of values that do not mix in a column."""
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "number"
    if pa.types.is_dictionary(t):
        return kind_of(t.value_type)
    return "string" if (pa.types.is_string(t) or pa.types.is_large_string(t)) else str(t)
