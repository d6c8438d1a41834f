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
fedfusion      FusionClassifier (local + frozen global features, "conv")       Yao 2019
fedavg_kc      TextClassifier; FedAvg + FedKC consistency on K-Means centroids  Wang 2022
fedprox_kc     TextClassifier; FedProx + FedKC                                  Wang 2022
indiv          TextClassifier, every leaf private (no communication)           Sec. 5.4
fs             TextClassifier on the pooled data (centralised)                 Fig. 2(A)
asp            ASPClassifier, centralised multi-task, adversarial              Liu 2017
=============  ==============================================================  ==========

Every model takes the optional FURL user vector (``furl_dim``, Bui et al. 2019). Every
algorithm can also upload through KTEPS*'s compression and noise (``pca_band``,
``upload_noise``), train its shared leaves with DP-SGD (``dp_clip``, ``dp_noise``) and update
the server with a FedOpt optimizer (``server_opt``, Reddi et al. 2021).
"""

from __future__ import annotations

from typing import Any

from fedjax_sc.algorithms import fedkc, fedmmd, fedopt, fedprox
from fedjax_sc.algorithms.asp import ADVERSARIAL_WEIGHT, ORTHOGONALITY_WEIGHT, asp
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.dp_sgd import dp_sgd
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.fs import fs
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import PAPER_SIGMA, default_band, private_upload
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.models.asp import ASPClassifier
from fedjax_sc.models.fusion import FusionClassifier
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier

SINGLE_BRANCH = {"fedavg": fedavg, "fedper": fedper, "lg_fedavg": lg_fedavg, "indiv": indiv,
                 "fs": fs}
PLUG_INS = ("fedprox", "fedmmd", "fedavg_kc", "fedprox_kc")
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
ALGORITHMS = tuple(SINGLE_BRANCH) + PLUG_INS + OWN_MODEL + tuple(TWO_BRANCH)


def build_algorithm(name: str, *, vocab_size: int, num_classes: int, embed_dim: int,
                    hidden: int = 64, mlp_hidden: int = 128, furl_dim: int = 0,
                    learning_rate: float = 0.01, momentum: float = 0.9,
                    embedding_learning_rate: float | None = None, lambda_kt: float = 0.01,
                    lambda_div: float = 0.01, temperature: float = 0.25,
                    bandwidth: float | None = None, pca_band: tuple[int, int] | None = None,
                    pca_center: bool = True, upload_noise: float | None = None,
                    dp_clip: float | None = None, dp_noise: float = 0.0,
                    prox_mu: float = fedprox.DEFAULT_MU, mmd_weight: float = fedmmd.DEFAULT_WEIGHT,
                    fusion: str = "conv", kc_clusters: int = fedkc.DEFAULT_CLUSTERS,
                    kc_iterations: int = fedkc.DEFAULT_ITERATIONS,
                    kc_weight: float = fedkc.DEFAULT_WEIGHT,
                    asp_adversarial: float = ADVERSARIAL_WEIGHT,
                    asp_orthogonal: float = ORTHOGONALITY_WEIGHT,
                    num_clients: int | None = None, server_opt: str | None = None,
                    server_lr: float | None = None, server_momentum: float = 0.9,
                    server_tau: float = fedopt.DEFAULT_TAU) -> Algorithm:
    """The model and algorithm called ``name`` (see the module table).

    The loss settings (lambda_kt, lambda_div, temperature, bandwidth) apply to kteps,
    kteps_star and arch_a/b/c; the ablation architectures always use lambda_div = 0 (paper
    Table 8). ``pca_band`` (d1, d2) and ``upload_noise`` (sigma) default to nothing for every
    algorithm except kteps_star (:func:`~fedjax_sc.algorithms.kteps_star.default_band`, 0.01);
    ``dp_clip`` (C, None = off) and ``dp_noise`` (z) add DP-SGD on the shared leaves.
    ``prox_mu`` (FedProx and fedprox_kc), ``mmd_weight`` (FedMMD), ``fusion`` (FedFusion's
    operator), ``kc_*`` (FedKC's q, Lloyd iterations, alpha) and ``asp_*`` (ASP's
    lambda_adv, gamma) set the baselines; ``num_clients`` is ASP's number of domains.
    ``server_opt`` (None: the aggregate is the new model) with ``server_lr``,
    ``server_momentum`` and ``server_tau`` selects a FedOpt server
    (:func:`~fedjax_sc.algorithms.fedopt.server_optimizer`).

    Raises:
      ValueError: an unknown name (the message lists the known ones) or invalid settings.
    """
    dims: dict[str, Any] = dict(vocab_size=vocab_size, embed_dim=embed_dim, hidden=hidden,
                                mlp_hidden=mlp_hidden, num_classes=num_classes,
                                furl_dim=furl_dim)
    opt = dict(learning_rate=learning_rate, momentum=momentum,
               embedding_learning_rate=embedding_learning_rate)
    if name == "kteps_star":
        pca_band = pca_band or default_band(embed_dim)
        upload_noise = PAPER_SIGMA if upload_noise is None else upload_noise
    if name in SINGLE_BRANCH:
        algorithm = SINGLE_BRANCH[name](TextClassifier(**dims), **opt)
    elif name in PLUG_INS:
        algorithm = fedavg(TextClassifier(**dims), **opt)
        if name in ("fedprox", "fedprox_kc"):
            algorithm = fedprox.proximal(algorithm, prox_mu)
        if name == "fedmmd":
            algorithm = fedmmd.mmd_penalty(algorithm, mmd_weight)
        if name.endswith("_kc"):
            algorithm = fedkc.fedkc(algorithm, kc_clusters, kc_iterations, kc_weight)
        algorithm = algorithm._replace(name=name)
    elif name == "fedfusion":
        if dims.pop("furl_dim"):
            raise ValueError("fedfusion has no FURL user vector (furl_dim must be 0)")
        algorithm = fedfusion(FusionClassifier(**dims, fusion=fusion), **opt)
    elif name == "asp":
        if not num_clients:
            raise ValueError("asp needs num_clients (its number of domains)")
        if dims.pop("furl_dim"):
            raise ValueError("asp has no FURL user vector (furl_dim must be 0)")
        algorithm = asp(ASPClassifier(**dims, num_domains=num_clients), **opt,
                        adversarial=asp_adversarial, orthogonal=asp_orthogonal)
    elif name in TWO_BRANCH:
        private_from, projection, gated = TWO_BRANCH[name]
        model = PrivateSharedClassifier(**dims, private_from=private_from,
                                        projection=projection, gated=gated)
        if name == "pfl_da":
            algorithm = pfl_da(model, **opt)
        else:
            algorithm = kteps(model, **opt, lambda_kt=lambda_kt,
                              lambda_div=0.0 if name.startswith("arch_") else lambda_div,
                              temperature=temperature, bandwidth=bandwidth)._replace(name=name)
    else:
        raise ValueError(f"unknown algorithm {name!r}; choose from {ALGORITHMS}")
    algorithm = algorithm._replace(upload=private_upload(pca_band, upload_noise or 0.0,
                                                         pca_center))
    if dp_clip is not None:
        algorithm = dp_sgd(algorithm, dp_clip, dp_noise)
    if server_opt is not None:
        algorithm = fedopt.fedopt(algorithm, server_opt, server_lr, server_momentum, server_tau)
    return algorithm
