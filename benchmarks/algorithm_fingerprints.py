"""Every registered algorithm for a few rounds on a small slice of FDU-MTL, printed to full
precision with a digest of its final parameters: run it before and after a change to the
engine and ``diff`` the two outputs (a refactoring that moves nothing prints the same lines).

    python benchmarks/algorithm_fingerprints.py --data-dir ../shared/data/fdu-mtl > before.txt

The settings are explicit and small (4 domains, L = 64, V = 5,000, d = 50 random vectors,
2 rounds, n_Z = 2), so the whole list runs in minutes on a CPU.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time

import jax
import numpy as np


def digest(tree) -> str:
    """sha256 of every leaf's bytes in flattening order (first 16 hex digits)."""
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(tree):
        h.update(np.asarray(leaf).tobytes())
    return h.hexdigest()[:16]


def main() -> None:
    from fedjax_sc.run import registry
    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.train import train

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default="../shared/data/fdu-mtl")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--algorithms", nargs="*", default=list(registry.ALGORITHMS))
    a = p.parse_args()
    for name in a.algorithms:
        with tempfile.TemporaryDirectory() as out:
            c = TrainConfig(scene="fdu", data_dir=a.data_dir, algorithm=name, rounds=a.rounds,
                            domains=("books", "dvd", "electronics", "kitchen_housewares"),
                            max_len=64, vocab_size=5000, embeddings="random", embed_dim=50,
                            ap_evals=2, ap_steps=5, seed=0, out=out)
            t0 = time.perf_counter()
            r = train(c, log=lambda s: None)
            ag = "None" if r["Ag"] is None else f"{r['Ag']:.6f}"
            print(f"{name:12s} Ag {ag} Ap {r['Ap']:.6f} params {digest(r['params'])} "
                  f"private {digest(r['private'])} ({time.perf_counter() - t0:.0f} s)",
                  flush=True)


if __name__ == "__main__":
    main()
