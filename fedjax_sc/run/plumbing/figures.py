"""The figure every run draws, and the matplotlib plumbing every figure shares.

:func:`run_figure` writes ``convergence.png`` into a finished run's folder (report.md embeds
it): Ag per aggregation round on the left, Ap_t per personalisation step on the right (Li et
al. 2021, Fig. 4), the mean over clients bold and every client's curve faint behind it, so a
client that lags or diverges shows. A method without a global model (FedPer, FedRep) plots its
personalised model per round instead, and says so in the axis label.

matplotlib is optional (``pip install 'fedjax_sc[plots]'``) and imported on first use; figures
are drawn on an Agg canvas, without pyplot, so no global backend is switched. The paper's
figures (:mod:`fedjax_sc.run.paper.plots`) draw with the same :func:`axes` and :func:`write`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

NEED_MPL = "plots need matplotlib: pip install 'fedjax_sc[plots]'"
"""The one-line reason given where a figure is asked for without matplotlib."""
PNG_DPI = 120
"""Resolution of every PNG figure."""
FIGURE = "convergence.png"
"""The run figure's file name in the run folder."""


def have_matplotlib() -> bool:
    """Whether matplotlib can be imported (figures are drawn only then)."""
    try:
        import matplotlib  # noqa: F401
    except ModuleNotFoundError:
        return False
    return True


def axes(figsize: tuple[float, float], ncols: int = 1) -> tuple[Any, Any]:
    """A figure on an Agg canvas and its ``ncols`` axes (one axes object for 1).

    Raises:
      ModuleNotFoundError: matplotlib is not installed (:data:`NEED_MPL`).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(NEED_MPL, name="matplotlib") from e
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    subplots = fig.subplots(1, ncols)
    return fig, subplots


def write(fig: Any, path: str | Path) -> Path:
    """Writes the figure to ``path`` as PNG (process 0 of several; the others only return
    the path)."""
    from fedjax_sc.run.plumbing.processes import primary
    path = Path(path)
    if primary():
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=PNG_DPI, format="png", bbox_inches="tight")  # room for legend
    return path


def percent(values: list[float | None]) -> list[float]:
    """Fractions as percentages, None as NaN (a gap in a curve)."""
    return [np.nan if v is None else 100.0 * v for v in values]


def _curves(rows: list[dict[str, Any]], mean_key: str, client_key: str, x_key: str):
    """(x, mean [T], per-client [T, K] or None) of the rows holding ``mean_key``."""
    rows = [r for r in rows if r.get(mean_key) is not None]
    if not rows:
        return None
    mean = [r[mean_key] if not isinstance(r[mean_key], dict) else
            next(iter(r[mean_key].values())) for r in rows]
    clients = [r.get(client_key) for r in rows]
    per_client = (np.array([percent(c) for c in clients]) if all(c for c in clients) and
                  len({len(c) for c in clients}) == 1 else None)
    return [r[x_key] for r in rows], percent(mean), per_client


def run_figure(run_dir: str | Path, path: str | Path | None = None) -> Path | None:
    """Draws a run's ``convergence.png`` from its ``metrics.jsonl`` (see the module
    docstring).

    Args:
      run_dir: a run folder (``fedjax-sc train --out``, or one population member's).
      path: where to write it (default: ``run_dir/convergence.png``).

    Returns:
      The PNG's path, or None where the run has no round to draw.

    Raises:
      ModuleNotFoundError: matplotlib is not installed.
      OSError: ``metrics.jsonl`` cannot be read.
      ValueError: a line of it that is not JSON (a torn write).
    """
    run_dir = Path(run_dir)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if line.strip()]
    rounds = [r for r in rows if r.get("phase", "round") == "round"]
    ap = [r for r in rows if r.get("phase") == "ap"]
    left = _curves(rounds, "Ag", "Ag_per_client", "round")
    label = "Ag (global model), %"
    if left is None:
        left = _curves(rounds, "personal", "personal_per_client", "round")
        label = "personalised model, %"
    if left is None:
        return None
    right = _curves(ap, "Ap_t", "Ap_t_per_client", "steps")
    fig, panes = axes((10.0, 3.6) if right else (5.5, 3.6), 2 if right else 1)
    panes = list(panes) if right else [panes]
    for ax, curves, xlabel, ylabel in ((panes[0], left, "round", label),
                                       (panes[-1], right, "fine-tuning step", "Ap_t, %")):
        if curves is None:
            continue
        x, mean, per_client = curves
        if per_client is not None:
            ax.plot(x, per_client, color="0.6", alpha=0.35, linewidth=0.8)
        ax.plot(x, mean, color="C0", linewidth=2.0, marker="o", markersize=3, label="mean")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    panes[0].set_title(f"{run_dir.name}: every client faint, the mean bold", fontsize=9)
    return write(fig, path or run_dir / FIGURE)
