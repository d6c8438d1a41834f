"""Figures of finished runs: the convergence curves of Fig. 4 (Li et al. 2021; Ag per
aggregation round, then Ap_t per personalisation step) and per-client bar charts in the style
of Tables 2-3, optionally with the paper's figures (:mod:`fedjax_sc.run.paper.tables`) marked.

matplotlib is optional (``pip install 'fedjax_sc[plots]'``) and imported on first use; the
drawing plumbing (an Agg canvas, no pyplot) is in :mod:`fedjax_sc.run.plumbing.figures`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fedjax_sc.run.plumbing.figures import axes, percent, write


def read_curves(run_dir: str | Path) -> dict[str, list[Any]]:
    """The Ag and Ap_t curves of one run, from ``<run_dir>/metrics.jsonl``.

    Round lines (``"phase": "round"``) give ``"round"``, ``"Ag"`` and optionally
    ``"personal": {mode: acc}``; Ap lines (``"phase": "ap"``) give ``"t"``, ``"steps"`` and
    ``"Ap_t": {mode: acc}``. The mode is ``"ap_mode"`` of ``<run_dir>/report.json``, else the
    first mode of the Ap lines (else of each round's ``"personal"``). A line repeated by a
    resumed run (same round, or same t) counts once: the last one wins.

    Args:
      run_dir: a ``fedjax-sc train`` output directory.

    Returns:
      ``{"rounds": [int] R, "Ag": [float | None] R, "personal": [float | None] R,
      "ap_steps": [int] n_Z + 1, "Ap_t": [float] n_Z + 1}``, rounds and t ascending;
      accuracies as fractions in [0, 1], as the run wrote them. ``ap_steps`` are the
      personalisation SGD steps taken before each Ap_t evaluation (t * z).

    Raises:
      FileNotFoundError: ``metrics.jsonl`` is missing.
      ValueError: a line of ``metrics.jsonl`` (or ``report.json``) is not valid JSON, or an
        Ap line lacks the Ap mode.
    """
    run_dir = Path(run_dir)
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (not a fedjax-sc run directory?)")
    rounds: dict[int, dict] = {}
    ap: dict[int, tuple[int, dict]] = {}
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = _json(line, f"{path}, line {n}")
            if row.get("phase", "round") == "round":
                rounds[int(row["round"])] = row
            elif row["phase"] == "ap":
                ap[int(row["t"])] = (n, row)
    mode = _ap_mode(run_dir)
    if mode is None and ap:
        mode = next(iter(next(iter(ap.values()))[1]["Ap_t"]))
    ap_t = []
    for t in sorted(ap):
        n, row = ap[t]
        if mode not in row["Ap_t"]:
            raise ValueError(f"{path}, line {n}: Ap_t has no mode {mode!r} "
                             f"(has {sorted(row['Ap_t'])})")
        ap_t.append(float(row["Ap_t"][mode]))
    order = sorted(rounds)
    return {"rounds": order,
            "Ag": [rounds[r].get("Ag") for r in order],
            "personal": [_personal(rounds[r].get("personal"), mode) for r in order],
            "ap_steps": [int(ap[t][1].get("steps", t)) for t in sorted(ap)],
            "Ap_t": ap_t}


def mean_curves(run_dirs: Sequence[str | Path]) -> dict[str, list[Any]]:
    """The curves of :func:`read_curves` averaged over runs (e.g. the seeds of one method),
    with their spread.

    A round (or Ap step t) counts only where every run has it; a value is None where any run
    has None there (no global model).

    Args:
      run_dirs: one or more ``fedjax-sc train`` output directories.

    Returns:
      :func:`read_curves`'s keys, each accuracy the mean over the runs, plus ``"Ag_lo"``,
      ``"Ag_hi"``, ``"personal_lo"``, ``"personal_hi"``, ``"Ap_t_lo"`` and ``"Ap_t_hi"``
      (the minimum and maximum over the runs, per point) and ``"runs"`` (how many).

    Raises:
      ValueError: no run directory; or as :func:`read_curves`.
    """
    if not run_dirs:
        raise ValueError("mean_curves needs at least one run directory")
    curves = [read_curves(d) for d in run_dirs]
    rounds = sorted(set.intersection(*(set(c["rounds"]) for c in curves)))
    steps = min(len(c["Ap_t"]) for c in curves)
    out: dict[str, list[Any]] = {"rounds": rounds, "ap_steps": curves[0]["ap_steps"][:steps],
                                 "runs": [len(curves)]}
    for key, picks in (("Ag", None), ("personal", None), ("Ap_t", steps)):
        if picks is None:  # by round number
            cols = [[dict(zip(c["rounds"], c[key]))[r] for c in curves] for r in rounds]
        else:
            cols = [[c[key][t] for c in curves] for t in range(picks)]
        for suffix, fn in (("", np.mean), ("_lo", np.min), ("_hi", np.max)):
            out[key + suffix] = [None if any(v is None for v in col) else float(fn(col))
                                 for col in cols]
    return out


def convergence_figure(runs: Mapping[str, str | Path | Sequence[str | Path]],
                       path: str | Path, title: str | None = None) -> Path:
    """Fig. 4: per method, Ag per aggregation round, then Ap_t per personalisation step.

    The x axis runs over rounds 1..R (Ag, or the personalised accuracy before fine-tuning,
    labelled " (personal)", for runs without a global model), then on over x = R + t for the
    Ap_t points t = 0..n_Z; a dashed vertical line marks the switch. A method given several
    runs (its seeds) is drawn as their mean (:func:`mean_curves`), the band between their
    minimum and maximum shaded, and labelled with the number of runs.

    Args:
      runs: ``{label: run directory, or a list of them}``, one line each (label: e.g. the
        method name).
      path: where the PNG goes (parent directories are created).
      title: the figure title, if any.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ModuleNotFoundError: matplotlib is not installed (``pip install 'fedjax_sc[plots]'``).
    """
    fig, ax = axes(figsize=(8.0, 4.5))
    switches = set()
    for i, (label, dirs) in enumerate(runs.items()):
        dirs = [dirs] if isinstance(dirs, (str, Path)) else list(dirs)
        c = mean_curves(dirs)
        key = "Ag"
        if c["Ag"] and all(v is None for v in c["Ag"]):
            key, label = "personal", f"{label} (personal)"
        if len(dirs) > 1:
            label = f"{label}, mean of {len(dirs)} (min-max shaded)"
        last = c["rounds"][-1] if c["rounds"] else 0
        # the colour cycle has 10 colours: the next ten lines are dashed, so none look alike
        style = {"marker": ".", "markersize": 3, "linewidth": 1.2,
                 "linestyle": ("-", "--", ":")[i // 10 % 3]}
        (line,) = ax.plot(c["rounds"], percent(c[key]), label=label, **style)
        ap_x = [last + t for t in range(len(c["Ap_t"]))]
        if c["Ap_t"]:  # a separate segment: no line drawn across the switch
            ax.plot(ap_x, percent(c["Ap_t"]), color=line.get_color(), **style)
            switches.add(last)
        if len(dirs) > 1:
            for xs, k in ((c["rounds"], key), (ap_x, "Ap_t")):
                ax.fill_between(xs, percent(c[k + "_lo"]), percent(c[k + "_hi"]),
                                color=line.get_color(), alpha=0.2, linewidth=0)
    for x in sorted(switches):
        ax.axvline(x, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("round (Ag) | personalisation step (Ap_t)")
    ax.set_ylabel("accuracy (%)")
    ax.grid(alpha=0.3)
    if runs:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, ax, path, title)


def per_client_figure(table: Mapping[str, Mapping[str, float]], path: str | Path,
                      title: str | None = None,
                      paper: Mapping[str, Mapping[str, float]] | None = None,
                      scale: float | None = None) -> Path:
    """Grouped bars of per-client accuracies (Ag^k or Ap^k, Tables 2-3), one bar per method.

    Args:
      table: ``{method: {client: accuracy}}``; the clients (x axis) are the first method's,
        in its order, without ``"Avg"``.
      path: where the PNG goes (parent directories are created).
      title: the figure title, if any.
      paper: ``{method: {client: percent}}`` (e.g. ``paper.TABLE3["fdu"]``): the paper's
        value for the same method and client, drawn as a small black marker on the bar.
      scale: multiplies ``table``'s values to percent; None: 100 when every value lies in
        [0, 1] (fractions, as in ``report.json``), else 1 (already percent).

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ModuleNotFoundError: matplotlib is not installed (``pip install 'fedjax_sc[plots]'``).
    """
    methods = list(table)
    clients = [c for c in (table[methods[0]] if methods else {}) if c != "Avg"]
    if scale is None:
        values = [v for m in methods for v in table[m].values() if v is not None]
        scale = 100.0 if values and all(0.0 <= v <= 1.0 for v in values) else 1.0
    fig, ax = axes(figsize=(min(24.0, max(6.0, 0.12 * len(clients) * (len(methods) + 1))), 4.5))
    width = 0.8 / max(1, len(methods))
    shown: list[float] = []
    paper_label = "paper"
    for i, m in enumerate(methods):
        xs = np.arange(len(clients)) + (i - (len(methods) - 1) / 2) * width
        ys = [np.nan if table[m].get(c) is None else scale * table[m][c] for c in clients]
        ax.bar(xs, ys, width=width, label=m)
        shown += ys
        for x, c in zip(xs, clients):
            theirs = (paper or {}).get(m, {}).get(c)
            if theirs is not None:
                ax.plot([x], [theirs], marker="_", markersize=max(4.0, 40 * width),
                        markeredgewidth=2, color="black", linestyle="none", label=paper_label)
                paper_label = "_nolegend_"
                shown.append(theirs)
    finite = [v for v in shown if not math.isnan(v)]
    if finite:  # zoom on the bars' tops: accuracies differ by a few points
        ax.set_ylim(max(0.0, min(finite) - 5.0), min(100.0, max(finite) + 2.0))
    ax.set_xticks(np.arange(len(clients)), clients, rotation=45, ha="right")
    ax.set_ylabel("accuracy (%)")
    ax.grid(axis="y", alpha=0.3)
    if methods:
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, ax, path, title)


def grid_heatmap(ours: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                 paper: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                 path: str | Path, title: str | None = None) -> Path:
    """A table's grid of settings as heatmaps (Tables 4, 7, 8), ours beside the paper's: one
    row of panels per metric (Ag, Ap), ours on the left, the paper's on the right, both on the
    metric's colour scale (one colour bar per row), each cell annotated; a cell without a
    figure is left blank.

    Args:
      ours, paper: ``{metric: {row label: {column label: percent or None}}}``; the rows and
        columns are ``ours``'s, in its order.
      path: where the PNG goes (parent directories are created).
      title: the figure's title, if any.

    Returns:
      ``path`` as a :class:`~pathlib.Path`.

    Raises:
      ModuleNotFoundError: matplotlib is not installed (``pip install 'fedjax_sc[plots]'``).
    """
    metrics = list(ours)
    rows = list(next(iter(ours.values()))) if metrics else []
    cols = list(next(iter(next(iter(ours.values())).values()))) if rows else []
    fig, _ = axes(figsize=(2.2 + 1.4 * 2 * max(1, len(cols)), 0.8 + 1.1 * len(metrics) *
                            max(1, len(rows))))
    fig.clear()
    grid = lambda table, m: np.array(
        [[np.nan if (v := table.get(m, {}).get(r, {}).get(c)) is None else float(v)
          for c in cols] for r in rows], dtype=float)
    for i, m in enumerate(metrics):
        panels = (("ours", grid(ours, m)), ("paper", grid(paper, m)))
        values = np.concatenate([g[np.isfinite(g)] for _, g in panels])
        lo, hi = (values.min(), values.max()) if values.size else (0.0, 1.0)
        pair = []
        for j, (who, g) in enumerate(panels):
            ax = fig.add_subplot(len(metrics), 2, 2 * i + j + 1)
            pair.append(ax)
            image = ax.imshow(np.ma.masked_invalid(g), cmap="viridis", vmin=lo,
                              vmax=max(hi, lo + 1e-9), aspect="auto")
            for (r, c), v in np.ndenumerate(g):
                if np.isfinite(v):
                    ax.text(c, r, f"{v:.1f}", ha="center", va="center", fontsize="small",
                            color="white" if v < (lo + hi) / 2 else "black")
            ax.set_xticks(range(len(cols)), cols, fontsize="small")
            ax.set_yticks(range(len(rows)), rows, fontsize="small")
            ax.set_title(f"{m}, {who}", fontsize="medium")
        fig.colorbar(image, ax=pair, label=f"{m} (%)", fraction=0.05)
    if title:
        fig.suptitle(title)
    fig.set_layout_engine("constrained")
    return write(fig, path)


def _json(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None


def _ap_mode(run_dir: Path) -> str | None:
    path = run_dir / "report.json"
    if not path.is_file():
        return None
    return _json(path.read_text(), str(path)).get("ap_mode")


def _personal(personal: Mapping[str, float] | None, mode: str | None) -> float | None:
    if not personal:
        return None
    if mode is None:
        return personal[next(iter(personal))]
    return personal.get(mode)


def _save(fig: Any, ax: Any, path: str | Path, title: str | None) -> Path:
    """Titles the figure and writes it to ``path``
    (:func:`fedjax_sc.run.plumbing.figures.write`)."""
    if title:
        ax.set_title(title)
    return write(fig, path)
