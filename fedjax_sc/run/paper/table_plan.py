"""What each of the paper's tables needs (Li et al. 2021, Sec. 5.4-5.6, Tables 2-8): the runs
(:class:`Run`: a name and the ``TrainConfig`` settings it sets) and the cells (:class:`Cell`:
which run, the figure read from its report, the paper's value), for ``fedjax-sc reproduce``
(:mod:`fedjax_sc.run.paper.reproduce`, which trains them) and ``fedjax-sc results`` (which renders
them from ``results/``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from fedjax_sc.algorithms.kteps_star import default_band
from fedjax_sc.core.evaluate import mean_accuracy
from fedjax_sc.run.paper import tables as paper

TABLES = ("table2", "table3", "table4", "table5", "table6", "table7", "table8")
TABLE23_METHODS = {
    "table2": ("indiv", "fs", "asp", "fedavg", "fedfusion", "pfl_da", "fedprox", "fedmmd",
               "kteps", "kteps_star"),
    "table3": ("indiv", "fs", "asp", "fedavg", "fedper", "lg_fedavg", "fedfusion", "pfl_da",
               "fedprox", "fedmmd", "kteps", "kteps_star"),
}
PERSONAL_AS_AG = ("indiv", "asp")
"""Methods without a global model whose Table 2 column is each client's own model."""


class Run(NamedTuple):
    """One configuration of the store.

    Attributes:
      name: its directory under ``<out>/<scene>/``.
      overrides: TrainConfig fields set for it.
      shares_training_with: the name of a run with the same training whose checkpoint it reuses
        (only its Ap settings differ), or None.
    """

    name: str
    overrides: dict[str, Any]
    shares_training_with: str | None = None


class Cell(NamedTuple):
    """One table cell: the run, the figure read from its report, the paper's value."""

    run: str
    metric: Callable[[dict], float | None]
    paper: float | None


def table_title(table: str) -> str:
    """The paper's name of a table of :data:`TABLES`, as headings print it: ``"Table 4"`` for
    ``"table4"`` (another name comes back capitalised)."""
    return f"Table {table[5:]}" if table in TABLES else table.capitalize()


def _fmt(v: float) -> str:
    return f"{v:g}"


TABLE7_D1 = (1, 2, 3, 6)
"""Table 7's first principal components kept (Sec. 5.6.3)."""
TABLE7_FRACTIONS = (1.0, 0.75)
"""Table 7's d2 / d (200 and 150 of d = 200)."""


