"""The algorithms the CLI and :func:`fedjax_sc.run.train.train` can run, each with its model.

=============  ==============================================================  ==========
name           model                                                           reference
=============  ==============================================================  ==========
fedavg         TextClassifier                                                  Fig. 2(A)
fedper         TextClassifier, private classifier                              Fig. 2(B)
lg_fedavg      TextClassifier, private embedding + BiGRU                       Sec. 5.4
pfl_da         PrivateSharedClassifier(private_from="embedding", gated)        Fig. 2(C)
kteps          PrivateSharedClassifier(private_from="classifier", projection)  Fig. 3, Eq. 6-9
kteps_star     as kteps; upload PCA-compressed (d1..d2) and noised (sigma)      Alg. 1, Eq. 10-12
arch_a/b/c     PrivateSharedClassifier(private_from=classifier/encoder/         Table 8
               embedding, no projection), KTEPS loss with lambda2 = 0
fedprox        TextClassifier; loss + mu/2 ||w - w_global||^2                  Li, Sahu 2020
fedmmd         TextClassifier; loss + lambda MMD^2(local, global features)     Yao 2018
fedfusion      FusionClassifier (local + frozen global features, "multi");     Yao 2019
               private word embedding (Li et al.'s run)
fedavg_kc      TextClassifier; FedAvg + FedKC consistency on K-Means centroids  Wang 2022
fedprox_kc     TextClassifier; FedProx + FedKC                                  Wang 2022
feddyn         TextClassifier; FedAvg + dynamic regulariser (client and server   Acar 2021
               state, :mod:`fedjax_sc.algorithms.feddyn`)
moon           TextClassifier; FedAvg + model-contrastive term (client state:   Li, He 2021
               the previous local model, :mod:`fedjax_sc.algorithms.moon`)
scaffold       TextClassifier; control variates c_i, c (option II)             Karimireddy 2020
ditto          PersonalCopy(TextClassifier): global (shared), personal (private) Li, Hu 2021
fedrep         TextClassifier, private output layer; head steps, body steps    Collins 2021
fedbabu        TextClassifier; output layer frozen at its init                  Oh 2022
per_fedavg     TextClassifier; first-order (or HF) MAML meta-gradient          Fallah 2020
fedrod         FedRoDClassifier: generic head (shared) + personal head          Chen, Chao 2022
apfl           TextClassifier + its local copy and alpha (private); mixture    Deng 2020
pfedme         TextClassifier + the personalised copy theta (private)          Dinh 2020
indiv          TextClassifier, every leaf private (no communication)           Sec. 5.4
fs             TextClassifier on the pooled data (centralised)                 Fig. 2(A)
asp            ASPClassifier, centralised multi-task, adversarial              Liu 2017
=============  ==============================================================  ==========

Every model takes the optional FURL user vector (``furl_dim``, Bui et al. 2019). Every
federated algorithm uploads with the paper's noise (sigma 0.01, Sec. 5.2; ``upload_noise``,
see :func:`fedjax_sc.run.plumbing.uploads.upload_settings`) and can also upload through
KTEPS*'s compression (``pca_band``) or send its model change compressed
(``upload_compression``),
train its shared leaves with DP-SGD (``dp_clip``, ``dp_noise``) and update the server with a
FedOpt optimizer (``server_opt``, Reddi et al. 2021).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from fedjax_sc.algorithms import (
    apfl,
    compression,
    ditto,
    fedbabu,
    feddyn,
    fedkc,
    fedmmd,
    fedopt,
    fedprox,
    fedrep,
    fedrod,
    moon,
    per_fedavg,
    pfedme,
    scaffold,
)
from fedjax_sc.algorithms.asp import asp
from fedjax_sc.algorithms.base import MULTITASK_SCHEDULES, Algorithm, chain
from fedjax_sc.algorithms.context import BuildContext, ReadOptions, is_spec, load
from fedjax_sc.algorithms.dp_sgd import dp_sgd
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.fs import fs
from fedjax_sc.algorithms.hparams import is_zero
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.losses import HSIC_NORMALIZATIONS
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.models.asp import ASPClassifier
from fedjax_sc.models.fusion import CONV_INITS, FUSIONS, FusionClassifier
from fedjax_sc.models.generic_personal import FedRoDClassifier
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier
from fedjax_sc.run.plumbing.uploads import run_upload, upload_settings

SINGLE_BRANCH = {"fedavg": fedavg, "fedper": fedper, "lg_fedavg": lg_fedavg, "indiv": indiv,
                 "fs": fs}
PLUG_INS = ("fedprox", "fedmmd", "fedavg_kc", "fedprox_kc", "feddyn", "moon")
"""FedAvg with plug-in loss terms (built in :func:`build_algorithm`)."""
OWN_MODEL = ("fedfusion", "asp")
TWO_BRANCH = {  # name: (private_from, projection, gated)
    "kteps": ("classifier", True, False),
    "kteps_star": ("classifier", True, False),
    "pfl_da": ("embedding", False, True),
    "arch_a": ("classifier", False, False),
    "arch_b": ("encoder", False, False),
    "arch_c": ("embedding", False, False),
}
NO_UPLOAD = ("indiv", "fs", "asp")
"""Trained without uploads (each client alone, or centrally): no upload noise by default."""
BEYOND: dict[str, tuple[Callable[..., Algorithm], Callable[..., Any]]] = {
    "scaffold": (scaffold.scaffold, TextClassifier),
    "ditto": (ditto.ditto, TextClassifier),
    "fedrep": (fedrep.fedrep, TextClassifier),
    "fedbabu": (fedbabu.fedbabu, TextClassifier),
    "per_fedavg": (per_fedavg.per_fedavg, TextClassifier),
    "fedrod": (fedrod.fedrod, FedRoDClassifier),
    "apfl": (apfl.apfl, TextClassifier),
    "pfedme": (pfedme.pfedme, TextClassifier),
}
"""Methods beyond the paper, each ``name: (builder, model)``: the builder gets the model at the
run's sizes, the client SGD, ``num_clients`` where its signature asks for it, and the options
of :data:`OPTIONS` declared on it (its own hyperparameters)."""
ALGORITHMS = (tuple(SINGLE_BRANCH) + PLUG_INS + OWN_MODEL + tuple(TWO_BRANCH)
              + tuple(BEYOND))

KTEPS_LOSS = ("kteps", "kteps_star", "arch_a", "arch_b", "arch_c")
KC = ("fedavg_kc", "fedprox_kc")


class Option(NamedTuple):
    """One option of :func:`build_algorithm`, declared once: its default is the builder
    parameter's (read from the signature, :func:`default`), and the ``TrainConfig`` field,
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
    "lambda_kt": Option(kteps, "lambda_kt", "lambda1: knowledge-transfer weight", KTEPS_LOSS,
                        True, "kteps"),
    "lambda_div": Option(kteps, "lambda_div", "lambda2: HSIC diversity weight (arch_a/b/c "
                         "always use 0)", KTEPS_LOSS, True, "kteps"),
    "temperature": Option(kteps, "temperature", "T of Eq. 8", KTEPS_LOSS, group="kteps"),
    "bandwidth": Option(kteps, "bandwidth", "HSIC Gaussian kernel sigma (default: median "
                        "heuristic per batch)", KTEPS_LOSS, group="kteps", type=float),
    "hsic_normalization": Option(kteps, "hsic_normalization", "biased: the trace over "
                                 "(n - 1)^2 (Gretton et al.; default); none: the trace alone, "
                                 "49x larger at batch 8 (docs/choices.md)", KTEPS_LOSS,
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
}
"""The options of :func:`build_algorithm` (the CLI's and ``TrainConfig``'s names): adding one
is a builder parameter (its default) and one line here (plus its ``TrainConfig`` field)."""

