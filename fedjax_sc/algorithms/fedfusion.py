"""FedFusion (Yao et al. 2019, "Towards Faster and Better Federated Learning: A Feature Fusion
Approach"), as compared in Li et al. 2021, Sec. 5.4 and Tables 2-3.

Every client keeps the global extractor it downloaded as a frozen reference and trains a local
copy whose features are fused with the reference's by a learned operator before the
classifier (:class:`fedjax_sc.models.fusion.FusionClassifier`; default the "multi" operator,
see that module for why). As in Yao et al.'s code (thu-media/FedFusion, ``model/trainer.py``), the
reference extractor is part of the model: a client sets it to the extractor it downloaded, no
update reaches it, and the global model after round r carries the extractor of round r - 1,
the one its clients trained against (Yao et al. average the identical copies; here the server
remakes them, :mod:`fedjax_sc.core.copies`, so they are neither sent nor noised nor
counted in the communication). Ag and Ap evaluate that model; in the Ap phase the reference is
the model before fine-tuning.

Which leaves are averaged (``private_embedding``): Li et al. 2021 ran FedFusion with a private
word embedding (Sec. 5.5 names it, with LG-FedAvg and PFL-DA, among the methods whose private
embedding overfits), so that is the default: each client keeps its own embedding table and its
reference copy across rounds, the BiGRU (and its reference), fusion operator and classifier are
averaged, and the global model's embedding is the server's, which no client uploads (its
initial GloVe values; see :func:`fedjax_sc.run.train.global_params`).
``private_embedding=False`` is Yao et al.'s FedFusion, every leaf averaged as in FedAvg.

The ``multi`` and ``single`` operators' weight ``gamma`` follows Yao et al.'s server rule
(``model/agent.py``, ``update_shadow(mu=0.9)``, called after every aggregation): the new
global ``gamma`` is ``mu * gamma_old + (1 - mu) * mean of the clients' gamma``, every other
leaf the plain mean. It is expressed as a server optimizer on the pseudo-gradient
``params - aggregate`` (:func:`gamma_average`); ``gamma_momentum=0`` turns it off.
"""

from __future__ import annotations

import jax
import optax
from flax import traverse_util

from fedjax_sc.algorithms.base import Algorithm, Params
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM
from fedjax_sc.models.fusion import REFERENCE, FusionClassifier

PRIVATE_EMBEDDING_RULES = {"private": r"^(reference_)?embedding/",
                           "shared": r"^(reference_encoder|encoder|fuse|classifier)/"}
"""Li et al.'s run: the word embedding (and its reference copy) stays on its client."""


def gamma_average(momentum: float) -> optax.GradientTransformation:
    """Yao et al.'s server rule for the fusion weight, as a server optimizer.

    Applied to the pseudo-gradient ``g = params - aggregate`` (see ``Algorithm.
    server_optimizer``): the leaf ``fuse/gamma`` steps by ``(1 - momentum) * g``, so it becomes
    ``momentum * gamma_old + (1 - momentum) * mean``; every other leaf steps by ``g`` and becomes
    the mean (up to rounding).

    Args:
      momentum: float in [0, 1); Yao et al.'s ``mu`` (0.9 in their code).

    Raises:
      ValueError: ``momentum`` outside [0, 1).
    """
    if not 0.0 <= momentum < 1.0:
        raise ValueError(f"the fusion weight's server momentum must be in [0, 1), got "
                         f"{momentum}")

    def labels(params):
        flat = traverse_util.flatten_dict(params)
        return traverse_util.unflatten_dict(
            {path: "gamma" if path[-2:] == ("fuse", "gamma") else "mean" for path in flat})

    return optax.multi_transform({"gamma": optax.sgd(1.0 - momentum), "mean": optax.sgd(1.0)},
                                 labels)


def fedfusion(model: FusionClassifier, learning_rate: float = LEARNING_RATE,
              momentum: float = MOMENTUM, embedding_learning_rate: float | None = None,
              private_embedding: bool = True, gamma_momentum: float = 0.9) -> Algorithm:
    """Builds FedFusion.

    Args:
      model: ``FusionClassifier`` (its ``fusion`` attribute picks the operator).
      learning_rate: the step size of the client SGD.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      private_embedding: keep each client's word embedding private (Li et al. 2021's run,
        the default); False averages every leaf (Yao et al. 2019).
      gamma_momentum: the server's momentum on the ``multi`` / ``single`` fusion weight
        (:func:`gamma_average`; Yao et al.'s 0.9); 0 averages it like every other leaf. Not
        used by ``conv``.

    Returns:
      The :class:`Algorithm` (mode ``full``).

    Raises:
      ValueError: a model that is not a ``FusionClassifier``, invalid optimizer settings, or
        ``gamma_momentum`` outside [0, 1).
    """
    if not isinstance(model, FusionClassifier):
        raise ValueError(f"fedfusion needs a FusionClassifier, got {type(model).__name__}")
    server = gamma_average(gamma_momentum)  # validates it whatever the operator
    if model.fusion == "conv" or gamma_momentum == 0.0:
        server = None

    def predict(params: Params, tokens: jax.Array):
        return {"full": global_predict(params, tokens)}

    def global_predict(params: Params, tokens: jax.Array):
        return jax.nn.softmax(model.apply({"params": params}, tokens), -1)

    return fedavg(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="fedfusion",
        predict=predict,
        global_predict=global_predict,
        leaf_rules=PRIVATE_EMBEDDING_RULES if private_embedding else None,
        local_copies=REFERENCE,
        server_optimizer=server,
    )
