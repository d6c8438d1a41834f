"""PFL-DA: Private Federated Learning with Domain Adaptation (Peterson et al. 2019), as compared
in Li et al. 2021, Sec. 5.4 and Fig. 2(C).

Each client keeps a complete private model (its own embedding, BiGRU and classifier) beside the
shared one, and a private gate mixes the two experts' class probabilities:
``p(y|x) = a(x) p_private(y|x) + (1 - a(x)) p_shared(y|x)`` with ``a = sigmoid(w . [o_s, o_p]
+ b)``. The local loss is the negative log-likelihood of the mixture plus the shared model's own
cross-entropy, so the shared branch stays a usable global model (its Ag is reported) while the
gate and the private expert learn the client's domain. (Peterson et al. train the general
model federatedly and the private model and gate locally; the shared cross-entropy term is this
library's way of giving the global model its own objective in one joint step.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms.base import Algorithm, Batch, ClientLoss, ClientStart, Params
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.losses import masked_mean
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM
from fedjax_sc.models.private_shared import (
    PrivateSharedClassifier,
    TwoBranchOutput,
    mode_probabilities,
)


def mixture_log_likelihood(out: TwoBranchOutput, labels: jax.Array) -> jax.Array:
    """``log p(y|x)`` of the gated mixture ``a p_private + (1 - a) p_shared``, ``a =
    sigmoid(z)``, in log space: ``logaddexp(log_sigmoid(z) + log_softmax(g_p)_y,
    log_sigmoid(-z) + log_softmax(g_s)_y)``, so an example the mixture gets badly wrong
    keeps its gradient (a log of the clipped probability loses it past a logit gap of ~28).

    Args:
      out: a gated model's output (``gate_logit`` float32 ``[B]``, logits ``[B, C]``).
      labels: int ``[B]``.

    Returns:
      float32 ``[B]``, at most 0.
    """
    take = lambda logits: jnp.take_along_axis(jax.nn.log_softmax(logits, -1), labels[:, None],
                                              axis=-1)[:, 0]
    z = out.gate_logit
    return jnp.logaddexp(jax.nn.log_sigmoid(z) + take(out.private_logits),
                         jax.nn.log_sigmoid(-z) + take(out.shared_logits))


def pfl_da_loss(model: PrivateSharedClassifier) -> ClientLoss:
    """Mixture NLL + shared cross-entropy, averaged over the batch's real rows.

    Returns:
      A ClientLoss whose aux holds ``accuracy`` (the gated mixture) and ``gate`` (mean weight
      of the private expert).
    """

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        del rng, start
        out = model.apply({"params": params}, batch.tokens)
        mixture = mode_probabilities(out)["sp"]
        nll = -mixture_log_likelihood(out, batch.labels)
        ce_s = optax.softmax_cross_entropy_with_integer_labels(out.shared_logits, batch.labels)
        correct = (jnp.argmax(mixture, -1) == batch.labels).astype(jnp.float32)
        return masked_mean(nll + ce_s, batch.mask), {
            "accuracy": masked_mean(correct, batch.mask), "gate": masked_mean(out.gate, batch.mask)}

    return loss


def pfl_da(model: PrivateSharedClassifier, learning_rate: float = LEARNING_RATE,
           momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds PFL-DA.

    Args:
      model: ``PrivateSharedClassifier(private_from="embedding", projection=False,
        gated=True)``.
      learning_rate: the step size of the client SGD.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).

    Returns:
      The :class:`Algorithm`; Ap uses the gated mixture (mode ``sp``).

    Raises:
      ValueError: a model without a gate, or invalid optimizer settings.
    """
    if not getattr(model, "gated", False):
        raise ValueError("pfl_da needs PrivateSharedClassifier(..., gated=True)")
    # the two-branch algorithm's pieces (rules, optimizer, predictions), PFL-DA's own loss
    return kteps(model, learning_rate, momentum, embedding_learning_rate)._replace(
        name="pfl_da", client_loss=pfl_da_loss(model))
