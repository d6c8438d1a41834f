"""How a FedFusion model is evaluated matters: the personalised accuracy of round r's model when
it fuses its features with themselves (what ``fedjax-sc train`` logs today) and when it fuses
them with round r-1's model, the frozen extractor its clients trained against (what Yao et al.'s
code, thu-media/FedFusion, keeps in the model's state and tests the global model with).

    python examples/fedfusion_reference_check.py RUN_FOLDER --round 5

RUN_FOLDER is a FedFusion run with checkpoints of rounds r - 1 and r.
"""

import argparse

import numpy as np

from fedjax_sc.algorithms.masking import merge
from fedjax_sc.core.evaluate import make_evaluate, make_personal_evaluate, mean_accuracy
from fedjax_sc.data.client_data import client_data
from fedjax_sc.run import setup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run")
    parser.add_argument("--round", type=int, required=True)
    args = parser.parse_args()
    c, ckpt, _ = setup.load_run(args.run, args.round)
    scene = setup.load_checked_scene(c, args.run)
    base = setup.build_setup(c, scene, log=lambda _: None)
    algorithm = base.algorithm
    now = setup.restore_checkpoint(ckpt, args.round, base.state, base.client_states)
    before = setup.restore_checkpoint(ckpt, args.round - 1, base.state, base.client_states)
    test = client_data(scene.test)
    alone = make_personal_evaluate(algorithm.predict)((now[0].params, now[1].private), test)
    print(f"round {args.round}, features fused with themselves: "
          f"{100 * mean_accuracy(alone['full']):.2f}")

    def fused_with_previous(both, tokens):
        (shared, private), (ref_shared, ref_private) = both
        return algorithm.predict(merge(shared, private), tokens, merge(ref_shared, ref_private))

    evaluate = make_evaluate(fused_with_previous, 200, stacked_params=((None, 0), (None, 0)))
    anchored = evaluate(((now[0].params, now[1].private),
                         (before[0].params, before[1].private)), test)
    print(f"round {args.round}, fused with round {args.round - 1}'s extractor: "
          f"{100 * mean_accuracy(anchored['full']):.2f}")
    kernel = np.asarray(now[0].params["fuse"]["conv"]["kernel"])
    f = kernel.shape[1]
    print(f"fusion kernel: mean diagonal local {np.mean(np.diag(kernel[:f])):.3f}, "
          f"global {np.mean(np.diag(kernel[f:])):.3f}")


if __name__ == "__main__":
    main()
