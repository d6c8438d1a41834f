"""A run directory's safety: what a run writes, replacing a run without losing anything else,
the data fingerprint that ``--resume`` checks, and reading ``metrics.jsonl`` back.

A run directory holds only the files of :data:`RUN_FILES` (and the probe's
``probe-<client>-<word>.json``). ``--overwrite`` removes exactly those, and refuses a folder
holding anything else, so a mistyped ``--out`` never deletes a user's files. The fingerprint
(``fingerprint.json``: size and SHA-256 of every corpus file read, and of the vocabulary) is
written with the run; ``--resume`` on other data or another vocabulary is refused with a message
naming what changed.

In a run of several processes, process 0 alone writes, removes and locks
(:func:`~fedjax_sc.run.plumbing.processes.primary`): :func:`write_text`, :func:`append_text`,
:func:`remove_file`, :func:`remove_run` and :func:`locked` do nothing in the other processes,
which read the folder (it must be on a file system every process sees).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.config_file import config_diff
from fedjax_sc.run.plumbing.jsonfile import read_json
from fedjax_sc.run.plumbing.processes import primary

LOCK = ".fedjax-sc.lock"
"""The lock file of a run folder (:func:`locked`), held while a process trains in it."""
RUN_FILES = ("config.json", "vocab.json", "fingerprint.json", "metrics.jsonl", "report.json",
             "report.md", "convergence.png", "test_hits.json", "tensorboard", "wandb",
             "corrupt-checkpoints", "checkpoints")
"""The entries ``fedjax-sc train`` writes into its ``--out`` folder."""
PROBE_GLOB = "probe-*.json"
"""The files ``fedjax-sc probe`` adds to a run folder."""


def _written_by_a_run(p: Path) -> bool:
    """``p`` is an entry a run writes: one of :data:`RUN_FILES`, a probe file, or the
    temporary file of :func:`write_text` (``.NAME.tmp-PID``) that a run killed mid-write
    left behind."""
    left = re.fullmatch(r"\.(.+)\.tmp-[0-9]+", p.name)
    name = Path(left.group(1)) if left else p
    return name.name in RUN_FILES or name.match(PROBE_GLOB)


def run_files(out: Path) -> list[str]:
    """The names in ``out`` that a run writes (sorted); [] for a missing folder."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if _written_by_a_run(p))


