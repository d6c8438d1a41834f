"""The table scene (``--scene table``: a corpus of one's own, :mod:`fedjax_sc.data.table`) in
a run's configuration: the checks of its :class:`~fedjax_sc.run.config.TrainConfig` fields
(:func:`check`, from ``TrainConfig.resolved``), its corpora (:func:`load`, from
``load_scene``) and the files the run's fingerprint covers (:func:`files`, from
``corpus_files``), and how an older ``config.json`` reads (:func:`saved_defaults`). Takes any
object with TrainConfig's fields, so that the configuration module stays the one place they
are declared."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from fedjax_sc.run.plumbing.flags import flag

FIELDS = ("data", "test_data", "text_column", "label_column", "client_column", "split_column",
          "test_fraction", "test_split", "empty_text", "label_names", "tokenizer")
"""The fields that only ``--scene table`` takes."""
OLD_TOKENIZER = "whitespace"
"""The tokeniser of a table run whose ``config.json`` has no ``tokenizer``: the only one
before ``--tokenizer`` existed, so that such a run is rerun or resumed as it was trained."""


class MissingPyarrowError(ImportError, RuntimeError):
    """``--scene table`` without pyarrow (extra ``fedjax_sc[table]``)."""


def _table():
    """:mod:`fedjax_sc.data.table`, imported when a table scene is used (pyarrow is an
    extra, so that the other scenes do not need it)."""
    try:
        from fedjax_sc.data import table
    except ImportError as e:
        raise MissingPyarrowError(f"--scene table reads its files with pyarrow ({e}): pip "
                                  f"install 'fedjax_sc[table]'") from e
    return table


def _resolve(spec: str) -> str:
    """One spelling of a data path in config.json (``hf:BUILDER:FILE``: of FILE)."""
    if spec.startswith("hf:"):
        builder, _, path = spec[3:].partition(":")
        return f"hf:{builder}:{Path(path).expanduser().resolve()}"
    return str(Path(spec).expanduser().resolve())


def saved_defaults(saved: dict[str, Any]) -> dict[str, Any]:
    """The values of the fields that a saved ``config.json`` lacks and that its version did
    not take from :class:`~fedjax_sc.run.config.TrainConfig`'s defaults, for a table run
    written before the flag existed: ``tokenizer`` :data:`OLD_TOKENIZER`; ``test_split``
    ``random`` where a fraction was held out (the only split then); ``empty_text``
    ``refuse`` (the only behaviour then)."""
    if saved.get("scene") != "table":
        return {}
    old = {"tokenizer": OLD_TOKENIZER, "empty_text": "refuse"}
    if saved.get("test_fraction") is not None:
        old["test_split"] = "random"
    return {k: v for k, v in old.items() if k not in saved}


def _tokenize():
    """:mod:`fedjax_sc.data.tokenize` (its ``tokenizers`` imported when it is used)."""
    from fedjax_sc.data import tokenize
    return tokenize


def _tokenizer(spec: str | None) -> str:
    """``--tokenizer`` checked: the default for None, a tokenizer.json's path resolved and
    read (one line naming the flag and the file when it is missing or unreadable)."""
    tokenize = _tokenize()
    spec = tokenize.DEFAULT if spec is None else spec
    if spec == "basic":
        tokenize.basic()  # a missing tokenizers package, before any data is read
    elif spec not in tokenize.TOKENIZERS:
        tokenize.load_file(spec)
        spec = str(Path(spec).expanduser().resolve())
    return spec


def check(c: Any) -> dict[str, Any]:
    """The table fields of config ``c`` checked; returns the fields to replace (paths
    resolved; ``tokenizer`` :data:`fedjax_sc.data.tokenize.DEFAULT` when unset;
    ``test_fraction`` filled with :data:`fedjax_sc.data.table.DEFAULT_TEST_FRACTION` and
    ``test_split`` with ``random`` where no test split is named: no ``test_data``,
    ``split_column`` or folder that may hold a DatasetDict's ``test``; ``empty_text`` with
    ``refuse`` when unset).

    Raises:
      MissingPyarrowError: ``--scene table`` without pyarrow; MissingTokenizersError:
        ``--tokenizer basic`` or a tokenizer.json without ``tokenizers``.
      FileNotFoundError: a missing tokenizer.json.
      ValueError: a table field for another scene; for ``--scene table``: a missing
        ``--data``, ``--text-column`` or ``--label-column``, ``--data-dir``, ``--domains`` or
        ``--dev-holdout``, a client column with a partition other than natural or none
        without one, two test splits, a test fraction outside (0, 1), a ``test_split`` not in
        :data:`fedjax_sc.data.table.TEST_SPLITS` or ``last`` without a client column, an
        ``empty_text`` not in :data:`fedjax_sc.data.table.EMPTY_TEXT`, a tokenizer.json that
        ``tokenizers`` cannot read.
    """
    if c.scene != "table":
        given = [f for f in FIELDS if getattr(c, f) is not None]
        if given:
            raise ValueError(f"{flag(given[0])} applies to --scene table only")
        return {}
    for f in ("data", "text_column", "label_column"):
        if not getattr(c, f):
            raise ValueError(f"--scene table needs {flag(f)}")
    if c.data_dir is not None or c.dev_holdout:
        raise ValueError("--data-dir and --dev-holdout apply to fdu and iyy; --scene table "
                         "reads --data")
    if c.client_column is not None and c.partition != "natural":
        raise ValueError(f"--client-column gives one client per value (the natural "
                         f"partition); leave it out with --partition {c.partition}")
    if c.client_column is None and c.partition == "natural":
        raise ValueError("--scene table without --client-column: choose how to split the rows "
                         "into clients, e.g. --partition iid --num-clients 10, or --partition "
                         "dirichlet --num-clients 10 --alpha 0.5")
    if c.split_column is not None and c.test_data is not None:
        raise ValueError("--split-column and --test-data: give one test split")
    if c.allow_empty_clients and c.client_column is not None:
        raise ValueError("--allow-empty-clients does nothing with --client-column: a client "
                         "without test rows trains anyway (no Ag^k), and test rows of a "
                         "client without training rows are scored apart (Ag_unseen); leave "
                         "it out")
    fraction, split = c.test_fraction, c.test_split
    if c.split_column is not None or c.test_data is not None:
        if fraction is not None or split is not None:
            given = "--test-fraction" if fraction is not None else "--test-split"
            raise ValueError(f"{given} applies without --test-data and --split-column")
    else:
        if fraction is None and not Path(c.data).is_dir():
            fraction = _table().DEFAULT_TEST_FRACTION
        if fraction is not None and not 0 < fraction < 1:
            raise ValueError(f"--test-fraction must lie in (0, 1), got {fraction}")
        _table().check_test_split(split, c.client_column)
        split = "random" if split is None and fraction is not None else split
    empty = "refuse" if c.empty_text is None else c.empty_text
    _table().check_empty_text(empty)
    return {"data": _resolve(c.data), "test_fraction": fraction, "test_split": split,
            "empty_text": empty,
            "test_data": None if c.test_data is None else _resolve(c.test_data),
            "tokenizer": _tokenizer(c.tokenizer)}


def load(c: Any):
    """The corpora and class values of a resolved table config, a
    :class:`~fedjax_sc.data.table.TableCorpora` (:func:`~fedjax_sc.data.table.read_table`;
    ``c.label_names``, when set, fixes the classes and their order), each text as the words
    of ``c.tokenizer`` (:func:`fedjax_sc.data.tokenize.tokenizer`) joined by spaces."""
    got = _table().read_table(
        c.data, text_column=c.text_column, label_column=c.label_column,
        client_column=c.client_column, split_column=c.split_column, test_data=c.test_data,
        test_fraction=c.test_fraction, test_split=c.test_split, label_names=c.label_names,
        partition=c.partition, num_clients=c.num_clients, alpha=c.alpha, beta=c.beta,
        seed=c.partition_seed, min_partition_size=c.min_partition_size,
        self_balancing=c.self_balancing, empty_text=c.empty_text or "refuse")
    if c.tokenizer == OLD_TOKENIZER:
        return got
    words = _tokenize().tokenizer(c.tokenizer)

    def tokenized(corpus):
        texts = tuple(words(corpus.texts))
        return dataclasses.replace(corpus, texts=texts,
                                   num_empty=sum(not t.split() for t in texts))

    corpora = {client: {split: tokenized(corpus) for split, corpus in parts.items()}
               for client, parts in got.corpora.items()}
    unseen = None if got.unseen is None else tokenized(got.unseen)  # as every client's test
    return got._replace(corpora=corpora, unseen=unseen)


def files(c: Any) -> list[Path]:
    """The files a resolved table config reads: ``--data`` and ``--test-data`` (every file of
    a datasets folder; the FILE of ``hf:BUILDER:FILE``), and a ``--tokenizer`` file."""
    out = []
    for spec in (c.data, c.test_data):
        if spec is None:
            continue
        path = Path(spec[3:].partition(":")[2] if spec.startswith("hf:") else spec)
        out += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    if c.tokenizer is not None and c.tokenizer not in _tokenize().TOKENIZERS:
        out.append(Path(c.tokenizer))
    return out


def notes(got: Any) -> tuple[str, ...]:
    """What the run's log says of a :class:`~fedjax_sc.data.table.TableCorpora` (as
    :func:`load` returns it) beyond its sizes: the rows ``--empty-text drop`` left out,
    counted and the first ones named; the rows left without a word (``--empty-text keep``, or
    a text the tokenizer makes nothing of), which train and test as all-padding sequences."""
    out = []
    if got.num_dropped:
        more = got.num_dropped - len(got.dropped_rows)
        rows = "row" if got.num_dropped == 1 else "rows"
        out.append(f"--empty-text drop: {got.num_dropped:,} {rows} without text left out ("
                   + ", ".join(got.dropped_rows) + (f", and {more:,} more" if more else "")
                   + ")")
    corpora = [c for parts in got.corpora.values() for c in parts.values()]
    empty = sum(c.num_empty for c in corpora + ([got.unseen] if got.unseen else []))
    if empty:
        out.append(f"{empty:,} {'row' if empty == 1 else 'rows'} without a word (an empty "
                   f"text kept, or one the tokenizer "
                   f"makes nothing of): each an all-padding sequence")
    return tuple(out)
