"""Host memory of the client states of a many-client stateful run, against a stateless one.

With partial participation the N clients' algorithm states live on the host between rounds
(docs/scale.md). A method whose client state is shaped as the word table (SCAFFOLD's c_i:
``[V, d]`` float32 per client) needs N times that, and should need it once: the feed holds
one C-ordered copy and writes each round's rows into it, the checkpoints are written from it
without a deep copy, in chunks.

Each run is ``fedjax-sc train`` in a fresh process (so the peak resident memory is that run's
alone), on the synthetic scene unless ``--fdu-dir`` is given; at each population size N: a
stateless run (FedAvg), the stateful run (``--algorithm``) for ``--rounds`` rounds, then the
stateful run resumed for one more round from its checkpoint. Prints, for each, the wall
seconds and the peak resident memory (``getrusage``), then the size of the client states (every ``client_*`` leaf of the
stateful run's checkpoint, from orbax's metadata: N x the word table and the rest) and the
figure this script checks, from two population sizes N1 < N2 (so that what does not grow
with N, the compiled programs and the libraries, cancels)::

    held = (growth of the stateful run's peak - growth of the stateless run's peak)
           / growth of the client states

1.0 means the states are held once. Exit status 1 when ``held`` of the fresh or the resumed
run exceeds ``--max-held`` (default 1.25: the round's copies of the sampled rows and the
allocator's slack take a little).

    python benchmarks/host_states.py                        # synthetic: N = 200 and 400
    python benchmarks/host_states.py --clients 400 800 --vocab-size 40000
    python benchmarks/host_states.py --fdu-dir ../shared/data/fdu-mtl --clients 150 300 \\
        --vocab-size 50000                                  # FDU pooled, as docs/scale.md

Measure on an otherwise quiet machine: a training beside it does not change the resident
memory, but it stretches the wall seconds.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import resource, sys
from fedjax_sc.run.cli import main
code = main(sys.argv[1:])
print("PEAK_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)
sys.exit(code)
"""


def peak_run(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, peak resident memory in GB) of ``fedjax-sc train argv`` in a fresh
    process.

    Raises:
      RuntimeError: the run failed (its last output lines in the message).
    """
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, "train", *argv],
                          capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    lines = done.stdout.splitlines()
    peaks = [int(line.split()[1]) for line in lines if line.startswith("PEAK_KB ")]
    if done.returncode != 0 or not peaks:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"fedjax-sc train {' '.join(argv)} failed "
                           f"(exit {done.returncode}):\n{tail}")
    return seconds, peaks[-1] / 1e6  # ru_maxrss is in KiB on Linux; GB (1e9 bytes) here


def states_gb(folder: Path) -> float:
    """GB (1e9 bytes) of the client states (every leaf under ``client_*``: private leaves and
    algorithm states, all N clients) in the newest checkpoint of the run in ``folder``, from
    orbax's metadata (the synthetic scene's vocabulary is what its texts hold, at most V)."""
    import jax
    import numpy as np
    import orbax.checkpoint as ocp
    steps = sorted(int(c.name) for c in (folder / "checkpoints").iterdir() if c.name.isdigit())
    meta = ocp.PyTreeCheckpointer().metadata(folder / "checkpoints" / str(steps[-1]) / "default")
    tree = getattr(meta, "item_metadata", meta)
    tree = getattr(tree, "tree", tree)
    total = 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if jax.tree_util.keystr(path).startswith("['client_") and hasattr(leaf, "shape"):
            total += int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize
    return total / 1e9


def measure(args: argparse.Namespace, clients: int, tmp: str) -> dict[str, float]:
    """Peak resident GB of the three runs at ``clients`` clients, and the GB of the stateful
    run's client states (key ``states``)."""
    if args.fdu_dir:
        scene = ["--scene", "fdu", "--data-dir", args.fdu_dir, "--embeddings", "glove-6b-50d",
                 "--partition", "dirichlet_label", "--num-clients", str(clients),
                 "--alpha", "1"]
    else:
        scene = ["--scene", "synthetic", "--synthetic-clients", str(clients),
                 "--synthetic-train", "16", "--synthetic-test", "4", "--max-len", "16",
                 "--embed-dim", str(args.embed_dim), "--hidden", "8"]
    common = [*scene, "--vocab-size", str(args.vocab_size), "--clients-per-round",
              str(args.clients_per_round), "--no-ap", "--seed", "0"]
    out = {name: str(Path(tmp, f"{name}-{clients}")) for name in ("stateless", "stateful")}
    rounds = str(args.rounds)
    runs = {"stateless": ["--algorithm", "fedavg", "--rounds", rounds,
                          "--out", out["stateless"]],
            "fresh": ["--algorithm", args.algorithm, "--rounds", rounds,
                      "--out", out["stateful"]],
            "resumed": ["--algorithm", args.algorithm, "--rounds", str(args.rounds + 1),
                        "--resume", "--out", out["stateful"]]}
    peaks = {}
    for label, argv in runs.items():
        seconds, peaks[label] = peak_run([*common, *argv])
        print(f"N {clients:5d}  {label:>9}: {seconds:7.1f} s, peak resident "
              f"{peaks[label]:6.2f} GB", flush=True)
    peaks["states"] = states_gb(Path(out["stateful"]))
    print(f"N {clients:5d}  client states of {args.algorithm}: {peaks['states']:.3f} GB "
          f"(from its checkpoint)", flush=True)
    return peaks


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--algorithm", default="scaffold",
                   help="a method whose client state is shaped as the word table")
    p.add_argument("--clients", type=int, nargs=2, default=(200, 400), metavar=("N1", "N2"),
                   help="the two population sizes (N2 > N1)")
    p.add_argument("--clients-per-round", type=int, default=10, help="M, sampled per round")
    p.add_argument("--vocab-size", type=int, default=20_000, help="V, at most")
    p.add_argument("--embed-dim", type=int, default=50, help="d (synthetic scene only)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--fdu-dir", default=None,
                   help="pool the real FDU-MTL domains into N clients (dirichlet_label, "
                        "alpha 1) with GloVe 6B 50d, instead of the synthetic scene")
    p.add_argument("--max-held", type=float, default=1.25)
    args = p.parse_args()
    print(f"{'FDU-MTL' if args.fdu_dir else 'synthetic'}: N = {args.clients[0]} and "
          f"{args.clients[1]} clients, {args.clients_per_round} a round, {args.algorithm} "
          f"against fedavg, V at most {args.vocab_size}", flush=True)
    with tempfile.TemporaryDirectory(prefix="host-states-") as tmp:
        small, large = (measure(args, n, tmp) for n in args.clients)
    grown = large["states"] - small["states"]
    base = large["stateless"] - small["stateless"]
    held = {}
    for label in ("fresh", "resumed"):
        held[label] = (large[label] - small[label] - base) / grown
        print(f"{label:>9}: the peak grew {large[label] - small[label]:.2f} GB (fedavg's "
              f"{base:.2f} GB) for {grown:.2f} GB more client states: held "
              f"{held[label]:.2f} x")
    worst = max(held.values())
    verdict = "ok" if worst <= args.max_held else "FAIL"
    print(f"client states held at most {worst:.2f} x (target <= {args.max_held}): {verdict}")
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
