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
=============  ==============================================================  ==========

Every model takes the optional FURL user vector (``furl_dim``, Bui et al. 2019). Every
algorithm can also upload through KTEPS*'s compression and noise (``pca_band``,
``upload_noise``) and train its shared leaves with DP-SGD (``dp_clip``, ``dp_noise``).
"""

from __future__ import annotations

from typing import Any

from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.dp_sgd import dp_sgd
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import PAPER_SIGMA, default_band, private_upload
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier

SINGLE_BRANCH = {"fedavg": fedavg, "fedper": fedper, "lg_fedavg": lg_fedavg}
TWO_BRANCH = {  # name: (private_from, projection, gated)
    "kteps": ("classifier", True, False),
    "kteps_star": ("classifier", True, False),
    "pfl_da": ("embedding", False, True),
    "arch_a": ("classifier", False, False),
    "arch_b": ("encoder", False, False),
    "arch_c": ("embedding", False, False),
}
ALGORITHMS = tuple(SINGLE_BRANCH) + tuple(TWO_BRANCH)


def build_algorithm(name: str, *, vocab_size: int, num_classes: int, embed_dim: int,
                    hidden: int = 64, mlp_hidden: int = 128, furl_dim: int = 0,
                    learning_rate: float = 0.01, momentum: float = 0.9,
                    embedding_learning_rate: float | None = None, lambda_kt: float = 0.01,
                    lambda_div: float = 0.01, temperature: float = 0.25,
                    bandwidth: float | None = None, pca_band: tuple[int, int] | None = None,
                    pca_center: bool = True, upload_noise: float | None = None,
                    dp_clip: float | None = None, dp_noise: float = 0.0) -> Algorithm:
    """The model and algorithm called ``name`` (see the module table).

    The loss settings (lambda_kt, lambda_div, temperature, bandwidth) apply to kteps,
    kteps_star and arch_a/b/c; the ablation architectures always use lambda_div = 0 (paper
    Table 8). ``pca_band`` (d1, d2) and ``upload_noise`` (sigma) default to nothing for every
    algorithm except kteps_star (:func:`~fedjax_sc.algorithms.kteps_star.default_band`, 0.01);
    ``dp_clip`` (C, None = off) and ``dp_noise`` (z) add DP-SGD on the shared leaves.

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
    return algorithm
