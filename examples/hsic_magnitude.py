"""How large can KTEPS's diversity loss be? The empirical HSIC of Eq. 7 (Li et al. 2021,
"Preliminary Steps Towards Federated Sentiment Classification") against its knowledge-transfer
loss (Eq. 8), the check behind the HSIC rows of docs/choices.md and docs/results.md.

The paper says of its Table 4 that "the diversity loss have a higher magnitude" than the
transfer loss. With Gaussian kernels and Eq. 7's (B - 1)^-2 normalisation the HSIC of a batch
of B = 8 is bounded whatever the kernel width: this script measures the bound (features that
are identical, the most dependent pair, over a grid of bandwidths) and prints, from a KTEPS
run's metrics.jsonl, the two terms as the run logged them (unweighted, mean over clients).

    python examples/hsic_magnitude.py [--run RUN_DIR] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.losses import hsic

BANDWIDTHS = np.geomspace(0.01, 100.0, 60)


def max_over_bandwidths(x: jax.Array) -> tuple[float, float]:
    """(max HSIC(x, x) over :data:`BANDWIDTHS`, the median-heuristic HSIC(x, x))."""
    return (max(float(hsic(x, x, None, float(bw))) for bw in BANDWIDTHS), float(hsic(x, x)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, default=Path("results/fdu/table3/kteps-seed0"),
                    help="a KTEPS run folder with metrics.jsonl (default: the FDU run)")
    ap.add_argument("--batch", type=int, default=8, help="B (paper: 8 on FDU)")
    ap.add_argument("--features", type=int, default=128, help="feature width (2 x hidden)")
    a = ap.parse_args()
    b = a.batch
    gauss = [max_over_bandwidths(jax.random.normal(jax.random.key(s), (b, a.features)))
             for s in range(20)]
    clusters = jnp.concatenate([jnp.zeros((b // 2, a.features)),
                                3.0 * jnp.ones((b - b // 2, a.features))])
    print(f"Eq. 7 HSIC of a batch of B = {b} with itself (the most dependent pair):")
    print(f"  Gaussian features: max over bandwidths {max(g[0] for g in gauss):.3f}, "
          f"median heuristic {np.mean([g[1] for g in gauss]):.3f}")
    print(f"  two equal clusters: max over bandwidths {max_over_bandwidths(clusters)[0]:.3f}")
    print(f"  the same without (B - 1)^-2: x {(b - 1) ** 2}")
    path = a.run / "metrics.jsonl"
    if not path.is_file():
        print(f"{path}: not found; skipping the run's logged terms")
        return
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("phase") == "round" and "div" in r.get("aux", {})]
    print(f"\n{a.run}: unweighted terms as logged (mean over clients)")
    print("| round | L_div (Eq. 7) | L_kt (Eq. 8) | L_div x (B-1)^2 |")
    print("|---:|---:|---:|---:|")
    for r in rows:
        if r["round"] in (1, 5, 10, 20, 30, 40, 50) or r is rows[-1]:
            div, kt = r["aux"]["div"], r["aux"]["kt"]
            print(f"| {r['round']} | {div:.3f} | {kt:.3f} | {div * (b - 1) ** 2:.2f} |")


if __name__ == "__main__":
    main()
