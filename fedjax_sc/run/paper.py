"""The paper's reported figures, as data (Li et al. 2021), for side-by-side tables.

Values are percentages as printed. Keys follow the paper's table layout.
"""

from __future__ import annotations

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
