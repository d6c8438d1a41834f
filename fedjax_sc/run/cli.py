"""Command line: ``fedjax-sc train ...`` (see ``fedjax-sc train --help``)."""

from __future__ import annotations

import argparse
import sys

from fedjax_sc.run import configs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fedjax-sc", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser(
        "train", help="federated training with Ag per round, checkpoints and a final report",
        description="Federated training. Options left out take the scene's paper preset: "
        + "; ".join(f"{s}: {v}" for s, v in configs.SCENE_DEFAULTS.items()),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    from fedjax_sc.run.train import ALGORITHMS, EMBEDDINGS, SCENES
    t.add_argument("--scene", choices=SCENES, default="synthetic")
    t.add_argument("--data-dir", help="corpus directory (fdu: the FDU-MTL folder; iyy: the "
                   "Tang et al. 2015 .ss files)")
    t.add_argument("--algorithm", choices=ALGORITHMS, default="fedavg",
                   help="fedavg; fedper / lg_fedavg (private classifier / private embedding "
                   "and BiGRU); pfl_da (private model + gate); kteps (Li et al. 2021); "
                   "arch_a/b/c (Table 8 ablation: private classifier / BiGRU+MLP / model)")
    t.add_argument("--rounds", type=int, help="federated rounds (paper: 50 fdu, 20 iyy)")
    t.add_argument("--local-epochs", type=int, default=2)
    t.add_argument("--batch-size", type=int, help="local batch size (paper: 8 fdu, 64 iyy)")
    t.add_argument("--lr", type=float, help="client learning rate (paper: 0.01 fdu, 0.1 iyy)")
    t.add_argument("--momentum", type=float, default=0.9)
    t.add_argument("--embedding-lr", type=float, help="separate learning rate of the word "
                   "embeddings (paper's IYY setting: 0.01 with --lr 0.1)")
    k = t.add_argument_group("KTEPS loss (Eq. 7-9; kteps and arch_a/b/c)")
    k.add_argument("--lambda-kt", type=float, default=0.01,
                   help="lambda1: knowledge-transfer weight")
    k.add_argument("--lambda-div", type=float, default=0.01,
                   help="lambda2: HSIC diversity weight (arch_a/b/c always use 0)")
    k.add_argument("--temperature", type=float, default=0.25, help="T of Eq. 8")
    k.add_argument("--bandwidth", type=float,
                   help="HSIC Gaussian kernel sigma (default: median heuristic per batch)")
    t.add_argument("--furl-dim", type=int, default=0,
                   help="size of a FURL private user vector concatenated to the pooled "
                   "text feature (0: none)")
    a = t.add_argument_group("personalisation phase, Ap (Eq. 16)")
    a.add_argument("--no-ap", dest="ap", action="store_false",
                   help="skip the fine-tuning phase after the last round")
    a.add_argument("--ap-evals", type=int, default=25, help="n_Z: evaluations")
    a.add_argument("--ap-steps", type=int, default=10,
                   help="z: fine-tuning steps between evaluations")
    a.add_argument("--ap-lr-mult", type=float, default=0.01,
                   help="mu: fine-tuning learning rate = mu * --lr")
    a.add_argument("--ap-mode", help="inference mode of Ap: s, p or sp for two-branch "
                   "models (default: the algorithm's: sp for kteps/arch_*/pfl_da, full "
                   "otherwise)")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--embeddings", choices=EMBEDDINGS, default="random",
                   help="initial word embeddings; glove-6b-50d needs fedjax_sc[glove]")
    t.add_argument("--embed-dim", type=int, help="d (default 200 random, 50 GloVe)")
    t.add_argument("--hidden", type=int, default=64, help="BiGRU hidden size per direction")
    t.add_argument("--mlp-hidden", type=int, default=128, help="classifier hidden width")
    t.add_argument("--max-len", type=int, help="clip/pad length L (paper: 200 fdu, 400 iyy)")
    t.add_argument("--vocab-size", type=int, default=50_000,
                   help="most frequent words kept by the federated vocabulary")
    t.add_argument("--domains", nargs="+", help="fdu: the domains to use as clients "
                   "(default: all 16)")
    t.add_argument("--dev-holdout", action="store_true",
                   help="hold out the last 200 lines of each train file as dev")
    t.add_argument("--dense-embedding", dest="local_vocab", action="store_false",
                   help="train the whole [V, d] table on every client instead of only its "
                   "local-vocabulary rows (same result, slower)")
    t.add_argument("--synthetic-clients", type=int, default=4)
    t.add_argument("--synthetic-train", type=int, default=160, help="train reviews per client")
    t.add_argument("--synthetic-test", type=int, default=200, help="test reviews per client")
    t.add_argument("--out", default="runs/latest", help="output directory")
    t.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    t.add_argument("--overwrite", action="store_true",
                   help="replace an earlier run in --out (a folder holding config.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = vars(_parser().parse_args(argv))
    command = args.pop("command")
    if args.get("domains"):
        args["domains"] = tuple(args["domains"])
    if command == "train":
        from fedjax_sc.run.train import NonFiniteUpdateError, TrainConfig, train
        try:
            train(TrainConfig(**args))
        except (NonFiniteUpdateError, FileExistsError, FileNotFoundError, ValueError) as e:
            print(f"fedjax-sc: error: {e}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