READ_BY: dict[str, tuple[str, ...]] = {k: o.read_by for k, o in OPTIONS.items()
                                       if o.read_by is not None}
"""The options of :data:`OPTIONS` that only some algorithms read, and which: a run of any
other algorithm is the same run whatever their values (a resume or a store compares only
what the run's algorithm reads, :func:`fedjax_sc.run.config.config_diff`). An option not
listed here is read by every algorithm. :func:`build_algorithm` sees only the options its
algorithm reads by this table, so a builder that reads another fails loudly."""


def config_field(option: str) -> str:
    """The ``TrainConfig`` field of an option of :data:`OPTIONS`."""
    return OPTIONS[option].field or option


def reads(name: str, option: str) -> bool:
    """Whether algorithm ``name`` reads ``option`` (a field of ``TrainConfig``): False only
    for an option of :data:`READ_BY` that ``name`` is not listed under (a user's algorithm,
    ``FILE.py:FUNCTION``, reads none of them)."""
    return name in READ_BY.get(option, (name,))


def known(name: str) -> bool:
    """Whether ``name`` is a built-in algorithm or a user's ``FILE.py:FUNCTION`` spec (whose
    loading is checked when it is built)."""
    return name in ALGORITHMS or is_spec(name)


def default(option: str) -> Any:
    """The default of an option of :data:`OPTIONS`, read from its builder's signature.

    Raises:
      KeyError: an unknown option.
    """
    o = OPTIONS[option]
    return inspect.signature(o.builder).parameters[o.param].default