def plan(table: str, scene: str, embed_dim: int, d1s: Sequence[int] = TABLE7_D1,
         fractions: Sequence[float] = TABLE7_FRACTIONS
         ) -> tuple[list[Run], dict[str, dict[str, Cell]]]:
    """The runs a table needs and its cells ``{row: {column: Cell}}``.

    Args:
      table: one of :data:`TABLES`.
      scene: ``fdu``, ``iyy`` or ``synthetic`` (no paper figures).
      embed_dim: d (Table 7's bands are fractions of it).
      d1s, fractions: Table 7's grid (d1 values; d2 = round(fraction x d)); the paper's by
        default.

    Raises:
      ValueError: an unknown table, Table 8 on a scene other than fdu, or an empty Table 7
        band (d1 > d2, a fraction outside (0, 1]).
    """
    avg = lambda key: (lambda r: r.get(key))
    if table in TABLE23_METHODS:
        methods = TABLE23_METHODS[table]
        runs = [Run(m, {"algorithm": m}) for m in methods]
        source = paper.TABLE2 if table == "table2" else paper.TABLE3
        rows = [*_client_names(scene), "Avg"]
        cells = {row: {m: Cell(m, client_metric(table, m, row), source.get(scene, {})
                               .get(m, {}).get(row)) for m in methods} for row in rows}
        return runs, cells
    if table == "table4":
        grid = (0.0, 0.001, 0.01)
        runs = [Run(_kteps_name(a, b), {"algorithm": "kteps", "lambda_kt": a, "lambda_div": b})
                for a in grid for b in grid]
        ref = paper.TABLE4.get(scene, {})
        cells = {f"lambda1 = {_fmt(a)}": {f"{m} lambda2 = {_fmt(b)}": Cell(
            _kteps_name(a, b), avg(m), ref.get(m, {}).get(a, {}).get(b))
            for m in ("Ag", "Ap") for b in grid} for a in grid}
        return runs, cells
    if table == "table5":
        mus = (1.0, 0.1, 0.01, 0.001)
        runs = [Run(m, {"algorithm": m}) for m in ("kteps", "kteps_star")]
        runs += [Run(f"{m}_mu-{_fmt(mu)}", {"algorithm": m, "ap_lr_mult": mu}, m)
                 for m in ("kteps", "kteps_star") for mu in mus if mu != 0.01]
        name = lambda m, mu: m if mu == 0.01 else f"{m}_mu-{_fmt(mu)}"
        ref = paper.TABLE5.get(scene, {})
        cells = {m: {f"mu = {_fmt(mu)}": Cell(name(m, mu), avg("Ap"),
                                              ref.get(m, {}).get(mu)) for mu in mus}
                 for m in ("kteps", "kteps_star")}
        return runs, cells
    if table == "table6":
        runs = [Run(m, {"algorithm": m}) for m in ("kteps", "kteps_star")]
        ref = paper.TABLE6.get(scene, {})
        cells = {m: {mode: Cell(m, lambda r, mode=mode: (r.get("Ap_modes") or {}).get(mode),
                                ref.get(m, {}).get(mode)) for mode in ("s", "p", "sp")}
                 for m in ("kteps", "kteps_star")}
        return runs, cells
    if table == "table7":
        bands = {}
        for f in fractions:
            d2 = max(1, int(np.floor(f * embed_dim + 0.5)))
            for d1 in d1s:
                if not 0 < f <= 1 or not 1 <= d1 <= d2:
                    raise ValueError(f"Table 7 band d1 = {d1}, d2 = {d2} (fraction {f:g} of "
                                     f"d = {embed_dim}) is empty")
                bands[(f, d1)] = (d1, d2)
        runs = [Run(_band_name(b, embed_dim), {"algorithm": "kteps_star", "pca_band": b})
                for b in bands.values()]
        ref = paper.TABLE7.get(scene, {})
        cells = {f"d2 = {bands[(f, d1s[0])][1]} ({_fmt(f)} d)": {
            f"{m} d1 = {d1}": Cell(_band_name(bands[(f, d1)], embed_dim), avg(m),
                                   ref.get(m, {}).get(f, {}).get(d1))
            for m in ("Ag", "Ap") for d1 in d1s} for f in fractions}
        return runs, cells
    if table == "table8":
        if scene != "fdu":
            raise ValueError("Table 8 is an FDU experiment (--scene fdu)")
        lambdas, archs = (0.0, 0.001, 0.01, 0.1), ("arch_a", "arch_b", "arch_c")
        runs = [Run(f"{a}_l1-{_fmt(l)}", {"algorithm": a, "lambda_kt": l})
                for l in lambdas for a in archs]
        ref = paper.TABLE8["fdu"]
        cells = {f"lambda1 = {_fmt(l)}": {f"{m} {a[-1].upper()}": Cell(
            f"{a}_l1-{_fmt(l)}", avg(m), ref.get(m, {}).get(l, {}).get(a))
            for m in ("Ag", "Ap") for a in archs} for l in lambdas}
        return runs, cells
    raise ValueError(f"unknown table {table!r}; choose from {TABLES}")


def _band_name(band: tuple[int, int], embed_dim: int) -> str:
    """Table 7's run of a band: ``kteps_star`` for the default band (the run of Tables 2, 3, 5
    and 6), ``kteps_star_d1-<d1>_d2-<d2>`` otherwise."""
    return ("kteps_star" if tuple(band) == default_band(embed_dim)
            else f"kteps_star_d1-{band[0]}_d2-{band[1]}")


def _kteps_name(a: float, b: float) -> str:
    return "kteps" if (a, b) == (0.01, 0.01) else f"kteps_l1-{_fmt(a)}_l2-{_fmt(b)}"


def _client_names(scene: str) -> tuple[str, ...]:
    if scene == "fdu":
        from fedjax_sc.data.corpus import FDU_DOMAINS
        return FDU_DOMAINS
    if scene == "iyy":
        return ("imdb", "yelp13", "yelp14")
    return ()  # synthetic: the rows are read from the reports


def client_metric(table: str, method: str, client: str) -> Callable[[dict], float | None]:
    """Reads one Table 2/3 cell from a run's report: Ag^k (Table 2; each client's own model
    for the methods without a global model, :data:`PERSONAL_AS_AG`) or Ap^k (Table 3), and
    the average for ``client == "Avg"``."""
    key = "Ap" if table == "table3" else "Ag"

    def read(report: dict) -> float | None:
        fallback = key == "Ag" and method in PERSONAL_AS_AG
        if client == "Avg":
            if fallback:
                return mean_accuracy([np.nan if r["personal"] is None else r["personal"]
                                      for r in report["clients"]])  # None: no test rows
            return report.get(key)
        for r in report["clients"]:
            if r["client"] == client:
                return r["personal"] if fallback else r.get(key)
        return None

    return read
