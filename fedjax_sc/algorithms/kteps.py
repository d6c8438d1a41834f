"""KTEPS: Knowledge Transfer Enhanced Private-Shared federated learning (Li et al. 2021, Sec.
4.1, Fig. 3 top, Eq. 6-9), and the architecture ablation of Table 8 (arch A, B, C).

Each client's model has a shared branch (embedding E_s, BiGRU H_s, projection P_s, classifier
G_s; aggregated by FedAvg) and a private one (projection P_p, classifier G_p; never uploaded).
The local objective of a batch (Eq. 9) is

    L = 1/B sum_i (CE(g_s,i) + CE(g_p,i) + lambda1 L_kt,i) + lambda2 HSIC(o_s, o_p)

with the knowledge-transfer term of Eq. 8 (temperature T, gradient stopped through g_s) and the
empirical HSIC of Eq. 7 between the projected features (Gaussian kernels; bandwidth by the
median heuristic unless given -- the paper does not state it). Paper settings (Sec. 5.2):
T = 0.25, lambda1 = lambda2 = 0.01, SGD momentum 0.9, LR 0.01 (FDU).

Table 8's ablation uses the same loss on ``PrivateSharedClassifier`` variants without
projections and with lambda2 = 0: A keeps the classifier private (``private_from="classifier"``),
B the BiGRU and classifier (``"encoder"``), C the whole model (``"embedding"``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import hparams, predict
from fedjax_sc.algorithms.aggregate import weighted_mean
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientLoss, ClientStart, Params
from fedjax_sc.algorithms.losses import (
    HSIC_NORMALIZATION,
    HSIC_NORMALIZATIONS,
    KT_TEMPERATURE,
    hsic,
    knowledge_transfer,
    masked_mean,
)
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd
from fedjax_sc.models.private_shared import PrivateSharedClassifier

RULES = {"private": r"^(private_[a-z]+|gate|user)/",
         "shared": r"^(embedding|encoder|shared_[a-z]+)/"}
"""Leaf rules of the two-branch family: ``private_*``, ``gate`` and ``user`` stay on the client."""


def kteps_loss(model: PrivateSharedClassifier, lambda_kt: float, lambda_div: float,
               temperature: float, bandwidth: float | None,
               hsic_normalization: str = HSIC_NORMALIZATION) -> ClientLoss:
    """The KTEPS client loss, Eq. 9 (the paper's settings are :func:`kteps`'s defaults).

    Args:
      model: a two-branch model.
      lambda_kt: lambda1, weight of the knowledge-transfer term (Eq. 8).
      lambda_div: lambda2, weight of the HSIC diversity term (Eq. 7); 0 skips computing it.
      temperature: T of Eq. 8 (> 0).
      bandwidth: Gaussian kernel sigma of Eq. 7; None = median heuristic per batch.
      hsic_normalization: ``biased`` (the trace over (n - 1)^2) or ``none`` (the trace
        alone), :data:`~fedjax_sc.algorithms.losses.HSIC_NORMALIZATIONS`.

    Returns:
      A :data:`~fedjax_sc.algorithms.base.ClientLoss` whose aux dict holds ``accuracy``
      (shared classifier), ``private_accuracy``, ``ce_shared``, ``ce_private``, ``kt`` and
      ``div`` (all float32 scalars).
    """

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        del rng, start
        out = model.apply({"params": params}, batch.tokens)
        ce_s = optax.softmax_cross_entropy_with_integer_labels(out.shared_logits, batch.labels)
        ce_p = optax.softmax_cross_entropy_with_integer_labels(out.private_logits, batch.labels)
        kt = knowledge_transfer(out.private_logits, out.shared_logits, temperature)
        div = (hsic(out.shared_features, out.private_features, batch.mask, bandwidth,
                    hsic_normalization)
               if not hparams.is_zero(lambda_div) else jnp.zeros((), jnp.float32))
        total = masked_mean(ce_s + ce_p + lambda_kt * kt, batch.mask) + lambda_div * div
        correct = lambda g: masked_mean((jnp.argmax(g, -1) == batch.labels).astype(jnp.float32),
                                        batch.mask)
        return total, {"accuracy": correct(out.shared_logits),
                       "private_accuracy": correct(out.private_logits),
                       "ce_shared": masked_mean(ce_s, batch.mask),
                       "ce_private": masked_mean(ce_p, batch.mask),
                       "kt": masked_mean(kt, batch.mask), "div": div}

    return loss


def kteps(model: PrivateSharedClassifier, learning_rate: float = LEARNING_RATE,
          momentum: float = MOMENTUM,
          embedding_learning_rate: float | None = None, lambda_kt: float = 0.01,
          lambda_div: float = 0.01, temperature: float = KT_TEMPERATURE,
          bandwidth: float | None = None, hsic_normalization: str = HSIC_NORMALIZATION,
          name: str = "kteps") -> Algorithm:
    """Builds KTEPS (or, with another model variant and ``name``, an arch A/B/C ablation).

    Args:
      model: ``PrivateSharedClassifier`` (KTEPS: ``private_from="classifier"``,
        ``projection=True``).
      learning_rate: the step size of the client SGD (paper: 0.01).
      momentum: its momentum (paper: 0.9).
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      lambda_kt: see :func:`kteps_loss`.
      lambda_div: see :func:`kteps_loss`.
      temperature: see :func:`kteps_loss`.
      bandwidth: see :func:`kteps_loss`.
      hsic_normalization: see :func:`kteps_loss`. Default ``biased``: the estimator of
        Gretton et al. 2005 that the paper cites, whose scale does not grow with the batch;
        ``none`` is the reading under which the paper's remarks on lambda2 hold
        (docs/choices.md).
      name: the algorithm's name in metrics and reports.

    Returns:
      The :class:`Algorithm`; Ap uses the ``sp`` mode (the mean of both classifiers'
      probabilities, Remark 4); the global model is the shared branch.

    Raises:
      TypeError: a model that is not a :class:`PrivateSharedClassifier`.
      ValueError: a negative weight, a non-positive temperature or bandwidth, an unknown HSIC
        normalization, or an invalid learning rate / momentum.
    """
    if not isinstance(model, PrivateSharedClassifier):
        raise TypeError(f"{name} needs a two-branch model with private and shared heads "
                        f"(PrivateSharedClassifier), got {type(model).__name__}")
    hparams.check("lambda_kt", lambda_kt, lambda v: v >= 0, ">= 0")
    hparams.check("lambda_div", lambda_div, lambda v: v >= 0, ">= 0")
    hparams.check("temperature", temperature, lambda v: v > 0, "> 0")
    hparams.check("bandwidth", bandwidth, lambda v: v > 0, "> 0")
    if hsic_normalization not in HSIC_NORMALIZATIONS:
        raise ValueError(f"hsic_normalization must be one of {HSIC_NORMALIZATIONS}, got "
                         f"{hsic_normalization!r}")
    predict_fn, global_fn = predict.two_branch(model)
    return Algorithm(
        name=name,
        model=model,
        client_loss=kteps_loss(model, lambda_kt, lambda_div, temperature, bandwidth,
                               hsic_normalization),
        client_optimizer=client_sgd(learning_rate, momentum, embedding_learning_rate),
        aggregator=weighted_mean,
        predict=predict_fn,
        global_predict=global_fn,
        default_mode="sp",
        leaf_rules=RULES,
    )
