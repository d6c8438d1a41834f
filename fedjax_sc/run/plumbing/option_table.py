"""The options of :func:`~fedjax_sc.run.registry.build_algorithm`, each declared once
(:class:`Option`): the builder parameter it sets (whose signature gives its default), its
``TrainConfig`` field and flag, the algorithms that read it and whether a population may trace
it. :mod:`fedjax_sc.run.registry` builds the algorithms from them (and re-exports these
names); :mod:`fedjax_sc.run.options` writes the flags."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from fedjax_sc.algorithms import (
    apfl,
    compression,
    ditto,
    feddyn,
    fedkc,
    fedmmd,
    fedopt,
    fedprox,
    fedrep,
    fedrod,
    kept_optimizer,
    moon,
    per_fedavg,
    pfedme,
    scaffold,
)
from fedjax_sc.algorithms.asp import asp
from fedjax_sc.algorithms.base import MULTITASK_SCHEDULES
from fedjax_sc.algorithms.context import is_spec
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.losses import HSIC_NORMALIZATIONS
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.models.fusion import CONV_INITS, FUSIONS, FusionClassifier
from fedjax_sc.models.text_classifier import TextClassifier
from fedjax_sc.run.plumbing.flags import flag

KTEPS_LOSS = ("kteps", "kteps_star", "arch_a", "arch_b", "arch_c")
"""The algorithms that read KTEPS's knowledge-transfer options (lambda1, T)."""
HSIC_LOSS = ("kteps", "kteps_star")
"""The algorithms that read its HSIC diversity options (lambda2, the kernel's bandwidth, the
normalisation): Table 8's architectures train without the term (lambda2 = 0)."""
KC = ("fedavg_kc", "fedprox_kc")
"""The algorithms that read FedKC's options."""


class Option(NamedTuple):
    """One option of :func:`~fedjax_sc.run.registry.build_algorithm`, declared once: its
    default is the builder parameter's (read from the signature, :func:`default`), and the
    ``TrainConfig`` field,
    the command-line flag (for a ``group``), which algorithms read it and whether a
    population may trace it all come from here.

    Attributes:
      builder, param: the builder and its parameter that the option sets.
      help: the flag's help ("" for an option whose flag is written by hand).
      read_by: the algorithms that read it (None: every algorithm).
      traced: a population may vary it as a traced value (``--grid``, one program).
      group: the flag group it is generated in (``kteps``, ``baselines``), or None where
        :mod:`fedjax_sc.run.options` writes its flag by hand.
      choices: the flag's choices (None: any value of the default's type).
      field: the ``TrainConfig`` field (None: the option's name).
      type: the flag's type (None: the default's).
    """

    builder: Callable
    param: str
    help: str = ""
    read_by: tuple[str, ...] | None = None
    traced: bool = False
    group: str | None = None
    choices: tuple[str, ...] | None = None
    field: str | None = None
    type: Callable | None = None