def foreign_entries(out: Path) -> list[str]:
    """The names in ``out`` that no run writes (sorted); [] for a missing folder."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir()
                  if p.name != LOCK and not _written_by_a_run(p))


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
    """Deletes the run files of ``out`` (:data:`RUN_FILES`, probe files, a killed write's
    temporary files) and nothing else
    (process 0 of several: the others only check).

    Raises:
      FileExistsError: ``out`` holds other files (checked first; nothing is deleted then).
    """
    check_replaceable(out)
    if not primary():
        return
    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for path in out.glob(PROBE_GLOB):
        path.unlink()
    for path in out.glob(".*.tmp-*"):  # left by a run killed mid-write
        if path.is_file() and _written_by_a_run(path):
            path.unlink()


def copy_training(source: Path, where: Path) -> None:
    """Copies the rounds of the run in ``source`` (its checkpoints, configuration, metrics,
    vocabulary and data fingerprint) into ``where``, for a run that differs from it only in
    its Ap phase: ``--resume`` there checks the configuration and the data against the copy,
    then only redoes the evaluation and the Ap phase. Process 0 of several (the others wait
    at the caller's barrier).

    Raises:
      FileExistsError: ``where`` already holds run files (nothing is copied or replaced).
    """
    if not primary():
        return
    if run_files(where):
        raise FileExistsError(f"{where} already holds run files ({', '.join(run_files(where))})"
                              f"; the training of {source} is not copied over them")
    # copied beside it first, then moved in (config.json last), so that a copy cut short
    # leaves no half run in ``where``, only a hidden folder beside it
    where.parent.mkdir(parents=True, exist_ok=True)
    tmp = where.parent / f".{where.name}.copying-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(source / "checkpoints", tmp / "checkpoints")
    # the data record too, so that the resume checks the corpus against the one the source
    # trained on (a run older than fingerprints has only vocab.json)
    names = [n for n in ("metrics.jsonl", "vocab.json", "fingerprint.json", "config.json")
             if (source / n).exists()]
    for name in names:
        shutil.copy(source / name, tmp / name)
    if where.is_dir() and not any(where.iterdir()):
        where.rmdir()
    if not where.exists():
        os.replace(tmp, where)  # the whole copy at once
        return
    for name in ["checkpoints", *names]:  # beside files of the user's: one entry at a time
        os.replace(tmp / name, where / name)
    tmp.rmdir()


def file_digest(path: Path) -> dict[str, Any]:
    """``{"bytes": size, "sha256": hex digest}`` of a file."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return {"bytes": path.stat().st_size, "sha256": h.hexdigest()}


def fingerprint(files: Iterable[Path], vocab_json: str) -> dict[str, Any]:
    """What a run was trained on: every corpus file by name (size, SHA-256) and the
    vocabulary (number of words, SHA-256 of its JSON). Files of the same name (the splits of a
    datasets folder) are told apart by their folder: ``train/state.json``."""
    files = sorted(files)
    names = [p.name for p in files]
    return {"files": {p.name if names.count(p.name) == 1 else f"{p.parent.name}/{p.name}":
                      file_digest(p) for p in files},
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
    compared with it, and a note is returned (the caller writes the fingerprint then). A
    user's algorithm file that changed since (``"algorithm"`` in both fingerprints) is not
    refused (a fix the user means to train on), but told of in the note.

    Raises:
      ValueError: the corpus files or the vocabulary differ (the message names each change).
    """
    saved_path = out / "fingerprint.json"
    if saved_path.exists():
        changes = fingerprint_changes(read_json(saved_path), now)
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
    was, now_code = read_json(saved_path).get("algorithm"), now.get("algorithm")
    if was and now_code and was["sha256"] != now_code["sha256"]:
        return (f"--resume: the algorithm's file {now_code['file']} changed since the rounds "
                f"in {out} were trained ({_change(was, now_code)}); "
                f"the rounds to come train with it as it is now")
    return None


def _change(was: dict[str, Any], now: dict[str, Any]) -> str:
    """``"2,371 -> 2,380 bytes"``, or the SHA-256s' first digits where the size is the same."""
    if was["bytes"] != now["bytes"]:
        return f"{was['bytes']:,} -> {now['bytes']:,} bytes"
    return f"same size, SHA-256 {was['sha256'][:12]} -> {now['sha256'][:12]}"


def read_metrics(path: Path, upto: int, log: Callable[[str], None] = print) -> list[dict]:
    """The ``"phase": "round"`` lines of ``metrics.jsonl`` up to round ``upto``.

    A torn last line (a run killed while writing it) is dropped with a note to ``log``, and
    rounds up to ``upto`` that the file lacks (lines lost to a copy or an edit) are named in a
    warning to ``log``.

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
    kept = [r for r in rows if r.get("phase", "round") == "round" and r["round"] <= upto]
    missing = sorted(set(range(1, upto + 1)) - {r["round"] for r in kept})
    if missing:  # the checkpoint holds the training; these rounds' figures are not recorded
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        log(f"warning: {path} lacks round{'s' * (len(missing) > 1)} {shown} of the {upto} "
            f"the checkpoint holds: {'their' if len(missing) > 1 else 'its'} figures stay "
            f"unrecorded (the report's per-round figures and convergence curve skip them)")
    return kept


def check_out_dir(out: Path, c: TrainConfig) -> None:
    """Checks ``out`` before any work; deletes nothing (an overwritten run is removed by
    :func:`remove_run` once the new inputs are checked).

    Raises:
      FileNotFoundError: ``--resume`` with no run in ``out``.
      FileExistsError: ``out`` holds a run (or part of one) and neither ``--resume`` nor
        ``--overwrite`` is given.
      ValueError: ``--resume`` with training settings other than the saved run's (names
        each).
    """
    saved = out / "config.json"
    if c.overwrite:
        if run_files(out):
            check_replaceable(out)
        return
    if not saved.exists():
        if c.resume:
            raise FileNotFoundError(f"--resume: no run to resume in {out} (no config.json)")
        if run_files(out):
            raise FileExistsError(f"{out} holds part of a run ({', '.join(run_files(out))}"
                                  f") but no config.json; pass --overwrite (fsc.train: "
                                  f"overwrite=True) to replace it, or choose another --out")
        return
    if not c.resume and never_trained(out):
        raise FileExistsError(f"{out} holds a run that never completed round 1; pass --resume "
                              f"to train it again from round 0 (its settings must match), "
                              f"--overwrite to replace it (fsc.train: resume=True, "
                              f"overwrite=True), or choose another --out")
    if not c.resume:
        raise FileExistsError(f"{out} already holds a run; pass --resume to continue it, "
                              f"--overwrite to replace it (fsc.train: resume=True, "
                              f"overwrite=True), or choose another --out")
    diff = config_diff(read_json(saved), c)
    if diff:
        why = ("; --lr-schedule cosine decays over --rounds, so a run of another length has "
               "other LRs from round 2 on: train it afresh" if "rounds" in diff else "")
        raise ValueError(f"--resume with a different configuration than {saved}: {diff}{why}")


class RunLockedError(FileExistsError):
    """Another process trains in the run folder."""


@contextlib.contextmanager
def locked(out: Path):
    """Holds the exclusive lock of run folder ``out`` (created if missing) for the block.

    The lock is ``fcntl.flock`` on ``out/.fedjax-sc.lock``, which records the holder's pid and
    host. The kernel releases it when its process ends, however it ends, so a lock left by a
    killed process is stale by construction and taken over; the file is removed on release.
    (``flock`` is local to a host: on a network file system shared by several hosts, give
    each run its own --out.) In a run of several processes, process 0 holds it for all of
    them; the others take nothing.

    Raises:
      RunLockedError: another process holds it (names the folder and the holder).
    """
    if not primary():
        yield
        return
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK
    while True:
        f = path.open("a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            holder = f.read().strip() or "another process"
            f.close()
            raise RunLockedError(f"{out} is in use by {holder} (its lock file {path}); wait "
                                 f"for it to end, or choose another --out") from None
        try:  # the holder before us may have removed the file we opened: lock the new one
            same = os.fstat(f.fileno()).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        f.close()
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    f.flush()
    try:
        yield
    finally:
        path.unlink(missing_ok=True)
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()
        if created and not any(out.iterdir()):  # a run refused before writing anything
            out.rmdir()


def write_text(path: Path, text: str) -> None:
    """Writes ``path`` atomically: a temporary file beside it, then a rename, so a reader (or
    a run killed mid-write) sees the old file or the new one, never a torn one. Process 0 of
    several writes; the others do nothing."""
    if not primary():
        return
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def append_text(path: Path, text: str) -> None:
    """Appends ``text`` to ``path`` (created if missing); process 0 of several, the others do
    nothing."""
    if primary():
        with path.open("a") as f:
            f.write(text)


def remove_file(path: Path) -> None:
    """Removes ``path`` if it exists; process 0 of several, the others do nothing."""
    if primary():
        path.unlink(missing_ok=True)


def never_trained(out: Path) -> bool:
    """Whether run folder ``out`` holds a run's config.json but nothing it trained: no
    checkpoint, no report and no round past 1 in ``metrics.jsonl`` (round 1 never completed:
    a failed first compile, a crash, a divergence, or a stop between round 1's metrics line
    and its checkpoint, a line that training round 1 again writes anew), so that starting it
    afresh loses nothing."""
    metrics = out / "metrics.jsonl"
    later = metrics.exists() and any(
        _round_of(line) > 1 for line in metrics.read_text().splitlines())
    return ((out / "config.json").exists() and last_round(out) is None
            and not (out / "report.json").exists() and not later)


def _round_of(line: str) -> int:
    """The round of a ``metrics.jsonl`` line of training (0: another line, or one cut
    short)."""
    try:
        row = json.loads(line)
    except ValueError:
        return 0
    is_round = isinstance(row, dict) and row.get("phase", "round") == "round"
    number = row.get("round") if is_round else None
    return number if isinstance(number, int) else 0


def last_round(out: Path) -> int | None:
    """The round of the newest checkpoint in run folder ``out`` (None: none)."""
    ckpts = out / "checkpoints"
    steps = [int(p.name) for p in ckpts.iterdir() if p.name.isdigit()] if ckpts.is_dir() else []
    return max(steps, default=None)
