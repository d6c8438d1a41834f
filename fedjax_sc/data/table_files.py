"""Reading a table file (CSV, TSV, JSON lines, Parquet) or a ``datasets`` folder into pyarrow
rows that remember their place in the file, so that an error names ``path:line``
(:mod:`fedjax_sc.data.table_lines` counts the lines). :mod:`fedjax_sc.data.table` makes
corpora of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa

from fedjax_sc.data import table_lines

FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "json", ".json": "json", ".ndjson": "json",
           ".parquet": "parquet", ".pq": "parquet"}
"""File extension -> format (``.gz`` / ``.bz2`` after a CSV/TSV/JSON one: compressed)."""
HF_BUILDERS = ("csv", "json", "parquet", "arrow")
"""``datasets``' packaged builders that ``hf:BUILDER:FILE`` may name (local files only)."""


class MissingDatasetsError(ImportError, RuntimeError):
    """A datasets folder or ``hf:BUILDER:FILE`` without the ``datasets`` package."""


@dataclasses.dataclass(frozen=True)
class Rows:
    """Rows of one file: ``table``'s row i is the file's row ``rows[i]`` (0-based, data rows)."""

    table: pa.Table
    path: str
    kind: str  # csv | tsv | json | parquet | hf
    rows: np.ndarray

    def where(self, i: int) -> str:
        """``path:line`` of row i (CSV, JSON lines), else ``path: row k``."""
        row = int(self.rows[i])
        if self.kind in ("csv", "tsv"):
            return f"{self.path}:{table_lines.csv_line(self.path, row, self.kind)}"
        if self.kind == "json":
            return f"{self.path}:{table_lines.json_line(self.path, row)}"
        return f"{self.path}: row {row}"

    def take(self, mask: np.ndarray) -> Rows:
        idx = np.flatnonzero(mask)
        return Rows(self.table.take(idx), self.path, self.kind, self.rows[idx])


def _kind(path: str) -> str:
    name = Path(path).name.lower()
    for packed in (".gz", ".bz2"):
        name = name.removesuffix(packed)
    kind = FORMATS.get(Path(name).suffix)
    if kind is None or (kind == "parquet" and name != Path(path).name.lower()):
        raise ValueError(f"{path}: unknown extension {''.join(Path(path).suffixes)!r}; use "
                         f".csv, .tsv, .jsonl, .json or .parquet (.gz or .bz2 after a CSV or "
                         f"JSON one), a datasets folder, or hf:BUILDER:FILE")
    return kind


def _read_file(path: str, text_column: str, as_written: Sequence[str] = ()) -> Rows:
    """One CSV / TSV / JSON-lines / Parquet file as a pyarrow table (in a CSV the text column
    and the ``as_written`` columns read as strings, so that ``NA`` or ``123`` stay texts and
    ``007`` stays ``007``)."""
    import pyarrow.csv
    import pyarrow.json
    import pyarrow.parquet
    kind = _kind(path)
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} not found")
    # pyarrow tells a compressed file by its extension in lower case only
    packed = {".gz": "gzip", ".bz2": "bz2"}.get(Path(path).suffix.lower())
    source = path
    try:
        if packed:
            source = pa.input_stream(path, compression=packed)
        if kind in ("csv", "tsv"):
            table = pyarrow.csv.read_csv(
                source, parse_options=pyarrow.csv.ParseOptions(
                    delimiter="\t" if kind == "tsv" else ",", newlines_in_values=True),
                convert_options=pyarrow.csv.ConvertOptions(
                    column_types={c: pa.string() for c in (text_column, *as_written)}))
        elif kind == "json":
            table = pyarrow.json.read_json(source)
        else:
            table = pyarrow.parquet.read_table(path)
        if kind != "parquet":
            # pyarrow's JSON reader takes bytes that are not UTF-8 into its strings
            table.validate(full=True)
    except (pa.ArrowException, OSError) as e:  # ArrowInvalid, ArrowTypeError, ...
        raise ValueError(table_lines.read_error(path, kind, e)) from None
    finally:
        if source is not path:
            source.close()
    if kind == "json":  # pyarrow reads two objects on one line as two rows
        crowded = table_lines.objects_per_line(path, table.num_rows)
        if crowded:
            raise ValueError(crowded)
    if kind in ("csv", "tsv"):  # pyarrow reads a stray quote on, into the next lines
        stray = table_lines.stray_quote(path, kind)
        if stray:
            raise ValueError(stray)
    return Rows(table, path, kind, np.arange(table.num_rows))


def _read_hf(spec: str) -> dict[str, Rows]:
    """A ``datasets`` folder (``{split: rows}``, ``{"": rows}`` for one Dataset) or
    ``hf:BUILDER:FILE`` (``{"": rows}``)."""
    try:
        import datasets
    except ImportError as e:
        raise MissingDatasetsError(f"{spec}: a datasets folder or hf:BUILDER:FILE needs the "
                                   f"datasets package: pip install 'fedjax_sc[hf]'") from e
    if spec.startswith("hf:"):
        builder, _, path = spec[3:].partition(":")
        if builder not in HF_BUILDERS or not path:
            raise ValueError(f"{spec}: write hf:BUILDER:FILE with BUILDER one of {HF_BUILDERS}")
        if not Path(path).is_file():
            raise FileNotFoundError(f"{path} not found")
    import datasets.builder
    try:
        if spec.startswith("hf:"):
            # pandas reads NA, null, n/a... as missing: a CSV's texts stay as written, as
            # the plain reader keeps them (an empty field is "", no text or no label)
            kw = {"keep_default_na": False} if builder == "csv" else {}
            loaded = {"": datasets.load_dataset(builder, data_files=path, split="train", **kw)}
        else:
            got = datasets.load_from_disk(spec)
            loaded = dict(got) if isinstance(got, datasets.DatasetDict) else {"": got}
        tables = {split: ds.with_format("arrow")[:] for split, ds in loaded.items()}
    except (pa.ArrowException, datasets.builder.DatasetGenerationError) as e:
        cause = e.__cause__ or e
        raise ValueError(f"{spec}: datasets cannot read it ({type(cause).__name__}: "
                         f"{' '.join(str(cause).split())})") from None
    return {split: Rows(table, f"{spec}[{split}]" if split else spec, "hf",
                         np.arange(table.num_rows)) for split, table in tables.items()}


def read_rows(spec: str, text_column: str, as_written: Sequence[str] = ()) -> dict[str, Rows]:
    """``{"": rows}`` for a file, ``{split: rows}`` for a DatasetDict folder; a CSV's
    ``text_column`` and ``as_written`` columns read as strings (:func:`_read_file`)."""
    if spec.startswith("hf:") or Path(spec).is_dir():
        return _read_hf(spec)
    return {"": _read_file(spec, text_column, as_written)}