OPTIONS: dict[str, Option] = {
    "learning_rate": Option(fedavg, "learning_rate", traced=True, field="lr"),
    "momentum": Option(client_sgd, "momentum", traced=True),
    "embedding_learning_rate": Option(client_sgd, "embedding_learning_rate",
                                      field="embedding_lr"),
    "hidden": Option(TextClassifier, "hidden"),
    "mlp_hidden": Option(TextClassifier, "mlp_hidden"),
    "furl_dim": Option(TextClassifier, "furl_dim"),
    "dtype": Option(TextClassifier, "dtype"),
    "gru_init": Option(TextClassifier, "gru_init"),
    "lambda_kt": Option(kteps, "lambda_kt", "lambda1: knowledge-transfer weight", KTEPS_LOSS,
                        True, "kteps"),
    "lambda_div": Option(kteps, "lambda_div", "lambda2: HSIC diversity weight (kteps, "
                         "kteps_star; Table 8's arch_a/b/c train without it)", HSIC_LOSS,
                         True, "kteps"),
    "temperature": Option(kteps, "temperature", "T of Eq. 8", KTEPS_LOSS, group="kteps"),
    "bandwidth": Option(kteps, "bandwidth", "HSIC Gaussian kernel sigma (default: median "
                        "heuristic per batch)", HSIC_LOSS, group="kteps", type=float),
    "hsic_normalization": Option(kteps, "hsic_normalization", "biased: the trace over "
                                 "(n - 1)^2 (Gretton et al.; default); none: the trace alone, "
                                 "49x larger at batch 8 (docs/choices.md)", HSIC_LOSS,
                                 group="kteps", choices=HSIC_NORMALIZATIONS),
    "pca_center": Option(compression.pca_compress, "center"),
    "prox_mu": Option(fedprox.proximal, "mu", "FedProx mu (fedprox, fedprox_kc)",
                      ("fedprox", "fedprox_kc"), True, "baselines"),
    "dyn_alpha": Option(feddyn.dynamic_regularizer, "alpha", "FedDyn alpha (feddyn)",
                        ("feddyn",), True, "baselines"),
    "moon_mu": Option(moon.model_contrastive, "mu", "MOON mu, the contrastive term's weight "
                      "(moon; Li, He and Song 2021)", ("moon",), True, "baselines"),
    "moon_temperature": Option(moon.model_contrastive, "temperature", "MOON temperature tau "
                               "(moon)", ("moon",), group="baselines"),
    "scaffold_global_lr": Option(scaffold.scaffold, "global_lr", "SCAFFOLD global step size "
                                 "eta_g (scaffold; Karimireddy et al. 2020)", ("scaffold",),
                                 True, "baselines"),
    "ditto_lambda": Option(ditto.ditto, "lam", "Ditto lambda, the pull of each personal model "
                           "towards the global one (ditto; Li, Hu, Beirami and Smith 2021)",
                           ("ditto",), True, "baselines"),
    "rep_head_steps": Option(fedrep.fedrep, "head_steps", "FedRep tau_h: the real local steps "
                             "of a round that train the private head (body frozen) before the "
                             "body steps (head frozen); 200 is one epoch of an FDU client "
                             "(fedrep; Collins et al. 2021)", ("fedrep",), True, "baselines"),
    "rod_label_prior": Option(fedrod.fedrod, "label_prior", "FedRoD's class counts N_c of the "
                              "balanced softmax: the client's training split (the authors') or "
                              "the step's mini-batch (fedrod; Chen and Chao 2022)", ("fedrod",),
                              group="baselines", choices=fedrod.LABEL_PRIORS),
    "perfedavg_alpha": Option(per_fedavg.per_fedavg, "alpha", "Per-FedAvg alpha, the inner "
                              "(adaptation) step size; beta is --lr (per_fedavg; Fallah, "
                              "Mokhtari and Ozdaglar 2020)", ("per_fedavg",), True,
                              "baselines"),
    "perfedavg_variant": Option(per_fedavg.per_fedavg, "variant", "Per-FedAvg fo (first "
                                "order) or hf (Hessian-free, an exact Hessian-vector product) "
                                "(per_fedavg)", ("per_fedavg",), group="baselines",
                                choices=per_fedavg.VARIANTS),
    "apfl_alpha": Option(apfl.apfl, "alpha", "APFL alpha_i's initial value in [0, 1] (apfl; "
                         "Deng, Kamani and Mahdavi 2020)", ("apfl",), group="baselines"),
    "apfl_alpha_lr": Option(apfl.apfl, "alpha_learning_rate", "APFL alpha's step size "
                            "(default: the client LR; 0 fixes alpha)", ("apfl",), True,
                            "baselines", type=float),
    "pfedme_lambda": Option(pfedme.pfedme, "lam", "pFedMe lambda, the proximal weight "
                            "(pfedme; Dinh, Tran and Nguyen 2020)", ("pfedme",), True,
                            "baselines"),
    "pfedme_k": Option(pfedme.pfedme, "steps", "pFedMe K, inner steps per local step",
                       ("pfedme",), group="baselines"),
    "pfedme_personal_lr": Option(pfedme.pfedme, "personal_learning_rate", "pFedMe personal "
                                 "learning rate of the inner steps", ("pfedme",), True,
                                 "baselines"),
    "pfedme_beta": Option(pfedme.pfedme, "beta", "pFedMe beta, the server's step towards the "
                          "clients' mean (1: the mean)", ("pfedme",), True, "baselines"),
    "mmd_weight": Option(fedmmd.mmd_penalty, "weight", "FedMMD lambda", ("fedmmd",), True,
                         "baselines"),
    "mmd_kernel": Option(fedmmd.mmd_penalty, "kernel", "FedMMD kernel: the sum of 19 Gaussian "
                         "kernels of Yao et al.'s code, or one Gaussian of median-heuristic "
                         "width", ("fedmmd",), group="baselines", choices=("multi", "median")),
    "fusion": Option(FusionClassifier, "fusion", "FedFusion operator (Yao et al. 2019)",
                     ("fedfusion",), group="baselines", choices=FUSIONS),
    "fusion_init": Option(FusionClassifier, "fusion_init", "FedFusion conv operator's init: "
                          "PyTorch's default as in Yao et al.'s code, or [I/2, I/2] (the plain "
                          "model)", ("fedfusion",), group="baselines", choices=CONV_INITS),
    "fusion_private_embedding": Option(fedfusion, "private_embedding", read_by=("fedfusion",)),
    "fusion_gamma_momentum": Option(fedfusion, "gamma_momentum", "FedFusion multi/single: the "
                                    "server's momentum on the fusion weight, as in Yao et "
                                    "al.'s code", ("fedfusion",), group="baselines"),
    "kc_clusters": Option(fedkc.fedkc, "num_clusters", "FedKC K-Means clusters q", KC,
                          group="baselines"),
    "kc_iterations": Option(fedkc.fedkc, "iterations", "FedKC Lloyd iterations", KC,
                            group="baselines"),
    "kc_weight": Option(fedkc.fedkc, "weight", "FedKC consistency alpha", KC,
                        group="baselines"),
    "asp_adversarial": Option(asp, "adversarial", "ASP lambda_adv (Liu et al. 2017)",
                              ("asp",), group="baselines"),
    "asp_orthogonal": Option(asp, "orthogonal", "ASP orthogonality gamma (Liu et al. 2017)",
                             ("asp",), group="baselines"),
    "asp_schedule": Option(asp, "schedule", "ASP's multi-task steps: one domain's batch per "
                           "step (Liu et al.'s loop) or every domain's batch per step with the "
                           "gradients summed", ("asp",), group="baselines",
                           choices=MULTITASK_SCHEDULES),
    "server_lr": Option(fedopt.fedopt, "learning_rate", traced=True),
    "server_momentum": Option(fedopt.fedopt, "momentum", traced=True),
    "server_tau": Option(fedopt.fedopt, "tau"),
    "client_optimizer_state": Option(kept_optimizer.client_optimizer_state, "state",
                                     choices=kept_optimizer.CLIENT_OPTIMIZER_STATES),
}
"""The options of :func:`~fedjax_sc.run.registry.build_algorithm` (the CLI's and
``TrainConfig``'s names): adding one is a builder parameter (its default) and one line here
(plus its ``TrainConfig`` field)."""

