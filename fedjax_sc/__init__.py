"""fedjax_sc: federated multi-domain sentiment classification in JAX/Flax.

A reimplementation of Li, Zhan et al., "Preliminary Steps Towards Federated Sentiment
Classification" (arXiv:2107.11956): every client holds one domain of reviews, a whole federated
round is one ``jax.jit``-compiled function with the clients ``vmap``-ed over a stacked axis, and
algorithms are values built from plug-in pieces. The names a researcher needs (``__all__``,
in groups: every algorithm and plug-in is in ``fsc.methods``, everything else is
reachable from its module)::

    import fedjax_sc as fsc
    algorithm = fsc.kteps(fsc.PrivateSharedClassifier(vocab_size=V))
    round_step = fsc.make_round_step(algorithm, batch_size=8, local_epochs=2)

Layers: :mod:`fedjax_sc.data` (corpora, vocabulary, scenes, client data) ->
:mod:`fedjax_sc.models` -> :mod:`fedjax_sc.algorithms` (the pieces, one file per algorithm) ->
:mod:`fedjax_sc.core` (the compiled round, local steps, evaluation, the Ap phase, sampling,
sharding) -> :mod:`fedjax_sc.run` (the experiment application: CLI, training loop, paper tables).
"""

from fedjax_sc import methods
from fedjax_sc.algorithms.base import (
    Algorithm,
    ClientEnd,
    ClientStart,
    Hooks,
    ServerInputs,
    sent_update,
)
from fedjax_sc.algorithms.context import BuildContext
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.kteps_star import kteps_star
from fedjax_sc.algorithms.upload import UploadTransform, chain
from fedjax_sc.core.evaluate import make_evaluate, mean_accuracy
from fedjax_sc.core.leaves import gather_table_rows, scatter_table_rows
from fedjax_sc.core.personalize import make_personalize
from fedjax_sc.core.population import build_population_round, grid, init_population
from fedjax_sc.core.round import (
    ClientStates,
    ServerState,
    build_round,
    init_states,
    make_round_step,
)
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import build_scene, synthetic_scene
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

__all__ = [
    # writing an algorithm: the interface
    "Algorithm", "Hooks", "ClientStart", "ClientEnd", "ServerInputs", "BuildContext",
    "sent_update",
    "UploadTransform", "chain",
    # every method and plug-in in fsc.methods; the paper's three here too
    "methods", "fedavg", "kteps", "kteps_star",
    # the models
    "TextClassifier", "PrivateSharedClassifier", "init_params",
    # data
    "synthetic_scene", "table_scene", "build_scene", "client_data",
    # the compiled round, its states and populations
    "make_round_step", "build_round", "init_states", "ServerState", "ClientStates",
    "gather_table_rows", "scatter_table_rows", "build_population_round", "init_population",
    "grid",
    # evaluation (Ag), the Ap phase, and the whole run
    "make_evaluate", "mean_accuracy", "make_personalize", "train",
]


def __getattr__(name: str):
    """``fsc.train`` (:func:`fedjax_sc.run.api.train`) and ``fsc.table_scene``
    (:func:`fedjax_sc.run.api.table_scene`), imported on first use: the run machinery (orbax,
    the CLI's modules, pyarrow) is not loaded by ``import fedjax_sc``."""
    if name in ("train", "table_scene"):
        from fedjax_sc.run import api
        return getattr(api, name)
    raise AttributeError(f"module 'fedjax_sc' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names with the two imported on first use (``dir(fsc)``, completion)."""
    return sorted(set(globals()) | {"train", "table_scene"})
