"""Every method and every plug-in that wraps a method, by name: the catalogue of
:mod:`fedjax_sc.algorithms` (one file per algorithm).

Every builder returns an :class:`~fedjax_sc.algorithms.base.Algorithm` (a value of plug-in
pieces, see :mod:`fedjax_sc.algorithms.base`); ``import fedjax_sc as fsc`` reaches them as
``fsc.methods.fedprox(...)``, and the paper's own three (``fedavg``, ``kteps``,
``kteps_star``) also as ``fsc.fedavg`` and so on. docs/algorithms.md lists every method with
its paper, the state it keeps and its file.
"""

from fedjax_sc.algorithms.apfl import apfl
from fedjax_sc.algorithms.asp import asp
from fedjax_sc.algorithms.compose import named_chain
from fedjax_sc.algorithms.compression import pca_compress
from fedjax_sc.algorithms.ditto import ditto, personalized
from fedjax_sc.algorithms.dp_sgd import dp_sgd
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedbabu import fedbabu
from fedjax_sc.algorithms.feddyn import dynamic_regularizer, feddyn
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.fedkc import fedkc
from fedjax_sc.algorithms.fedmmd import fedmmd, mmd_penalty
from fedjax_sc.algorithms.fedopt import fedopt
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.fedprox import fedprox, proximal
from fedjax_sc.algorithms.fedrep import fedrep
from fedjax_sc.algorithms.fedrod import fedrod
from fedjax_sc.algorithms.fs import fs
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.kept_optimizer import kept_optimizer_state
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import kteps_star
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.model_change import (
    error_feedback,
    model_change,
    probabilistic_quantization,
    scaled_sign,
    top_k,
)
from fedjax_sc.algorithms.moon import model_contrastive, moon
from fedjax_sc.algorithms.noise import gaussian_noise
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.algorithms.per_fedavg import meta_gradient, per_fedavg
from fedjax_sc.algorithms.pfedme import moreau_gradient, pfedme
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.algorithms.scaffold import control_variates, scaffold

__all__ = [
    # the paper's methods and baselines (Li, Zhan et al., Sec. 5.4)
    "fedavg", "fedper", "lg_fedavg", "pfl_da", "kteps", "kteps_star", "fedprox", "fedmmd",
    "fedfusion", "indiv", "fs", "asp",
    # beyond the paper
    "fedkc", "feddyn", "moon", "scaffold", "ditto", "fedrep", "fedbabu", "per_fedavg", "fedrod",
    "apfl", "pfedme", "fedopt", "dp_sgd",
    # plug-ins: wrap any algorithm (loss terms, upload transforms, client optimizer)
    "proximal", "mmd_penalty", "dynamic_regularizer", "model_contrastive", "control_variates",
    "personalized", "meta_gradient", "moreau_gradient", "pca_compress", "gaussian_noise",
    "model_change", "top_k", "probabilistic_quantization", "scaled_sign", "error_feedback", "client_sgd",
    # the client optimizer's state kept across rounds; several plug-ins that own state
    "kept_optimizer_state", "named_chain",
]
