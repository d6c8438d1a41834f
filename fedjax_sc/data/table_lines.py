"""Where a row of a table file (:mod:`fedjax_sc.data.table`) lies in the file's lines: the
1-based line of a CSV / TSV record or a JSON line, and the line a pyarrow read error is about.
Host-side only (the standard library: pyarrow numbers rows within blocks, not lines).
"""

from __future__ import annotations

import bz2
import contextlib
import csv
import gzip
import json
import re
from pathlib import Path


def _opener(path: str):
    return {".gz": gzip.open, ".bz2": bz2.open}.get(Path(path).suffix.lower(), open)


def open_text(path: str):
    """A table file as text (``.gz`` / ``.bz2`` too), UTF-8, a byte-order mark dropped."""
    return _opener(path)(path, "rt", encoding="utf-8-sig", errors="replace", newline="")


def invalid_utf8(path: str) -> str | None:
    """``"PATH:LINE: not valid UTF-8 (byte 0xff at column 5)"`` for the first line of a table
    file (``.gz`` / ``.bz2`` too) that is not UTF-8, or None when every line is."""
    with _opener(path)(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return (f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at "
                        f"column {e.start + 1}); save the file as UTF-8")
    return None


@contextlib.contextmanager
def _whole_fields():
    """Python's csv module without its field size limit (a review may be long), restored
    after."""
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        yield
    finally:
        csv.field_size_limit(limit)


def csv_rows(path: str, kind: str):
    """``(first line, last line, fields)`` of each non-blank CSV record, header first
    (Python's csv module, only to number the lines that pyarrow reads; a quoted field may
    span lines)."""
    with _whole_fields(), open_text(path) as f:
        reader = csv.reader(f, delimiter="\t" if kind == "tsv" else ",")
        while True:
            start = reader.line_num + 1
            fields = next(reader, None)
            if fields is None:
                return
            if fields:  # pyarrow skips blank lines
                yield start, reader.line_num, fields


def stray_quote(path: str, kind: str) -> str | None:
    """One line naming the first record whose quoting Python's csv module refuses in strict
    mode (a quote inside a quoted field that is not doubled: pyarrow reads on, taking the
    following lines into the field), or None when every record is well quoted."""
    with _whole_fields(), open_text(path) as f:
        reader = csv.reader(f, delimiter="\t" if kind == "tsv" else ",", strict=True)
        start = 1
        try:
            while next(reader, None) is not None:
                start = reader.line_num + 1
        except csv.Error:
            end = reader.line_num
            spread = ("" if end == start else f" (on line {end}), so lines {start}-{end} "
                      f"would read as one record")
            return (f"{path}:{start}: a quoted field opens on this line and holds a quote "
                    f"that is not doubled{spread}; double a quote inside a field (\"\") "
                    f"or leave the field unquoted")
    return None


def csv_line(path: str, row: int, kind: str) -> int:
    """The 1-based line where data row ``row`` of a CSV file starts."""
    for k, (line, _, _) in enumerate(csv_rows(path, kind)):
        if k == row + 1:
            return line
    return 0


def json_line(path: str, row: int) -> int:
    """The 1-based line of JSON-lines row ``row`` (blank lines skipped, as pyarrow does)."""
    with open_text(path) as f:
        k = -1
        for lineno, line in enumerate(f, start=1):
            k += bool(line.strip())
            if k == row:
                return lineno
    return 0


def read_error(path: str, kind: str, e: Exception) -> str:
    """One line for a file pyarrow cannot read, with the line where it can be found (none
    when the file cannot be read as text either: a damaged ``.gz``)."""
    message = " ".join(str(e).split())
    try:
        return _read_error_line(path, kind, message)
    except (OSError, EOFError, csv.Error):
        return f"{path}: not a readable {kind} file (pyarrow: {message})"


def _read_error_line(path: str, kind: str, message: str) -> str:
    if "utf8" in message.lower() or "utf-8" in message.lower():
        bad = invalid_utf8(path)
        if bad is not None:
            return bad
    if kind in ("csv", "tsv") and "columns" in message:
        rows = csv_rows(path, kind)
        header = next(rows, (0, 0, []))[2]
        for line, last, fields in rows:
            if len(fields) != len(header):
                if last > line and next(rows, None) is None:  # one field ate the file
                    return (f"{path}:{line}: a quote opened on this line is never closed, so "
                            f"lines {line}-{last} (the rest of the file) read as one record "
                            f"({len(fields)} of the header's {len(header)} fields); close the "
                            f"quote, or double a quote inside a field (\"\")")
                spans = f" (lines {line}-{last}: a quoted field runs over them)" * (last > line)
                return (f"{path}:{line}: {len(fields)} fields where the header has "
                        f"{len(header)}{spans} (pyarrow: {message})")
    line = json_bad_line(path, message) if kind == "json" else None
    if line is not None:  # pyarrow's row is counted within a block: left out
        return f"{path}:{line}: {re.sub(r' in row [0-9]+', '', message)}{_json_cause(path, line)}"
    return f"{path}: not a readable {kind} file (pyarrow: {message})"


def _json_cause(path: str, line: int) -> str:
    """Why JSON line ``line`` is not a JSON object, in Python's words, or ``""`` when it is one
    (pyarrow's complaint is then about a value's type)."""
    with open_text(path) as f:
        text = next((t for k, t in enumerate(f, start=1) if k == line), "").rstrip("\r\n")
    try:
        obj = json.loads(text)
    except ValueError as e:
        msg = str(getattr(e, "msg", e)).removesuffix(" at")  # "Unterminated string starting at"
        # the line ended mid-object, or inside a string that never closes
        cut = getattr(e, "pos", 0) >= len(text.rstrip()) or msg.startswith("Unterminated")
        return (f" (Python's json: {msg}, column {getattr(e, 'colno', '?')}"
                + ("; the line ends before its object is closed: cut short, or an object "
                   "spread over several lines? JSON lines holds one object a line" if cut
                   else "") + ")")
    return "" if isinstance(obj, dict) else f" (a JSON {type(obj).__name__}, not an object)"


def objects_per_line(path: str, rows: int) -> str | None:
    """One line naming the first line of a JSON-lines file that holds more than one object,
    when the file's ``rows`` (as pyarrow read them) outnumber its non-blank lines; else
    None (one object a line, so every row's line is known)."""
    with open_text(path) as f:
        if sum(1 for line in f if line.strip()) == rows:
            return None
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            try:
                json.loads(line) if line.strip() else None
            except ValueError as e:
                if getattr(e, "msg", "") == "Extra data":
                    return (f"{path}:{lineno}: more than one JSON object on this line (the "
                            f"second at column {e.colno}); JSON lines holds one object a line")
    return f"{path}: {rows} rows in fewer lines; JSON lines holds one object a line"


def json_bad_line(path: str, message: str) -> int | None:
    """The line pyarrow's JSON error is about (its row numbers count within a block): the
    first line that is not a JSON object, or whose value of the column the message names
    changes JSON type."""
    got = re.search(r"Column\(/([^)]*)\)", message)
    seen = None
    with open_text(path) as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                return lineno
            if not isinstance(obj, dict):
                return lineno
            value = obj.get(got.group(1)) if got else None
            if value is not None:
                kind = ("bool" if isinstance(value, bool) else "number"
                        if isinstance(value, (int, float)) else type(value).__name__)
                if seen not in (None, kind):
                    return lineno
                seen = kind
    return None
