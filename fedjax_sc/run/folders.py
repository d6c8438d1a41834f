"""A run's folders before its first round: each member's ``--resume`` checked against its
folder, then the newest round every member holds intact restored (or an ``--overwrite``-n
folder cleared), and the members' configuration, vocabulary, data fingerprint and metrics so
far written; the checkpoint manager of a run folder (orbax: one per round, the last two kept).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from fedjax_sc.core import population
from fedjax_sc.data import scenes
from fedjax_sc.run import loading, rundir
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.plumbing import processes
from fedjax_sc.run.setup import (
    CheckpointError,
    checkpoint_manager,
    newest_verified,
    restore_checkpoint,
)


def manager(out: Path) -> ocp.CheckpointManager:
    """The checkpoints of run folder ``out``: one per round, the last two kept."""
    return checkpoint_manager(out.resolve() / "checkpoints", keep=2, create=True)


def prepare(cs: list[TrainConfig], scene: scenes.Scene, files: list[Path], state: Any,
            client_states: Any, checked: processes.Agreement,
            log: Callable[[str], None]) -> tuple[int, Any, Any]:
    """Checks every ``--resume`` against its folder, then (``checked`` reached: the first
    change of any file) restores the newest round all members hold intact, or clears an
    ``--overwrite``-n folder, and writes the members' config, vocabulary, fingerprint and
    metrics so far (``state`` and ``client_states``: the members' round-0 states, stacked).
    Returns ``(start round, server states, client states)``.

    Raises:
      FileNotFoundError: ``--resume`` of a folder without a checkpoint.
      ValueError: ``--resume`` of a checkpoint past ``--rounds``, or data that changed.
      CheckpointError: no intact checkpoint can be restored.
    """
    vocab_json = scene.vocab.to_json()
    data_print = loading.fingerprint(cs[0], files, vocab_json)
    notes = []  # told once the checkpoints restore (a changed file may change the states)
    for m in cs:
        out = Path(m.out)
        if m.resume:
            last = rundir.last_round(out)
            if last is None:
                raise FileNotFoundError(f"--resume: {out / 'checkpoints'} holds no checkpoint, "
                                        f"nothing to resume; start afresh with --overwrite")
            if last > m.rounds:
                raise ValueError(f"--resume: the checkpoint in {out} is at round {last}, past "
                                 f"--rounds {m.rounds}")
            note = rundir.check_resume_data(out, data_print, vocab_json)
            if note:
                notes.append(note)
    checked.reached()  # every process: nothing was changed before this point
    found = []  # (round, states) of each resumed member's newest intact checkpoint
    for i, m in enumerate(cs):  # every member verified before any file is removed
        out = Path(m.out)
        if m.resume:
            found.append(newest_verified(manager(out), population.member(state, i),
                                         population.member(client_states, i), log))
            if found[-1] is None:
                fix = ("start afresh with --overwrite" if len(cs) == 1 else
                       f"the other members' folders are as they were; start this one afresh "
                       f"with fedjax-sc train --config {out / 'config.json'} --overwrite, "
                       f"then resume the population")
                raise CheckpointError(f"--resume: no checkpoint in {out / 'checkpoints'} "
                                      f"restores intact (moved to corrupt-checkpoints/); {fix}")
    for note in notes:
        log(note)
    for m in cs:
        out = Path(m.out)
        if m.resume:
            for name in ("report.json", "report.md", "test_hits.json"):  # rewritten at the end
                rundir.remove_file(out / name)
        elif m.overwrite and rundir.run_files(out):  # the new inputs are all checked
            rundir.remove_run(out)
            log(f"--overwrite: removed the earlier run in {out}")
        out.mkdir(parents=True, exist_ok=True)
    processes.barrier("run folders prepared")  # process 0 removed what it had to
    start = min((step for step, _ in found), default=0)
    if start:  # every member from the newest round all of them hold intact
        restored = []
        for i, (step, states) in enumerate(found):
            ck = manager(Path(cs[i].out))
            restored.append(states if step == start else restore_checkpoint(
                ck, start, population.member(state, i), population.member(client_states, i)))
            for later in ck.all_steps():  # rounds past the common one are trained again
                if later > start:
                    ck.delete(later)
            ck.close()
        state, client_states = population.stack(restored)
        log(f"resumed from {', '.join(str(Path(m.out) / 'checkpoints') for m in cs)} at "
            f"round {start}")
    for m in cs:
        path = Path(m.out) / "metrics.jsonl"
        history = rundir.read_metrics(path, start, log)
        rundir.write_text(path, "".join(json.dumps(r) + "\n" for r in history))
        rundir.write_text(Path(m.out) / "config.json", json.dumps(dataclasses.asdict(
            dataclasses.replace(m, label_names=scene.label_names)), indent=2))  # classes
        rundir.write_text(Path(m.out) / "vocab.json", vocab_json)
        rundir.write_text(Path(m.out) / "fingerprint.json", json.dumps(data_print, indent=2))
    return start, state, client_states
