"""The paper's reported figures, as data (Li et al. 2021), for side-by-side tables.

Values are percentages as printed. Keys follow the paper's table layout; methods use our
algorithm names (``fedjax_sc.algorithms``) and clients our scene client names
(``fedjax_sc.data.corpus``). :func:`paper_value` looks up one Table 2 / 3 figure.
"""

from __future__ import annotations

# Paper column order of Tables 2 and 3 (FedPer and LG. have no complete global model, so
# Table 2 leaves them out).
_TABLE2_METHODS = ("indiv", "fs", "asp", "fedavg", "fedfusion", "pfl_da", "fedprox", "fedmmd",
                   "kteps", "kteps_star")
_TABLE3_METHODS = ("indiv", "fs", "asp", "fedavg", "fedper", "lg_fedavg", "fedfusion", "pfl_da",
                   "fedprox", "fedmmd", "kteps", "kteps_star")


def _by_method(methods: tuple[str, ...], rows: dict[str, dict[str, tuple[float | None, ...]]]
               ) -> dict[str, dict[str, dict[str, float]]]:
    """``{scene: {client: row}}`` (a row: one value per method, paper order) to
    ``{scene: {method: {client: value}}}``, leaving out cells the paper leaves blank (None)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for scene, by_client in rows.items():
        out[scene] = {m: {} for m in methods}
        for client, row in by_client.items():
            if len(row) != len(methods):
                raise ValueError(f"{scene}/{client}: {len(row)} values for {len(methods)} methods")
            for m, v in zip(methods, row):
                if v is not None:
                    out[scene][m][client] = v
    return out


# Table 2 (Ag^k per client, Ag in the "Avg" row), rows as printed.
# The IYY Avg row prints only 9 of the 10 numbers; comparing each with the mean of its three
# client values places them under Indiv. ... KTEPS (all within 0.07), so KTEPS* (client mean
# 59.07) is the one the paper leaves out.
TABLE2: dict[str, dict[str, dict[str, float]]] = _by_method(_TABLE2_METHODS, {
    "fdu": {
        "apparel":              (83.6, 86.4, 86.0, 86.2, 84.1, 85.2, 86.0, 87.6, 85.7, 84.4),
        "baby":                 (81.1, 89.0, 88.5, 85.2, 85.4, 88.4, 87.8, 88.1, 89.8, 85.2),
        "books":                (79.1, 82.5, 85.4, 83.3, 82.6, 84.6, 81.8, 84.1, 82.7, 80.2),
        "camera_photo":         (84.9, 85.3, 88.8, 86.2, 82.4, 85.4, 86.6, 85.2, 86.6, 83.4),
        "dvd":                  (80.7, 84.5, 86.2, 87.5, 85.8, 85.4, 83.6, 84.9, 86.3, 81.0),
        "electronics":          (80.1, 85.2, 85.4, 86.1, 84.1, 84.1, 84.0, 84.9, 84.2, 85.2),
        "health_personal_care": (79.8, 89.0, 90.2, 87.6, 86.0, 88.0, 87.9, 88.5, 89.2, 86.5),
        "kitchen_housewares":   (79.8, 86.8, 87.9, 86.1, 86.8, 88.2, 87.2, 88.8, 87.7, 86.9),
        "magazines":            (89.6, 87.7, 87.5, 87.8, 85.6, 87.6, 84.8, 86.1, 85.7, 85.6),
        "music":                (76.6, 82.7, 82.2, 85.7, 79.8, 81.8, 80.8, 80.4, 83.3, 79.9),
        "software":             (85.0, 89.4, 87.4, 86.6, 85.9, 86.8, 87.2, 88.0, 88.9, 85.1),
        "sports_outdoors":      (82.1, 84.3, 86.9, 84.9, 84.5, 85.4, 86.4, 84.0, 85.6, 83.5),
        "toys_games":           (83.3, 89.9, 89.6, 86.2, 86.2, 88.8, 86.6, 88.9, 88.2, 90.6),
        "video":                (82.8, 88.1, 86.2, 87.1, 85.9, 87.2, 85.4, 86.0, 87.6, 83.5),
        "imdb":                 (77.2, 83.1, 82.9, 85.3, 82.8, 82.8, 82.5, 83.5, 84.0, 79.4),
        "MR":                   (72.4, 75.8, 74.4, 69.2, 73.4, 74.8, 74.4, 74.8, 75.3, 65.9),
        "Avg":                  (81.1, 85.6, 86.0, 85.1, 83.8, 85.3, 84.6, 85.2, 85.7, 82.9),
    },
    "iyy": {
        "imdb":                 (55.3, 55.7, 56.7, 54.6, 53.7, 53.6, 56.6, 53.4, 55.6, 54.9),
        "yelp13":               (61.8, 62.6, 63.8, 62.4, 61.6, 61.5, 61.0, 59.4, 62.9, 62.3),
        "yelp14":               (59.7, 60.1, 61.0, 60.1, 59.3, 59.4, 59.3, 57.1, 60.7, 60.0),
        "Avg":                  (58.9, 59.5, 60.5, 59.1, 58.2, 58.2, 59.0, 56.6, 59.7, None),
    },
})
"""Table 2 (Ag): ``TABLE2[scene][method][client or "Avg"]``."""

# Table 3 (Ap^k per client, Ap in the "Avg" row), rows as printed.
# As in Table 2, the IYY Avg row prints 11 of the 12 numbers; they match the client means of
# Indiv. ... KTEPS (all within 0.07), so KTEPS* (client mean 59.53) is the one left out.
TABLE3: dict[str, dict[str, dict[str, float]]] = _by_method(_TABLE3_METHODS, {
    "fdu": {
        "apparel":              (83.6, 86.8, 86.0, 86.6, 87.2, 80.4, 84.2, 86.4, 86.0, 87.4, 86.2, 85.0),
        "baby":                 (81.1, 89.1, 88.0, 86.5, 87.6, 82.0, 85.3, 83.9, 87.1, 88.0, 89.8, 84.9),
        "books":                (79.1, 82.7, 84.7, 84.7, 81.9, 81.0, 82.2, 80.7, 84.0, 84.2, 83.6, 80.5),
        "camera_photo":         (84.9, 85.5, 88.2, 85.8, 86.3, 85.2, 85.7, 85.2, 86.2, 85.0, 86.8, 82.5),
        "dvd":                  (80.7, 84.5, 86.2, 85.0, 83.4, 78.3, 81.5, 81.4, 83.8, 84.9, 86.0, 80.8),
        "electronics":          (80.1, 85.0, 86.3, 86.2, 84.3, 80.5, 82.3, 79.8, 85.6, 84.9, 84.0, 84.0),
        "health_personal_care": (79.8, 88.6, 90.5, 89.8, 88.0, 79.6, 84.5, 84.3, 87.8, 88.4, 89.8, 87.6),
        "kitchen_housewares":   (79.8, 86.4, 87.4, 84.0, 88.9, 80.8, 79.8, 80.0, 87.1, 88.5, 87.3, 86.0),
        "magazines":            (89.6, 87.6, 87.4, 87.5, 87.8, 91.2, 88.5, 89.5, 85.3, 87.9, 87.5, 86.9),
        "music":                (76.6, 82.8, 83.1, 84.0, 80.7, 76.9, 79.1, 79.0, 82.1, 82.1, 82.2, 79.0),
        "software":             (85.0, 90.0, 89.0, 87.2, 88.6, 88.5, 85.0, 81.5, 88.5, 88.2, 88.9, 85.5),
        "sports_outdoors":      (82.1, 84.6, 85.4, 84.2, 85.7, 81.5, 84.8, 83.3, 84.9, 84.0, 85.3, 83.1),
        "toys_games":           (83.3, 89.8, 90.2, 88.2, 88.0, 81.8, 83.3, 86.2, 88.0, 89.0, 89.0, 91.2),
        "video":                (82.8, 88.0, 86.6, 86.7, 87.3, 84.2, 86.4, 81.5, 85.7, 86.3, 87.6, 84.4),
        "imdb":                 (77.2, 82.7, 82.6, 81.8, 82.5, 78.0, 76.5, 78.0, 82.0, 83.9, 82.8, 79.2),
        "MR":                   (72.4, 76.0, 75.2, 77.0, 75.6, 69.3, 70.9, 72.4, 74.9, 76.2, 75.7, 69.7),
        "Avg":                  (81.1, 85.6, 86.0, 85.3, 85.2, 81.2, 82.5, 82.1, 84.9, 85.6, 85.8, 83.1),
    },
    "iyy": {
        "imdb":                 (55.3, 56.5, 56.2, 56.0, 56.0, 60.0, 57.8, 57.8, 57.6, 53.7, 56.9, 55.4),
        "yelp13":               (61.8, 63.1, 64.1, 62.6, 62.4, 62.0, 62.0, 61.6, 61.4, 59.7, 63.0, 62.8),
        "yelp14":               (59.7, 60.2, 61.4, 60.3, 60.1, 60.5, 60.1, 59.8, 59.5, 57.7, 60.9, 60.4),
        "Avg":                  (58.9, 59.9, 60.6, 59.6, 59.5, 60.8, 59.9, 59.7, 59.5, 57.0, 60.3, None),
    },
})
"""Table 3 (Ap): ``TABLE3[scene][method][client or "Avg"]``."""

TABLE4: dict[str, dict[str, dict[float, dict[float, float]]]] = {
    # Table 4: KTEPS with loss coefficients lambda1 (knowledge transfer, Eq. 8; rows) and
    # lambda2 (diversity, Eq. 7; columns).
    "fdu": {
        "Ag": {0.0: {0.0: 85.0, 0.001: 85.4, 0.01: 85.2},
               0.001: {0.0: 85.5, 0.001: 85.3, 0.01: 85.1},
               0.01: {0.0: 85.2, 0.001: 85.0, 0.01: 85.7}},
        "Ap": {0.0: {0.0: 85.2, 0.001: 85.5, 0.01: 85.3},
               0.001: {0.0: 85.8, 0.001: 85.6, 0.01: 85.3},
               0.01: {0.0: 85.3, 0.001: 85.3, 0.01: 85.8}},
    },
    "iyy": {
        "Ag": {0.0: {0.0: 58.8, 0.001: 59.0, 0.01: 58.8},
               0.001: {0.0: 59.1, 0.001: 59.2, 0.01: 59.1},
               0.01: {0.0: 58.5, 0.001: 59.5, 0.01: 59.7}},
        "Ap": {0.0: {0.0: 59.6, 0.001: 59.6, 0.01: 59.7},
               0.001: {0.0: 59.7, 0.001: 59.7, 0.01: 59.8},
               0.01: {0.0: 59.7, 0.001: 59.7, 0.01: 60.3}},
    },
}
"""Table 4: ``TABLE4[scene][metric][lambda1][lambda2]``."""

TABLE5: dict[str, dict[str, dict[float, float]]] = {
    # Table 5: Ap with personalisation LR mu * LR_ag,0.
    "fdu": {"kteps": {1.0: 79.0, 0.1: 85.1, 0.01: 85.8, 0.001: 85.5},
            "kteps_star": {1.0: 77.5, 0.1: 81.1, 0.01: 83.1, 0.001: 83.5}},
    "iyy": {"kteps": {1.0: 44.5, 0.1: 58.1, 0.01: 60.3, 0.001: 59.9},
            "kteps_star": {1.0: 40.3, 0.1: 59.1, 0.01: 59.6, 0.001: 59.4}},
}
"""Table 5 (Ap): ``TABLE5[scene][method][mu]``."""

TABLE6: dict[str, dict[str, dict[str, float]]] = {
    # Table 6: Ap by local inference mechanism: shared ("s"), private ("p") classifier or the
    # average of both ("sp").
    "fdu": {"kteps": {"s": 85.5, "p": 85.6, "sp": 85.8},
            "kteps_star": {"s": 83.0, "p": 83.0, "sp": 83.1}},
    "iyy": {"kteps": {"s": 60.1, "p": 60.2, "sp": 60.3},
            "kteps_star": {"s": 59.5, "p": 59.6, "sp": 59.6}},
}
"""Table 6 (Ap): ``TABLE6[scene][method][mode]``."""

TABLE7: dict[str, dict[str, dict[float, dict[int, float]]]] = {
    # Table 7: KTEPS* with d = 200; d2 = 200 (fraction 1.0) and d2 = 150 (fraction 0.75);
    # d1 in {1, 2, 3, 6}. d1 = 1, d2 = 200 is KTEPS.
    "fdu": {
        "Ag": {1.0: {1: 85.7, 2: 83.7, 3: 82.6, 6: 50.5},
               0.75: {1: 84.9, 2: 82.9, 3: 61.6, 6: 50.5}},
        "Ap": {1.0: {1: 85.8, 2: 83.9, 3: 83.1, 6: 49.2},
               0.75: {1: 85.5, 2: 83.1, 3: 65.0, 6: 49.1}},
    },
    "iyy": {
        "Ag": {1.0: {1: 59.7, 2: 59.0, 3: 58.7, 6: 58.2},
               0.75: {1: 59.5, 2: 59.1, 3: 58.8, 6: 56.9}},
        "Ap": {1.0: {1: 60.3, 2: 59.9, 3: 59.5, 6: 59.2},
               0.75: {1: 60.3, 2: 59.6, 3: 59.0, 6: 58.1}},
    },
}
"""Table 7: ``TABLE7[scene][metric][d2 / d][d1]``."""

TABLE8: dict[str, dict[str, dict[float, dict[str, float]]]] = {
    # Table 8: KTEPS without projection layers and diversity term (lambda2 = 0.0), privatising
    # the mlp classifier (A), BiRNN-MLP (B) or the whole model (C), by lambda1.
    "fdu": {
        "Ag": {0.0: {"arch_a": 85.0, "arch_b": 85.1, "arch_c": 85.3},
               0.001: {"arch_a": 85.6, "arch_b": 85.2, "arch_c": 85.1},
               0.01: {"arch_a": 85.8, "arch_b": 85.5, "arch_c": 85.3},
               0.1: {"arch_a": 85.9, "arch_b": 85.5, "arch_c": 85.6}},
        "Ap": {0.0: {"arch_a": 85.6, "arch_b": 83.5, "arch_c": 82.1},
               0.001: {"arch_a": 86.0, "arch_b": 83.6, "arch_c": 82.8},
               0.01: {"arch_a": 85.8, "arch_b": 83.3, "arch_c": 81.4},
               0.1: {"arch_a": 86.0, "arch_b": 83.7, "arch_c": 82.1}},
    },
}
"""Table 8: ``TABLE8[scene][metric][lambda1][arch]``."""

_PER_CLIENT = {"table2": TABLE2, "2": TABLE2, "ag": TABLE2,
               "table3": TABLE3, "3": TABLE3, "ap": TABLE3}


def paper_value(table: str, scene: str, method: str, client: str) -> float | None:
    """One Table 2 / Table 3 figure.

    Args:
      table: ``"TABLE2"`` (or ``"Ag"``) or ``"TABLE3"`` (or ``"Ap"``); case-insensitive.
      scene: ``"fdu"`` or ``"iyy"``.
      method: our algorithm name, e.g. ``"kteps"``.
      client: our client name, e.g. ``"camera_photo"``, or ``"Avg"``.

    Returns:
      The paper's value in percent, or None when the paper has no such figure (e.g. FedPer
      in Table 2, or the IYY KTEPS* Avg).

    Raises:
      ValueError: ``table`` names neither Table 2 nor Table 3.
    """
    try:
        data = _PER_CLIENT[table.lower()]
    except KeyError:
        raise ValueError(f"paper_value: unknown table {table!r}; use 'TABLE2' (Ag) or "
                         f"'TABLE3' (Ap)") from None
    return data.get(scene, {}).get(method, {}).get(client)
