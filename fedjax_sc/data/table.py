"""A corpus of one's own: labelled texts in a table file, read with pyarrow into the per-client
corpora of the other readers (``{client: {"train": Corpus, "test": Corpus}}``), so that
:func:`fedjax_sc.data.scenes.build_scene` does the rest. Host-side only (numpy, pyarrow).

* Formats, by extension: ``.csv`` / ``.tsv`` (``pyarrow.csv``; ``.gz`` / ``.bz2`` too),
  ``.jsonl`` / ``.json`` / ``.ndjson`` (one JSON object per line, ``pyarrow.json``),
  ``.parquet`` / ``.pq`` (``pyarrow.parquet``). With the ``datasets`` package (extra
  ``fedjax_sc[hf]``): a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
  (``datasets.load_from_disk``; a DatasetDict's ``train`` and ``test`` splits), or
  ``hf:BUILDER:FILE`` (``datasets.load_dataset(BUILDER, data_files=FILE)``, BUILDER one of
  :data:`HF_BUILDERS`).
* Labels: the classes are the distinct values of the training rows' label column in sorted
  order (class c = ``label_names[c]``), so integer labels 0..C-1 keep their values and string
  labels are numbered alphabetically; C is their number.
* Clients: with a client column, one client per distinct value, sorted, each holding its rows
  in file order (flwr-datasets' ``NaturalIdPartitioner``); otherwise a partition of
  :mod:`fedjax_sc.data.partition` splits the rows into N clients.
* Test split: a second file of the same columns, a split column (``train`` / ``test``), a
  DatasetDict's ``test`` split, or else a fraction held out per client, keeping at least one
  row for training (a client of one row trains on it and has no test row): random rows, as
  ``datasets``' ``Dataset.train_test_split(test_size=fraction, seed=seed)`` holds them out,
  or (with a client column) each client's last rows in file order, a time-ordered split when
  the file is in time order (:data:`TEST_SPLITS`).
* Rows without text (null, empty or blank): refused, naming the row, unless ``empty_text``
  drops them or keeps them as empty texts (:data:`EMPTY_TEXT`).
* Cross-device shapes (with a client column): a client without test rows trains and has no
  Ag^k; test rows of a client that has no training rows are the *unseen* clients' rows
  (:attr:`TableCorpora.unseen`, one pooled corpus), evaluated apart.

Bad input is a one-line ``ValueError`` naming the file, the row (``path:line`` for CSV and
JSON lines, 1-based lines of the file; ``path: row i``, 0-based, for Parquet and datasets) and
the column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fedjax_sc.data import partition as partition_lib
from fedjax_sc.data import table_values
from fedjax_sc.data.corpus import Corpus
from fedjax_sc.data.table_files import (  # noqa: F401 (FORMATS, HF_BUILDERS: re-exported)
    FORMATS,
    HF_BUILDERS,
    MissingDatasetsError,
    Rows,
    read_rows,
)

DEFAULT_TEST_FRACTION = 0.2
"""Held out per client without a test file: FDU-MTL's own ratio (400 test reviews of 2,000
per domain) and flwr-datasets' examples' ``train_test_split(test_size=0.2)``."""
TEST_SPLITS = ("random", "last")
"""Which rows of a client a held-out fraction takes (:func:`read_table`'s ``test_split``):
random ones, or its last ones in file order."""
EMPTY_TEXT = ("refuse", "drop", "keep")
"""What a row without text (null, empty or blank) does (:func:`read_table`'s ``empty_text``):
``refuse`` the file, naming the row (the default: a missing text is more often a broken
export than a review); ``drop`` the row (counted and its first lines named in
:class:`TableCorpora`); ``keep`` it as an empty text, a sequence of padding, as FDU-MTL's
empty reviews are kept (counted in the corpus's ``num_empty``)."""
DROPPED_NAMED = 5
"""How many dropped rows :attr:`TableCorpora.dropped_rows` names."""


class TableCorpora(NamedTuple):
    """What :func:`read_table` returns.

    Attributes:
      corpora: ``{client: {"train": Corpus, "test": Corpus}}`` in client order.
      label_names: the label value of each class (class c = ``label_names[c]``).
      unseen: the test rows of clients without training rows (a client column only), pooled
        in file order, or None when there are none.
      num_dropped, dropped_rows: the rows without text that ``empty_text="drop"`` left out.
    """

    corpora: dict[str, dict[str, Corpus]]
    label_names: tuple[Any, ...]
    unseen: Corpus | None = None
    num_dropped: int = 0
    """Rows without text left out (``empty_text="drop"``), over every file read."""
    dropped_rows: tuple[str, ...] = ()
    """The first :data:`DROPPED_NAMED` of them, ``path:line`` (``path: row i`` for Parquet)."""




def _column(r: Rows, name: str, flag: str) -> pa.ChunkedArray:
    if name not in r.table.column_names:
        raise ValueError(f"{r.path}: no column {name!r} ({flag}); its columns: "
                         f"{', '.join(r.table.column_names)}")
    if r.table.column_names.count(name) > 1:
        raise ValueError(f"{r.path}: column {name!r} ({flag}) occurs "
                         f"{r.table.column_names.count(name)} times (its columns: "
                         f"{', '.join(r.table.column_names)}); rename all but one")
    col = r.table.column(name)
    if pa.types.is_dictionary(col.type):
        col = col.cast(col.type.value_type)
    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
            or pa.types.is_boolean(col.type) or pa.types.is_string(col.type)
            or pa.types.is_large_string(col.type)):
        raise ValueError(f"{r.path}: column {name!r} ({flag}) holds {col.type}; it needs "
                         f"strings, integers, numbers or booleans")
    return col


def _missing(col: pa.ChunkedArray) -> np.ndarray:
    """bool ``[n]``: null, NaN or an empty / blank string."""
    gone = pc.is_null(col, nan_is_null=True)
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        gone = pc.or_kleene(gone, pc.equal(pc.utf8_trim_whitespace(col), ""))
    return np.asarray(gone.to_numpy(zero_copy_only=False), bool)


def _empty_text(r: Rows, column: str, empty_text: str) -> tuple[Rows, int, list[str]]:
    """``r`` with its rows without text (:func:`_missing`) dropped or kept as ``""``
    (:data:`EMPTY_TEXT`), the number dropped and where the first ones were; ``refuse``
    leaves them to :func:`_check`."""
    if empty_text == "refuse" or column not in r.table.column_names:  # _check names it
        return r, 0, []
    col = _column(r, column, "--text-column")  # one column of a type that holds texts
    gone = _missing(col)
    if empty_text == "keep":
        text = pc.if_else(pa.array(gone), "", col.cast(pa.string()))
        table = r.table.set_column(r.table.column_names.index(column), column, text)
        return Rows(table, r.path, r.kind, r.rows), 0, []
    bad = np.flatnonzero(gone)
    return r.take(~gone), int(bad.size), [r.where(int(i)) for i in bad[:DROPPED_NAMED]]


def _check(r: Rows, columns: dict[str, tuple[str, str]],
           empty_text: str = "refuse") -> dict[str, pa.ChunkedArray]:
    """The named columns of ``r``; the first row with a missing value in any of them (file
    order) is an error, but for an empty text kept (``empty_text="keep"``). ``columns``:
    ``{role: (column, flag)}``."""
    cols = {role: _column(r, name, flag) for role, (name, flag) in columns.items()}
    first = None
    for role, col in cols.items():
        if role == "text" and empty_text == "keep":
            continue
        bad = np.flatnonzero(_missing(col))
        if bad.size and (first is None or bad[0] < first[0]):
            first = (bad[0], role)
    if first is not None:
        i, role = first
        what = {"text": "no text (empty or missing)", "label": "no label",
                "client": "no client", "split": "no split"}[role]
        raise ValueError(f"{r.where(i)}: column {columns[role][0]!r}: {what}; every row "
                         f"needs one" + (" (or --empty-text drop / keep)" if role == "text"
                                         else ""))
    label = cols.get("label")
    if label is not None and pa.types.is_floating(label.type):  # inf would become a class
        inf = np.flatnonzero(~np.isfinite(np.asarray(label.to_numpy(zero_copy_only=False),
                                                     np.float64)))
        if inf.size:
            raise ValueError(f"{r.where(inf[0])}: column {columns['label'][0]!r}: label "
                             f"{label[int(inf[0])].as_py()} is not a finite number")
    return cols


def _index(col: pa.ChunkedArray, values: Sequence, r: Rows, column: str, what: str,
           other: str, missing_ok: bool = False) -> np.ndarray:
    """int ``[n]``: each row's position in ``values``; a value not in it is an error, or -1
    with ``missing_ok``."""
    try:
        value_set = pa.array(values)
    except pa.ArrowException as e:
        raise ValueError(f"{r.path}: column {column!r}: {other} are not all of one type "
                         f"({e})") from None
    given = col.type
    if table_values.kind_of(given) != table_values.kind_of(value_set.type) and col.null_count < len(col):
        i = int(np.flatnonzero(pc.is_valid(col).to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"{r.where(i)}: column {column!r}: {what} {col[i].as_py()!r} is of "
                         f"another kind than the {what}s of {other} (this file's {what}s are "
                         f"{given}, those {value_set.type}): write them one way")
    try:
        col = col.cast(value_set.type)
    except pa.ArrowException:
        pass
    try:
        ids = pc.index_in(col, value_set=value_set)
    except pa.ArrowException:  # ArrowTypeError: e.g. strings against numbers
        raise ValueError(f"{r.path}: column {column!r} holds {col.type}, the {what}s of "
                         f"{other} are {value_set.type}") from None
    ids = np.asarray(ids.to_numpy(zero_copy_only=False), np.float64)
    bad = np.flatnonzero(np.isnan(ids))
    if missing_ok:
        return np.where(np.isnan(ids), -1, ids).astype(np.int64)
    if bad.size:
        types = ("" if given == value_set.type else
                 f" (this file's {what}s are {given}, those {value_set.type})")
        raise ValueError(f"{r.where(bad[0])}: column {column!r}: {what} "
                         f"{col[int(bad[0])].as_py()!r} does not occur in {other}{types}")
    return ids.astype(np.int64)


def _corpus(texts: list[str], labels: np.ndarray, source: str) -> Corpus:
    return Corpus(texts=tuple(texts), labels=np.asarray(labels, np.int32).reshape(len(texts)),
                  source=source, num_empty=sum(not t.split() for t in texts),
                  num_latin1_lines=0)


def check_test_split(split: str | None, client_column: str | None) -> None:
    """Checks ``--test-split`` (None: ``random``).

    Raises:
      ValueError: a value not in :data:`TEST_SPLITS`, or ``last`` without a client column (a
        partition's clients hold their rows shuffled: no file order is left).
    """
    if split is not None and split not in TEST_SPLITS:
        raise ValueError(f"--test-split {split!r}: choose from {', '.join(TEST_SPLITS)}")
    if split == "last" and client_column is None:
        raise ValueError("--test-split last holds out each client's last rows in file order: "
                         "it needs --client-column (a partition shuffles the rows)")


def check_empty_text(empty_text: str) -> None:
    """Checks ``--empty-text``.

    Raises:
      ValueError: a value not in :data:`EMPTY_TEXT`.
    """
    if empty_text not in EMPTY_TEXT:
        raise ValueError(f"--empty-text must be one of {', '.join(EMPTY_TEXT)}, got "
                         f"{empty_text!r}")


def _hold_out(corpus: Corpus, fraction: float, seed: int,
              split: str | None = None) -> dict[str, Corpus]:
    """One client's ``min(ceil(fraction * n), n - 1)`` held-out rows of its n. ``random``
    (None): ``datasets.Dataset.train_test_split(test_size=fraction, seed=seed)`` (the i-th
    client in client order: ``seed`` = ``--partition-seed`` + i), a
    ``default_rng(seed)`` permutation, its first rows the test split, the rest the training
    split, both in the permuted order; ``last``: the client's last rows the test split, those
    before them the training split, both in file order. At least one row trains (LEAF's
    per-user split keeps one too): a client of one row has no test row."""
    n = len(corpus)
    n_test = min(math.ceil(fraction * n), n - 1)
    if split == "last":
        order, what = np.roll(np.arange(n), n_test), f"last {fraction}"  # the last first
    else:
        order, what = np.random.default_rng(seed).permutation(n), f"{fraction}"
    return {s: _corpus([corpus.texts[i] for i in idx], corpus.labels[idx],
                       f"{corpus.source} ({s}; {what} held out)")
            for s, idx in (("train", order[n_test:]), ("test", order[:n_test]))}


def read_table(data: str, *, text_column: str, label_column: str,
               client_column: str | None = None, split_column: str | None = None,
               test_data: str | None = None, test_fraction: float | None = None,
               test_split: str | None = None, label_names: Sequence | None = None,
               partition: str = "natural", num_clients: int | None = None,
               alpha: float | None = None,
               beta: float | None = None, seed: int = 0,
               min_partition_size: int = partition_lib.flwr_partition.MIN_PARTITION_SIZE,
               self_balancing: bool = False, empty_text: str = "refuse") -> TableCorpora:
    """Reads a table scene's corpora.

    Args:
      data: a CSV / TSV / JSON-lines / Parquet file, a ``datasets`` folder or
        ``hf:BUILDER:FILE`` (see the module docstring).
      text_column, label_column: the columns of the texts and the labels.
      client_column: one client per distinct value (sorted), its rows in file order
        (flwr-datasets' ``NaturalIdPartitioner``); needs ``partition="natural"``.
      split_column: a column of ``train`` / ``test`` values splitting ``data``'s rows.
      test_data: a file with the same columns: the test split.
      test_fraction: without a test split, the fraction of each client held out
        (default :data:`DEFAULT_TEST_FRACTION`), seeded by ``seed``.
      test_split: which rows ``test_fraction`` takes (:data:`TEST_SPLITS`): ``random``
        (None), or ``last``, each client's last rows in file order (needs ``client_column``).
      label_names: the classes, in order (every label must be one of them); None: the
        training labels' distinct values, sorted.
      partition, num_clients, alpha, beta, min_partition_size, self_balancing: without a client
        column, how the rows are split into N clients
        (:func:`fedjax_sc.data.partition.partition_clients`; the test split alike).
      seed: the partition seed: partitions and held-out examples.
      empty_text: what a row without text does, in every file (:data:`EMPTY_TEXT`):
        ``refuse`` (an error naming it), ``drop`` or ``keep`` (as an empty text).

    Returns:
      A :class:`TableCorpora`; labels int32 in ``[0, C)``, C = ``len(label_names)``.

    Raises:
      ValueError: one line naming file, row and column: an unknown extension, a file pyarrow
        or ``datasets`` cannot read, a missing column (its columns listed) or one named twice,
        a row without text (null, empty or blank; with ``empty_text="refuse"``), label,
        client or split value, an ``empty_text`` not in :data:`EMPTY_TEXT`, a split
        value other than ``train`` / ``test``, a test label absent from the training rows, a
        test label or client of another type than the training rows', ``label_names`` of
        mixed types, one class only, too few rows for ``num_clients`` (a partition), a
        ``test_fraction`` outside (0, 1); also conflicting arguments
        (:func:`check_test_split`). A test client absent from the training rows is not an
        error: its rows are pooled into ``TableCorpora.unseen``.
      FileNotFoundError: ``data`` or ``test_data`` missing.
      MissingDatasetsError: (an ImportError) a datasets folder or ``hf:`` without the
        ``datasets`` package.
    """
    if (client_column is None) == (partition == "natural"):
        raise ValueError("--scene table: give --client-column (the natural partition) or a "
                         "--partition other than natural with --num-clients, not both")
    if split_column is not None and test_data is not None:
        raise ValueError("--split-column and --test-data: give one test split")
    check_test_split(test_split, client_column)
    check_empty_text(empty_text)
    columns = {"text": (text_column, "--text-column"), "label": (label_column, "--label-column")}
    if client_column is not None:
        columns["client"] = (client_column, "--client-column")
    dropped: list[str] = []
    num_dropped = 0

    def read(spec: str, as_text: Sequence[str] = ()) -> dict[str, Rows]:
        """``spec``'s rows, its CSV labels and clients typed as written (but ``as_text``,
        strings in the training rows), rows without text dropped or kept as ``""``."""
        nonlocal num_dropped
        parts = {}
        columns = [label_column] + ([client_column] if client_column else [])
        typed = [c for c in columns if c not in as_text]
        for name, r in read_rows(spec, text_column, columns).items():
            parts[name], n, where = _empty_text(table_values.as_written(r, typed, [label_column]),
                                                text_column, empty_text)
            num_dropped += n
            dropped.extend(where)
        return parts

    main = read(data)
    if len(main) > 1 or "" not in main:  # a DatasetDict: its train and test splits
        if "train" not in main:
            raise ValueError(f"{data}: a DatasetDict without a 'train' split (splits: "
                             f"{', '.join(main)})")
        if "test" in main and (split_column or test_data):
            raise ValueError(f"{data} has a 'test' split: --split-column and --test-data "
                             f"do not apply")
        train, test = main["train"], main.get("test")
    else:
        train, test = main[""], None
    if split_column is not None:  # every row checked in file order, then split
        split = _check(train, {**columns, "split": (split_column, "--split-column")},
                       empty_text)["split"]
        ids = _index(split, ["train", "test"], train, split_column, "split value",
                     "('train', 'test')")
        train, test = train.take(ids == 0), train.take(ids == 1)
    elif test_data is not None:
        strings = [c for c in (label_column, client_column)  # ids as written in training
                   if c in train.table.column_names
                   and table_values.kind_of(train.table.column(c).type) == "string"]
        parts = read(test_data, strings)
        test = parts.get("", parts.get("test"))
        if test is None:
            raise ValueError(f"{test_data}: a DatasetDict without a 'test' split (splits: "
                             f"{', '.join(parts)})")
    splits = {"train": train} if test is None else {"train": train, "test": test}
    for s, r in splits.items():
        if not r.table.num_rows:
            raise ValueError(f"{r.path}: no {s} rows")
    cols = {s: _check(r, columns, empty_text) for s, r in splits.items()}
    for s, r in splits.items():
        for role in ("label", "client"):
            if role in cols[s]:
                table_values.refuse_blank_variants(cols[s][role], r, columns[role][0],
                                                   case=role == "label")

    train_labels = cols["train"]["label"]
    if label_names is not None and len(set(map(repr, label_names))) < len(label_names):
        twice = next(v for v in label_names if list(label_names).count(v) > 1)
        raise ValueError(f"label_names names {twice!r} twice ({list(label_names)}): a class "
                         f"no row could take")
    classes = (list(label_names) if label_names is not None
               else sorted(pc.unique(train_labels).to_pylist()))
    if label_names is None:
        table_values.refuse_mixed_labels(train_labels, classes, train, label_column)
    if len(classes) < 2:
        raise ValueError(f"{train.path}: column {label_column!r} holds one class only "
                         f"({', '.join(map(repr, classes))}); a classifier needs two or more")
    labels = {s: _index(cols[s]["label"], classes, r, label_column, "label",
                        "the classes " + (f"{classes}" if label_names is not None else
                                          f"of the training rows of {train.path}"))
              for s, r in splits.items()}
    texts = {s: cols[s]["text"].cast(pa.string()).to_pylist() for s in splits}

    unseen = None
    if client_column is None:
        pooled = {"pooled": {s: _corpus(texts[s], labels[s], r.path) for s, r in splits.items()}}
        corpora = partition_lib.partition_clients(
            pooled, partition, num_clients, len(classes), alpha=alpha, beta=beta, seed=seed,
            min_partition_size=min_partition_size, self_balancing=self_balancing)
    else:
        values = sorted(pc.unique(cols["train"]["client"]).to_pylist())
        corpora = {str(v): {} for v in values}
        for s, r in splits.items():
            ids = _index(cols[s]["client"], values, r, client_column, "client",
                         f"the training rows of {train.path}", missing_ok=s == "test")
            order = np.argsort(ids, kind="stable")  # each client's rows, in file order
            bounds = np.searchsorted(ids[order], np.arange(-1, len(values) + 1))
            for j, v in enumerate(values):
                idx = order[bounds[j + 1]:bounds[j + 2]]
                corpora[str(v)][s] = _corpus([texts[s][i] for i in idx], labels[s][idx],
                                             f"{r.path} [{client_column}={v}]")
            gone = order[bounds[0]:bounds[1]]
            if s == "test" and gone.size:
                unseen = _corpus([texts[s][i] for i in gone], labels[s][gone],
                                 f"{r.path} [{client_column}: no training rows]")
    if test is None:
        fraction = DEFAULT_TEST_FRACTION if test_fraction is None else test_fraction
        if not 0 < fraction < 1:
            raise ValueError(f"--test-fraction must lie in (0, 1), got {fraction}")
        # client i holds out with seed + i: clients of one size draw independent positions
        corpora = {c: _hold_out(parts["train"], fraction, seed + i, test_split)
                   for i, (c, parts) in enumerate(corpora.items())}
    elif test_fraction is not None or test_split is not None:
        raise ValueError("--test-fraction and --test-split: the test split is given "
                         "(--test-data, --split-column or a DatasetDict's 'test')")
    return TableCorpora(corpora, tuple(classes), unseen, num_dropped,
                        tuple(dropped[:DROPPED_NAMED]))
