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

Every model takes the optional FURL user vector (``furl_dim``, Bui et al. 2019). On the
paper's scenes (fdu, iyy) every federated algorithm uploads with the paper's noise (sigma
0.01, Sec. 5.2; elsewhere the builder's: none but kteps_star's; ``upload_noise``, see
:func:`fedjax_sc.run.plumbing.uploads.upload_settings`) and can also upload through
KTEPS*'s compression (``pca_band``) or send its model change compressed
(``upload_compression``),
train its shared leaves with DP-SGD (``dp_clip``, ``dp_noise``) and update the server with a
FedOpt optimizer (``server_opt``, Reddi et al. 2021).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from fedjax_sc.algorithms import (
    apfl,
    ditto,
    fedbabu,
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
from fedjax_sc.algorithms.base import Algorithm, chain, identity_upload
from fedjax_sc.algorithms.context import BuildContext, ReadOptions, is_spec, load
from fedjax_sc.algorithms.dp_sgd import NO_NOISE, dp_sgd
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.fs import fs
from fedjax_sc.algorithms.hparams import is_zero
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.models.asp import ASPClassifier
from fedjax_sc.models.fusion import FusionClassifier
from fedjax_sc.models.generic_personal import FedRoDClassifier
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier
from fedjax_sc.run.plumbing.flags import flag
from fedjax_sc.run.plumbing.option_table import (  # noqa: F401 (re-exported)
    KC,
    KTEPS_LOSS,
    OPTIONS,
    READ_BY,
    Option,
    config_field,
    default,
    reads,
)
from fedjax_sc.run.plumbing.uploads import NO_COMPRESSION, run_upload, upload_settings

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

def known(name: str) -> bool:
    """Whether ``name`` is a built-in algorithm or a user's ``FILE.py:FUNCTION`` spec (whose
    loading is checked when it is built)."""
    return name in ALGORITHMS or is_spec(name)


def build_algorithm(name: str, *, vocab_size: int, num_classes: int, embed_dim: int,
                    num_clients: int | None = None, pca_band: tuple[int, int] | None = None,
                    upload_noise: float | None = None, upload_compression: str = NO_COMPRESSION,
                    dp_clip: float | None = None, dp_noise: float = NO_NOISE,
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
        (lambda_kt, temperature) apply to kteps, kteps_star and arch_a/b/c, the HSIC's
        (lambda_div, bandwidth, hsic_normalization) to kteps and kteps_star (the ablation
        trains without it: lambda_div = 0, Table 8); prox_mu
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
                                furl_dim=o["furl_dim"], dtype=o["dtype"],
                                gru_init=o["gru_init"])
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
            hsic = {k: o.get(k, 0.0 if k == "lambda_div" else default(k))  # arch_*: off
                    for k in ("lambda_div", "bandwidth", "hsic_normalization")}
            algorithm = kteps(model, **opt, lambda_kt=o["lambda_kt"],
                              temperature=o["temperature"], **hsic, name=name)
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
    """The client optimizer's state kept, DP-SGD and a FedOpt server, as the run's flags ask,
    around any algorithm."""
    algorithm = kept_optimizer.client_optimizer_state(algorithm, o["client_optimizer_state"])
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
                   upload_noise: float | None = None, upload_compression: str = NO_COMPRESSION,
                   dp_clip: float | None = None, dp_noise: float = NO_NOISE,
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
                           options=ReadOptions(algorithm_options or {}),
                           gru_init=o["gru_init"])
    algorithm = load(spec)(context)
    if not isinstance(algorithm, Algorithm):
        raise ValueError(f"--algorithm {spec!r} returned {type(algorithm).__name__}, not a "
                         f"fedjax_sc.Algorithm")
    clash = [k for k in context.options.read if k in RESERVED]
    if clash:
        raise ValueError(f"{spec} reads context.options[{clash[0]!r}], the name of the "
                         f"library's setting {flag(clash[0])}: --grid {clash[0]}=... and "
                         f"--config would set the library's, not yours; name the option "
                         f"otherwise")
    if context.options.unread:
        raise ValueError(f"--algorithm-option {', '.join(context.options.unread)}: {spec} "
                         f"never reads it (a builder reads context.options[NAME] while it "
                         f"builds)")
    pca_band, upload_noise = upload_settings(spec, embed_dim, pca_band, upload_noise)
    if pca_band is not None or not is_zero(upload_noise) or upload_compression != NO_COMPRESSION:
        upload = run_upload(pca_band, upload_noise, o["pca_center"], upload_compression)
        # after an upload of its own; in its place where it sends the model as it is, so
        # that FedAvg built in a file draws the built-in FedAvg's noise
        algorithm = algorithm._replace(upload=upload if algorithm.upload == identity_upload()
                                       else chain(algorithm.upload, upload))
    return _run_wrappers(algorithm, o, dp_clip, dp_noise, server_opt)


RESERVED = frozenset({config_field(k) for k in OPTIONS}
                     | {p for p in inspect.signature(user_algorithm).parameters
                        if p not in ("spec", "algorithm_options", "options")}
                     | {"ap_lr_mult"})
"""The names of the library's own settings that a user's algorithm may not give its own
options (``context.options``): ``--grid NAME=...`` and ``--config`` address these, so an
option of the same name could never be set (:func:`user_algorithm` refuses it)."""
