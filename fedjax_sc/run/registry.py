"""The algorithms the CLI and :func:`fedjax_sc.run.train.train` can run, each with its model.

=============  ==============================================================  ==========
name           model                                                           reference
=============  ==============================================================  ==========
fedavg         TextClassifier                                                  Fig. 2(A)
fedper         TextClassifier, private classifier                              Fig. 2(B)
lg_fedavg      TextClassifier, private embedding + BiGRU                       Sec. 5.4
pfl_da         PrivateSharedClassifier(private_from="embedding", gated)        Fig. 2(C)
kteps          PrivateSharedClassifier(private_from="classifier", projection)  Fig. 3, Eq. 6-9
arch_a/b/c     PrivateSharedClassifier(private_from=classifier/encoder/         Table 8
               embedding, no projection), KTEPS loss with lambda2 = 0
=============  ==============================================================  ==========

Every model takes the optional FURL user vector (``furl_dim``, Bui et al. 2019).
"""

from __future__ import annotations

from typing import Any

from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier

SINGLE_BRANCH = {"fedavg": fedavg, "fedper": fedper, "lg_fedavg": lg_fedavg}
TWO_BRANCH = {  # name: (private_from, projection, gated)
    "kteps": ("classifier", True, False),
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
                    bandwidth: float | None = None) -> Algorithm:
    """The model and algorithm called ``name`` (see the module table).

    The loss settings (lambda_kt, lambda_div, temperature, bandwidth) apply to kteps and
    arch_a/b/c; the ablation architectures always use lambda_div = 0 (paper Table 8).

    Raises:
      ValueError: an unknown name (the message lists the known ones) or invalid settings.
    """
    dims: dict[str, Any] = dict(vocab_size=vocab_size, embed_dim=embed_dim, hidden=hidden,
                                mlp_hidden=mlp_hidden, num_classes=num_classes,
                                furl_dim=furl_dim)
    opt = dict(learning_rate=learning_rate, momentum=momentum,
               embedding_learning_rate=embedding_learning_rate)
    if name in SINGLE_BRANCH:
        return SINGLE_BRANCH[name](TextClassifier(**dims), **opt)
    if name not in TWO_BRANCH:
        raise ValueError(f"unknown algorithm {name!r}; choose from {ALGORITHMS}")
    private_from, projection, gated = TWO_BRANCH[name]
    model = PrivateSharedClassifier(**dims, private_from=private_from, projection=projection,
                                    gated=gated)
    if name == "pfl_da":
        return pfl_da(model, **opt)
    return kteps(model, **opt, lambda_kt=lambda_kt,
                 lambda_div=lambda_div if name == "kteps" else 0.0,
                 temperature=temperature, bandwidth=bandwidth, name=name)