def build_algorithm(name: str, *, vocab_size: int, num_classes: int, embed_dim: int,
                    num_clients: int | None = None, pca_band: tuple[int, int] | None = None,
                    upload_noise: float | None = None, upload_compression: str = "none",
                    dp_clip: float | None = None, dp_noise: float = 0.0,
                    server_opt: str | None = None,
                    algorithm_options: Mapping[str, Any] | None = None,
                    **options: Any) -> Algorithm:
    """The model and algorithm called ``name`` (see the module table).

    Args:
      name: a key of :data:`ALGORITHMS`.
      vocab_size, num_classes, embed_dim: the model's V, C and d.
      num_clients: ASP's number of domains.
      pca_band, upload_noise: the upload's PCA band (d1, d2) and noise sigma; None: the
        algorithm's (:func:`fedjax_sc.run.plumbing.uploads.upload_settings`).
      upload_compression: the model change compressed (:func:`fedjax_sc.run.plumbing.uploads.
        compression`: ``none``, ``topk:FRACTION``, ``bits:BITS``), before band and noise.
      dp_clip, dp_noise: DP-SGD on the shared leaves (C, None = off; noise multiplier z).
      server_opt: a FedOpt server (None: the aggregate is the new model).
      algorithm_options: a user's algorithm's own settings (:func:`user_algorithm`).
      **options: any of :data:`OPTIONS`; one left out takes its builder's default. The loss settings
        (lambda_kt, lambda_div, temperature, bandwidth, hsic_normalization) apply to kteps,
        kteps_star and arch_a/b/c (the ablation always uses lambda_div = 0, Table 8); prox_mu
        (fedprox, fedprox_kc), mmd_weight, fusion, kc_* and asp_* set the baselines.

    Raises:
      ValueError: an unknown name or option (the message lists the known ones) or invalid
        settings.
    """
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown options {unknown}; known: {sorted(OPTIONS)}")
    if is_spec(name):
        return user_algorithm(name, vocab_size=vocab_size, num_classes=num_classes,
                              embed_dim=embed_dim, num_clients=num_clients, pca_band=pca_band,
                              upload_noise=upload_noise, upload_compression=upload_compression,
                              dp_clip=dp_clip, dp_noise=dp_noise, server_opt=server_opt,
                              algorithm_options=algorithm_options, **options)
    if algorithm_options:
        raise ValueError(f"{name} is built in: its settings have flags of their own, not "
                         f"--algorithm-option ({', '.join(algorithm_options)})")
    # only what READ_BY says the algorithm reads: reading any other option is a KeyError, so
    # the table that resume and the stores compare by cannot drift from what is built here
    o = {k: options[k] if k in options else default(k) for k in OPTIONS if reads(name, k)}
    dims: dict[str, Any] = dict(vocab_size=vocab_size, embed_dim=embed_dim, hidden=o["hidden"],
                                mlp_hidden=o["mlp_hidden"], num_classes=num_classes,
                                furl_dim=o["furl_dim"], dtype=o["dtype"])
    opt = dict(learning_rate=o["learning_rate"], momentum=o["momentum"],
               embedding_learning_rate=o["embedding_learning_rate"])
    pca_band, upload_noise = upload_settings(name, embed_dim, pca_band, upload_noise)
    if name in SINGLE_BRANCH:
        algorithm = SINGLE_BRANCH[name](TextClassifier(**dims), **opt)
    elif name in PLUG_INS:
        algorithm = fedavg(TextClassifier(**dims), **opt)
        if name in ("fedprox", "fedprox_kc"):
            algorithm = fedprox.proximal(algorithm, o["prox_mu"])
        if name == "fedmmd":
            algorithm = fedmmd.mmd_penalty(algorithm, o["mmd_weight"],
                                           kernel=o["mmd_kernel"])
        if name == "feddyn":
            if not num_clients:
                raise ValueError("feddyn needs num_clients (the server's mean over every client)")
            algorithm = feddyn.dynamic_regularizer(algorithm, num_clients, o["dyn_alpha"])
        if name == "moon":
            algorithm = moon.model_contrastive(algorithm, o["moon_mu"], o["moon_temperature"])
        if name.endswith("_kc"):
            algorithm = fedkc.fedkc(algorithm, o["kc_clusters"], o["kc_iterations"],
                                    o["kc_weight"])
        algorithm = algorithm._replace(name=name)
    elif name == "fedfusion":
        if dims.pop("furl_dim"):
            raise ValueError("fedfusion has no FURL user vector (furl_dim must be 0)")
        model = FusionClassifier(**dims, fusion=o["fusion"], fusion_init=o["fusion_init"])
        algorithm = fedfusion(model, **opt, private_embedding=o["fusion_private_embedding"],
                              gamma_momentum=o["fusion_gamma_momentum"])
    elif name == "asp":
        if not num_clients:
            raise ValueError("asp needs num_clients (its number of domains)")
        if dims.pop("furl_dim"):
            raise ValueError("asp has no FURL user vector (furl_dim must be 0)")
        algorithm = asp(ASPClassifier(**dims, num_domains=num_clients), **opt,
                        adversarial=o["asp_adversarial"], orthogonal=o["asp_orthogonal"],
                        schedule=o["asp_schedule"])
    elif name in TWO_BRANCH:
        private_from, projection, gated = TWO_BRANCH[name]
        model = PrivateSharedClassifier(**dims, private_from=private_from,
                                        projection=projection, gated=gated)
        if name == "pfl_da":
            algorithm = pfl_da(model, **opt)
        else:
            algorithm = kteps(model, **opt, lambda_kt=o["lambda_kt"],
                              lambda_div=0.0 if name.startswith("arch_") else o["lambda_div"],
                              temperature=o["temperature"], bandwidth=o["bandwidth"],
                              hsic_normalization=o["hsic_normalization"], name=name)
    elif name in BEYOND:
        builder, model_class = BEYOND[name]
        own = {OPTIONS[k].param: o[k] for k in o if OPTIONS[k].builder is builder}
        if "num_clients" in inspect.signature(builder).parameters:
            if not num_clients:
                raise ValueError(f"{name} needs num_clients (the server's mean over every "
                                 f"client)")
            own["num_clients"] = num_clients
        algorithm = builder(model_class(**dims), **opt, **own)
    else:
        raise ValueError(f"unknown algorithm {name!r}; choose from {ALGORITHMS}")
    algorithm = algorithm._replace(upload=run_upload(pca_band, upload_noise, o["pca_center"],
                                                     upload_compression))
    return _run_wrappers(algorithm, o, dp_clip, dp_noise, server_opt)


