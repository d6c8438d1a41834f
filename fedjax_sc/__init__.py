"""fedjax_sc: federated multi-domain sentiment classification in JAX/Flax.

A reimplementation of Li, Zhan et al., "Preliminary Steps Towards Federated Sentiment
Classification" (arXiv:2107.11956): every client holds one domain of reviews, a whole federated
round is one ``jax.jit``-compiled function with the clients ``vmap``-ed over a stacked axis, and
algorithms are values built from plug-in pieces. The names a researcher needs::

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
    Batch,
    CentralTrainer,
    ClientEnd,
    ClientStart,
    Hooks,
    ServerInputs,
    UploadContext,
    UploadTransform,
    bind,
    chain,
    identity_upload,
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
from fedjax_sc.algorithms.noise import gaussian_noise
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.algorithms.pfl_da import pfl_da
from fedjax_sc.core.evaluate import (
    make_evaluate,
    make_example_hits,
    make_personal_evaluate,
    mean_accuracy,
    paired_ag_difference,
)
from fedjax_sc.core.heterogeneity import LocalWork
from fedjax_sc.core.leaves import gather_table_rows, reduce_table_rows, scatter_table_rows
from fedjax_sc.core.local import local_steps
from fedjax_sc.core.personalize import Personalization, make_personalize
from fedjax_sc.core.population import build_population_round, grid, init_population
from fedjax_sc.core.round import (
    ClientStates,
    RoundMetrics,
    ServerState,
    build_round,
    build_round_parts,
    init_states,
    make_round_step,
)
from fedjax_sc.data.client_data import ClientData, client_data, host_client_data
from fedjax_sc.data.scenes import Scene, build_scene, fdu_scene, iyy_scene, synthetic_scene
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

__all__ = [
    "Algorithm", "Batch", "BuildContext", "CentralTrainer", "ClientData", "ClientEnd",
    "ClientStart", "ClientStates", "Hooks", "ServerInputs", "dynamic_regularizer", "feddyn",
    "gather_table_rows", "reduce_table_rows", "scatter_table_rows", "train",
    "LocalWork", "Personalization", "PrivateSharedClassifier", "RoundMetrics", "Scene",
    "ServerState", "TextClassifier", "UploadContext", "UploadTransform", "asp", "bind", "build_population_round",
    "build_round", "build_round_parts", "build_scene", "chain", "client_data", "client_sgd",
    "dp_sgd", "fdu_scene", "fedavg", "fedfusion", "fedkc", "fedmmd", "fedopt", "fedper", "fedprox",
    "fs", "gaussian_noise", "grid", "host_client_data", "identity_upload", "indiv", "init_params",
    "init_population", "init_states", "iyy_scene", "kteps", "kteps_star", "lg_fedavg",
    "local_steps", "make_evaluate", "make_example_hits", "make_personal_evaluate",
    "make_personalize", "make_round_step", "mean_accuracy", "mmd_penalty", "paired_ag_difference",
    "pca_compress", "pfl_da", "proximal", "synthetic_scene",
]


def __getattr__(name: str):
    """``fsc.train`` (:func:`fedjax_sc.run.api.train`), imported on first use: the run
    machinery (orbax, the CLI's modules) is not loaded by ``import fedjax_sc``."""
    if name == "train":
        from fedjax_sc.run.api import train
        return train
    raise AttributeError(f"module 'fedjax_sc' has no attribute {name!r}")
