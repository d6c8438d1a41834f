"""How much of the frozen global extractor does a FedFusion global model read?

FedFusion's ``multi`` and ``single`` operators (Yao et al. 2019, "Towards Faster and Better
Federated Learning: A Feature Fusion Approach") feed the classifier
``gamma * o_global + (1 - gamma) * o_local``: ``gamma`` is the share of the frozen reference
extractor's features, ``1 - gamma`` the share of the trained one (and the factor on the
gradient that reaches it). This restores a run's checkpoints and prints the global model's
``gamma`` (one value for ``single``, one per feature channel for ``multi``: mean, median,
min, max); for ``conv`` it prints the singular values of the two blocks of the fused layer,
the one that reads the trained features and the one that reads the reference's.

    python examples/fusion_weights.py RUN_DIR [ROUND ...]

Needs the run's corpus (its config names it) and its saved checkpoints (the latest one
without ROUND).
"""

from __future__ import annotations

import argparse

import numpy as np

from fedjax_sc.run.setup import global_params, restore_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a FedFusion run's folder")
    parser.add_argument("rounds", nargs="*", type=int, help="rounds to read (default: latest)")
    args = parser.parse_args()
    for wanted in args.rounds or [None]:
        try:
            run = restore_run(args.run, wanted)
        except (FileNotFoundError, ValueError) as e:
            raise SystemExit(f"error: {e}") from None
        config, step = run.config, run.round
        if config.algorithm != "fedfusion":
            raise SystemExit(f"{args.run}: a {config.algorithm} run, not fedfusion")
        fuse = global_params(run.setup, run.state.params)["fuse"]
        if "gamma" in fuse:
            g = np.asarray(fuse["gamma"])
            print(f"round {step} ({config.fusion}): gamma, the reference's share: mean "
                  f"{g.mean():.3f}, median {np.median(g):.3f}, min {g.min():.3f}, "
                  f"max {g.max():.3f} over {g.size} channel(s)")
        else:
            kernel = np.asarray(fuse["conv"]["kernel"])  # [2f, f], rows: trained, reference
            f = kernel.shape[1]
            for name, block in (("trained", kernel[:f]), ("reference", kernel[f:])):
                sv = np.linalg.svd(block, compute_uv=False)
                print(f"round {step} (conv): block reading the {name} features: singular "
                      f"values median {np.median(sv):.2f}, max {sv.max():.2f}")


if __name__ == "__main__":
    main()