def _run_wrappers(algorithm: Algorithm, o: dict[str, Any], dp_clip: float | None,
                  dp_noise: float, server_opt: str | None) -> Algorithm:
    """DP-SGD and a FedOpt server, as the run's flags ask, around any algorithm."""
    if dp_clip is not None:
        algorithm = dp_sgd(algorithm, dp_clip, dp_noise)
    if server_opt is not None:
        try:
            algorithm = fedopt.fedopt(algorithm, server_opt, o["server_lr"],
                                      o["server_momentum"], o["server_tau"])
        except ValueError as e:  # the flag named, the reason fedopt's
            raise ValueError(f"--server-opt {server_opt}: {e}") from None
    return algorithm


def user_algorithm(spec: str, *, vocab_size: int, num_classes: int, embed_dim: int,
                   num_clients: int | None, pca_band: tuple[int, int] | None = None,
                   upload_noise: float | None = None, upload_compression: str = "none",
                   dp_clip: float | None = None, dp_noise: float = 0.0,
                   server_opt: str | None = None,
                   algorithm_options: Mapping[str, Any] | None = None,
                   **options: Any) -> Algorithm:
    """A researcher's algorithm, ``spec`` = ``path/to/file.py:FUNCTION`` or
    ``package.module:FUNCTION``: ``FUNCTION(BuildContext)`` (:mod:`fedjax_sc.algorithms.
    context`) returns it; the run's upload flags (``--upload-compression``, ``--pca-band``,
    ``--upload-noise``, chained after the algorithm's own upload), ``--dp-clip`` and
    ``--server-opt`` wrap it as they wrap a built-in one. Only the options every algorithm
    reads apply (lr, momentum, sizes); its own come in ``algorithm_options``
    (``context.options``).

    Raises:
      ValueError: the function cannot be loaded, does not return an ``Algorithm``, or never
        read one of ``algorithm_options``.
    """
    o = {k: options[k] if k in options else default(k) for k in OPTIONS if reads(spec, k)}
    context = BuildContext(vocab_size=vocab_size, num_classes=num_classes, embed_dim=embed_dim,
                           hidden=o["hidden"], mlp_hidden=o["mlp_hidden"],
                           furl_dim=o["furl_dim"], dtype=o["dtype"],
                           num_clients=int(num_clients or 0), learning_rate=o["learning_rate"],
                           momentum=o["momentum"],
                           embedding_learning_rate=o["embedding_learning_rate"],
                           options=ReadOptions(algorithm_options or {}))
    algorithm = load(spec)(context)
    if not isinstance(algorithm, Algorithm):
        raise ValueError(f"--algorithm {spec!r} returned {type(algorithm).__name__}, not a "
                         f"fedjax_sc.Algorithm")
    if context.options.unread:
        raise ValueError(f"--algorithm-option {', '.join(context.options.unread)}: {spec} "
                         f"never reads it (a builder reads context.options[NAME] while it "
                         f"builds)")
    pca_band, upload_noise = upload_settings(spec, embed_dim, pca_band, upload_noise)
    if pca_band is not None or not is_zero(upload_noise) or upload_compression != "none":
        algorithm = algorithm._replace(upload=chain(algorithm.upload, run_upload(
            pca_band, upload_noise, o["pca_center"], upload_compression)))
    return _run_wrappers(algorithm, o, dp_clip, dp_noise, server_opt)
