"""fedjax_sc: federated multi-domain sentiment classification in JAX/Flax.

A reimplementation of Li, Zhan et al., "Preliminary Steps Towards Federated Sentiment
Classification" (arXiv:2107.11956): every client holds one domain of reviews, a whole federated
round is one ``jax.jit``-compiled function with the clients ``vmap``-ed over a stacked axis, and
algorithms are values built from plug-in pieces. The names a researcher needs (``__all__``,
in groups; everything else is reachable from its module)::

    import fedjax_sc as fsc
    algorithm = fsc.kteps(fsc.PrivateSharedClassifier(vocab_size=V))
    round_step = fsc.make_round_step(algorithm, batch_size=8, local_epochs=2)

Layers: :mod:`fedjax_sc.data` (corpora, vocabulary, scenes, client data) ->
:mod:`fedjax_sc.models` -> :mod:`fedjax_sc.algorithms` (the pieces, one file per algorithm) ->
:mod:`fedjax_sc.core` (the compiled round, local steps, evaluation, the Ap phase, sampling,
sharding) -> :mod:`fedjax_sc.run` (the experiment application: CLI, training loop, paper tables).
"""

from fedjax_sc.algorithms.asp import asp
from fedjax_sc.algorithms.base import (
    Algorithm,
    ClientEnd,
    ClientStart,
    Hooks,
    ServerInputs,
    UploadContext,
    UploadTransform,
    bind,
    chain,
)
from fedjax_sc.algorithms.compression import pca_compress
from fedjax_sc.algorithms.context import BuildContext
from fedjax_sc.algorithms.dp_sgd import dp_sgd
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.feddyn import dynamic_regularizer, feddyn
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.fedkc import fedkc
from fedjax_sc.algorithms.fedmmd import fedmmd, mmd_penalty
from fedjax_sc.algorithms.fedopt import fedopt
from fedjax_sc.algorithms.fedper import fedper
from fedjax_sc.algorithms.fedprox import fedprox, proximal
from fedjax_sc.algorithms.fs import fs
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import kteps_star
from fedjax_sc.algorithms.lg_fedavg import lg_fedavg
from fedjax_sc.algorithms.moon import model_contrastive, moon
from fedjax_sc.algorithms.noise import gaussian_noise
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.core.evaluate import make_evaluate, mean_accuracy
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.core.leaves import gather_table_rows, reduce_table_rows, scatter_table_rows
from fedjax_sc.core.personalize import make_personalize
from fedjax_sc.core.population import build_population_round, grid, init_population
from fedjax_sc.core.round import (
    ClientStates,
    ServerState,
    build_round,
    init_states,
    make_round_step,
)
from fedjax_sc.data.client_data import ClientData, client_data
from fedjax_sc.data.scenes import build_scene, synthetic_scene
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

__all__ = [
    # writing an algorithm: the interface
    "Algorithm", "Hooks", "ClientStart", "ClientEnd", "ServerInputs", "BuildContext", "bind",
    "chain", "UploadTransform", "UploadContext",
    # the algorithms, and the pieces that wrap any algorithm
    "fedavg", "fedper", "lg_fedavg", "pfl_da", "kteps", "kteps_star", "fedprox", "fedmmd",
    "fedfusion", "fedkc", "feddyn", "moon", "fedopt", "indiv", "fs", "asp", "dp_sgd", "proximal",
    "mmd_penalty", "dynamic_regularizer", "model_contrastive", "pca_compress", "gaussian_noise", "client_sgd",
    # the models
    "TextClassifier", "PrivateSharedClassifier", "init_params",
    # data
    "synthetic_scene", "build_scene", "client_data", "ClientData",
    # the compiled round, its states, heterogeneous clients and populations
    "make_round_step", "build_round", "init_states", "ServerState", "ClientStates",
    "LocalWork", "gather_table_rows", "scatter_table_rows", "reduce_table_rows",
    "build_population_round", "init_population", "grid",
    # evaluation (Ag), the Ap phase, and the whole run
    "make_evaluate", "mean_accuracy", "make_personalize", "train",
]


def __getattr__(name: str):
    """``fsc.train`` (:func:`fedjax_sc.run.api.train`), imported on first use: the run
    machinery (orbax, the CLI's modules) is not loaded by ``import fedjax_sc``."""
    if name == "train":
        from fedjax_sc.run.api import train
        return train
    raise AttributeError(f"module 'fedjax_sc' has no attribute {name!r}")
