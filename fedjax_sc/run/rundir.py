"""A run directory's safety: what a run writes, replacing a run without losing anything else,
the data fingerprint that ``--resume`` checks, and reading ``metrics.jsonl`` back.

A run directory holds only the files of :data:`RUN_FILES` (and the probe's
``probe-<client>-<word>.json``). ``--overwrite`` removes exactly those, and refuses a folder
holding anything else, so a mistyped ``--out`` never deletes a user's files. The fingerprint
(``fingerprint.json``: size and SHA-256 of every corpus file read, and of the vocabulary) is
written with the run; ``--resume`` on other data or another vocabulary is refused with a message
naming what changed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

RUN_FILES = ("config.json", "vocab.json", "fingerprint.json", "metrics.jsonl", "report.json",
             "report.md", "checkpoints")
"""The entries ``fedjax-sc train`` writes into its ``--out`` folder."""
PROBE_GLOB = "probe-*.json"
"""The files ``fedjax-sc probe`` adds to a run folder."""


def run_files(out: Path) -> list[str]:
    """The names in ``out`` that a run writes (sorted); [] for a missing folder."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir()
                  if p.name in RUN_FILES or p.match(PROBE_GLOB))


def foreign_entries(out: Path) -> list[str]:
    """The names in ``out`` that no run writes (sorted); [] for a missing folder."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir()
                  if p.name not in RUN_FILES and not p.match(PROBE_GLOB))


def check_replaceable(out: Path) -> None:
    """Raises ``FileExistsError`` when ``--overwrite`` would have to delete a file that a run
    does not write (the message lists up to 5 of them)."""
    foreign = foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5
                                          else "")
        raise FileExistsError(f"--overwrite: {out} holds files a run does not write ({shown}); "
                              f"nothing was deleted: move them or choose another --out")


def remove_run(out: Path) -> None:
    """Deletes the run files of ``out`` (:data:`RUN_FILES`, probe files) and nothing else.

    Raises:
      FileExistsError: ``out`` holds other files (checked first; nothing is deleted then).
    """
    check_replaceable(out)
    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for path in out.glob(PROBE_GLOB):
        path.unlink()


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex digest}`` of a file."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def fingerprint(files: Iterable[Path], vocab_json: str) -> dict[str, Any]:
    """What a run was trained on: every corpus file by name (size, SHA-256) and the
    vocabulary (number of words, SHA-256 of its JSON)."""
    return {"files": {p.name: file_digest(p) for p in sorted(files)},
            "vocab": {"words": len(json.loads(vocab_json)),
                      "sha256": hashlib.sha256(vocab_json.encode()).hexdigest()}}


def fingerprint_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Human-readable differences between two fingerprints ([] when equal)."""
    changes = []
    old, new = saved.get("files", {}), now.get("files", {})
    for name in sorted(set(old) | set(new)):
        if name not in new:
            changes.append(f"{name} is no longer read")
        elif name not in old:
            changes.append(f"{name} is new")
        elif old[name] != new[name]:
            a, b = old[name]["bytes"], new[name]["bytes"]
            changes.append(f"{name} changed ({a:,} -> {b:,} bytes)" if a != b else
                           f"{name} changed (same size, other content)")
    if saved.get("vocab") != now.get("vocab"):
        a, b = saved.get("vocab", {}).get("words"), now.get("vocab", {}).get("words")
        changes.append(f"the vocabulary differs ({a} -> {b} words)" if a != b else
                       "the vocabulary differs (same size, other words or order)")
    return changes


def check_resume_data(out: Path, now: dict[str, Any], vocab_json: str) -> str | None:
    """Compares the data of a resumed run with what ``out`` recorded.

    A run written before fingerprints existed has only ``vocab.json``: the vocabulary is
    compared with it, and a note is returned (the caller writes the fingerprint then).

    Raises:
      ValueError: the corpus files or the vocabulary differ (the message names each change).
    """
    saved_path = out / "fingerprint.json"
    if saved_path.exists():
        changes = fingerprint_changes(json.loads(saved_path.read_text()), now)
    else:
        vocab_path = out / "vocab.json"
        changes = ([] if not vocab_path.exists() or vocab_path.read_text() == vocab_json
                   else ["the vocabulary differs from vocab.json"])
    if changes:
        raise ValueError(f"--resume: {out} was trained on other data: " + "; ".join(changes)
                         + ". Nothing was changed; resume with the original data, or start a "
                         "new run (another --out, or --overwrite)")
    if not saved_path.exists():
        return (f"{out} has no data fingerprint (an older run); its vocabulary matches "
                f"vocab.json; recording the fingerprint now")
    return None


def read_metrics(path: Path, upto: int, log: Callable[[str], None] = print) -> list[dict]:
    """The ``"phase": "round"`` lines of ``metrics.jsonl`` up to round ``upto``.

    A torn last line (a run killed while writing it) is dropped with a note to ``log``.

    Raises:
      ValueError: a line before the last one is not valid JSON (names ``path:lineno``).
    """
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    rows = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if lineno == len(lines):
                log(f"warning: {path}:{lineno}: dropping a torn last line ({e.msg})")
                continue
            raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg}); the metrics file "
                             f"is damaged") from None
    return [r for r in rows if r.get("phase", "round") == "round" and r["round"] <= upto]
