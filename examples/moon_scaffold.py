"""MOON's model-contrastive term (Li, He and Song 2021) and SCAFFOLD's control variates
(Karimireddy et al. 2020, option II) on one FedAvg, written outside the package: two methods
that each own state, side by side with ``fsc.methods.named_chain``:

    fedjax-sc train --algorithm examples/moon_scaffold.py:moon_scaffold --scene synthetic
    fedjax-sc train --algorithm examples/moon_scaffold.py:moon_scaffold \\
        --algorithm-option mu=0 ...   # SCAFFOLD alone, to the last digit

Each client keeps ``{"moon": (its previous model, flag), "scaffold": c_i}``, the server
``{"moon": (), "scaffold": c}``; MOON's term reads the first, SCAFFOLD's correction and hooks
the second (docs/own-algorithm.md, "Two methods that own state, side by side").
"""

import fedjax_sc as fsc
from fedjax_sc.methods import control_variates, moon, named_chain


def moon_scaffold(context: fsc.BuildContext) -> fsc.Algorithm:
    """MOON (its mu from ``--algorithm-option mu=``, default 1) with SCAFFOLD's variates."""
    lr, rho = context.learning_rate, context.momentum
    return named_chain(
        moon(context.text_classifier(), lr, rho, mu=context.options.get("mu", 1.0)),
        ("scaffold", lambda a: control_variates(a, lr, rho, context.num_clients)))