READ_BY: dict[str, tuple[str, ...]] = {k: o.read_by for k, o in OPTIONS.items()
                                       if o.read_by is not None}
"""The options of :data:`OPTIONS` that only some algorithms read, and which: a run of any
other algorithm is the same run whatever their values (a resume or a store compares only
what the run's algorithm reads, :func:`fedjax_sc.run.config_file.config_diff`). An option not
listed here is read by every algorithm. :func:`~fedjax_sc.run.registry.build_algorithm` sees
only the options its algorithm reads by this table, so a builder that reads another fails
loudly."""


def config_field(option: str) -> str:
    """The ``TrainConfig`` field of an option of :data:`OPTIONS`."""
    return OPTIONS[option].field or option


def reads(name: str, option: str) -> bool:
    """Whether algorithm ``name`` reads ``option`` (a field of ``TrainConfig``): False only
    for an option of :data:`READ_BY` that ``name`` is not listed under (a user's algorithm,
    ``FILE.py:FUNCTION``, reads none of them)."""
    return name in READ_BY.get(option, (name,))


def refuse_unread(name: str, fields: Iterable[str]) -> None:
    """Refuses a setting that the caller gave itself (``fields``: ``TrainConfig`` field names,
    e.g. the flags on a command line) which algorithm ``name`` does not read
    (:data:`READ_BY`): its run would be the same without it, so the value would be dropped
    without a word (``--prox-mu 0.1 --algorithm fedavg``). Names that are not options of
    :data:`READ_BY` pass.

    Raises:
      ValueError: one line naming the flag, the algorithm and those that read it.
    """
    options = {config_field(k): k for k in READ_BY}
    for field in sorted(fields):
        option = options.get(field)
        if option is not None and not reads(name, option):
            own = (f" (an option of your algorithm's own, --algorithm-option or --grid "
                   f"NAME=..., needs a name other than the library's {field})"
                   if is_spec(name) else "")
            raise ValueError(f"{flag(field)} is not read by --algorithm {name} (only by "
                             f"{', '.join(READ_BY[option])}): the run would be the same "
                             f"without it; leave it out{own}")



def default(option: str) -> Any:
    """The default of an option of :data:`OPTIONS`, read from its builder's signature.

    Raises:
      KeyError: an unknown option.
    """
    o = OPTIONS[option]
    return inspect.signature(o.builder).parameters[o.param].default
