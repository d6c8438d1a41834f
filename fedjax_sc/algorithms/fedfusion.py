"""FedFusion (Yao et al. 2019, "Towards Faster and Better Federated Learning: A Feature Fusion
Approach"), as compared in Li et al. 2021, Sec. 5.4 and Tables 2-3.

Every client keeps the global model it downloaded as a frozen feature extractor and trains a
local copy whose features are fused with the frozen ones by a learned operator before the
classifier (:class:`fedjax_sc.models.fusion.FusionClassifier`; default the "conv" operator,
Yao et al.'s best). The global model (Ag) fuses its extractor's features with themselves; in
the Ap phase the frozen extractor is the model before fine-tuning.

Which leaves are averaged (``private_embedding``): Li et al. 2021 ran FedFusion with a private
word embedding (Sec. 5.5 names it, with LG-FedAvg and PFL-DA, among the methods whose private
embedding overfits), so that is the default: each client keeps its own embedding table across
rounds, the BiGRU, fusion operator and classifier are averaged, and the global model's
embedding is the server's copy, which no client uploads (its initial GloVe values; see
:func:`fedjax_sc.run.train.global_params`). ``private_embedding=False`` is Yao et al.'s
FedFusion, every leaf averaged as in FedAvg.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms.aggregate import weighted_mean
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params
from fedjax_sc.algorithms.losses import masked_mean
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd
from fedjax_sc.models.fusion import FusionClassifier


def fusion_loss(model: FusionClassifier):
    """Cross-entropy of the fused model, the global features from ``start.params`` (no
    gradient). Returns a client loss whose aux holds ``accuracy``."""

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        del rng
        frozen = jax.lax.stop_gradient(
            model.apply({"params": start.params}, batch.tokens, method=model.features))
        logits = model.apply({"params": params}, batch.tokens, frozen)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch.labels)
        correct = (jnp.argmax(logits, -1) == batch.labels).astype(jnp.float32)
        return masked_mean(ce, batch.mask), {"accuracy": masked_mean(correct, batch.mask)}

    return loss


PRIVATE_EMBEDDING_RULES = {"private": r"^embedding/", "shared": r"^(encoder|fuse|classifier)/"}
"""Li et al.'s run: the word embedding stays on its client."""


def fedfusion(model: FusionClassifier, learning_rate: float = LEARNING_RATE,
              momentum: float = MOMENTUM, embedding_learning_rate: float | None = None,
              private_embedding: bool = True) -> Algorithm:
    """Builds FedFusion.

    Args:
      model: ``FusionClassifier`` (its ``fusion`` attribute picks the operator).
      learning_rate, momentum, embedding_learning_rate: client SGD.
      private_embedding: keep each client's word embedding private (Li et al. 2021's run,
        the default); False averages every leaf (Yao et al. 2019).

    Returns:
      The :class:`Algorithm` (mode ``full``).

    Raises:
      ValueError: a model that is not a ``FusionClassifier``, or invalid optimizer settings.
    """
    if not isinstance(model, FusionClassifier):
        raise ValueError(f"fedfusion needs a FusionClassifier, got {type(model).__name__}")

    def predict(params: Params, tokens: jax.Array, anchor: Params | None = None):
        frozen = (None if anchor is None else
                  model.apply({"params": anchor}, tokens, method=model.features))
        return {"full": jax.nn.softmax(model.apply({"params": params}, tokens, frozen), -1)}

    def global_predict(params: Params, tokens: jax.Array):
        return jax.nn.softmax(model.apply({"params": params}, tokens), -1)

    return Algorithm(
        name="fedfusion",
        model=model,
        client_loss=fusion_loss(model),
        client_optimizer=client_sgd(learning_rate, momentum, embedding_learning_rate),
        aggregator=weighted_mean,
        predict=predict,
        global_predict=global_predict,
        leaf_rules=PRIVATE_EMBEDDING_RULES if private_embedding else None,
    )
