"""An ablation table's cells against its baseline cells, paired on the same test reviews.

One seed per cell gives one Ag and one Ap each; whether a cell differs from the setting it
ablates by more than the test sample explains is the paired question of ``fedjax-sc compare``
(:func:`fedjax_sc.run.paper.compare.compare`: the same test examples classified by both
models, a per-client bootstrap; with several seeds, a two-level bootstrap over the seeds as
well). The baselines of each table (Li et al. 2021, "Preliminary Steps Towards Federated
Sentiment Classification"):

- Table 4 (KTEPS by lambda1 x lambda2): the cell without either loss term (lambda1 = lambda2
  = 0) and the paper's setting (lambda1 = lambda2 = 0.01, the cell ``kteps``);
- Table 8 (which layers are private, by lambda1): the same architecture at lambda1 = 0.

Table 7 (KTEPS* by d1 x d2) has no cell that the others ablate, so it gets no section.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

BASELINES: dict[str, Callable[[str], tuple[str, ...]]] = {
    "table4": lambda cell: ("kteps_l1-0_l2-0", "kteps"),
    "table8": lambda cell: (cell.rpartition("_l1-")[0] + "_l1-0",),
}
"""Per table, the cells each cell is paired with (by the cell's name in the table's plan)."""


def _difference(cell: Path, base: Path, ap: bool) -> str:
    """``+d (low, high)`` in points, or ``n/a`` where the runs' records cannot be paired."""
    from fedjax_sc.run.paper.compare import compare, format_difference
    try:
        r = compare(cell, base, ap=ap, log=lambda _: None)
    except (ValueError, OSError) as e:
        return f"n/a ({str(e).splitlines()[0][:60]})"
    return format_difference(r)


def paired_section(table: str, folder: Path, order: Sequence[str],
                   finished: set[str]) -> list[str]:
    """Markdown lines: for every finished cell of ``order`` (exported as
    ``folder/<cell>-seed<s>``), Ag and Ap minus each finished baseline's, in points with the
    95 % bootstrap interval (two baselines are paired once); none for a table without
    baselines or where no pair is finished.

    Args:
      table: ``table4`` or ``table8`` (others: no section).
      folder: the table's exported runs, ``results/<scene>/<table>``.
      order: the cells in the table's order.
      finished: the cells with a report for every seed.
    """
    if table not in BASELINES:
        return []
    rows, shown = [], set()
    for cell in order:
        for base in BASELINES[table](cell):
            pair = frozenset((cell, base))  # a baseline against another one: once
            if cell == base or cell not in finished or base not in finished or pair in shown:
                continue
            shown.add(pair)
            rows.append(f"| {cell} | {base} | {_difference(folder / cell, folder / base, False)}"
                        f" | {_difference(folder / cell, folder / base, True)} |")
    if not rows:
        return []
    return ["## Each cell against the setting it ablates", "",
            "Paired on the same test reviews (`fedjax-sc compare CELL BASELINE`, then `--ap`): "
            "the difference in points and its 95 % bootstrap interval over the test sample "
            "(and over the seeds, where a cell has several).", "",
            "| cell | against | Ag difference | Ap difference |", "|---|---|---:|---:|",
            *rows, ""]
