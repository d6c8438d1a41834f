"""FedRoD (Chen and Chao 2022, "On Bridging Generic and Personalized Federated Learning for
Image Classification", ICLR 2022): a shared body with two heads
(:class:`~fedjax_sc.models.generic_personal.FedRoDClassifier`).

The body (embedding + BiGRU + SeqMean, features z) and the generic head g = h_G(z) (the MLP
classifier) are shared and trained with the balanced softmax (BSM; Ren et al. 2020) on the
client's label counts N_c, whose minimiser does not depend on the client's class prior; the
private personal head h_P (one linear layer) adds its logits to g and learns by cross-entropy
with the body and g held fixed::

    L_BSM = -log( N_y exp(g_y) / sum_c N_c exp(g_c) )
    L = L_BSM(g) + CE(stop_gradient(g) + h_P(stop_gradient(z)))

Ap predicts softmax(g + h_P(z)); Ag the generic head alone, from the server's shared leaves.
As in the reproduction we read (PFLlib ``clientrod``, TsingZ0/PFLlib; hongyouc/Fed-RoD holds
no code): a linear personal head on detached features, detached g in the personal loss. The
hypernetwork variant (Fed-RoD (hyper)) is not implemented.

N_c count the client's whole training split (``label_prior="client"``, the default; PFLlib's
``sample_per_class``), read from ``ClientStart.data``. FDU-MTL's domains are close to balanced
(700-822 reviews of a class in 1,500-1,600), so there BSM is near the cross-entropy.
``label_prior="batch"`` counts the step's mini-batch: an absent class gets no mass, and at
batch 8 the counts move the logits by up to log 7 from step to step. Where ours differs: one
optimizer (the client SGD, momentum 0.9) steps both losses at once; PFLlib steps them one
after the other, the personal head without momentum; the personal head starts from its own
random initialisation (PFLlib's is a copy of the generic head, so g + p starts at 2 g; our
generic head is an MLP, not one layer).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import predict
from fedjax_sc.algorithms.aggregate import weighted_mean
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params
from fedjax_sc.algorithms.losses import balanced_softmax, label_counts, masked_mean
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd
from fedjax_sc.models.generic_personal import FedRoDClassifier

LABEL_PRIORS = ("client", "batch")
"""Where the balanced softmax's class counts N_c come from (see the module docstring)."""
LABEL_PRIOR = "client"
"""The default: the client's whole training split, as Chen and Chao's code."""

RULES = {"private": r"^personal/", "shared": r"^(embedding|encoder|classifier)/"}
"""The personal head stays on the client; body and generic head go."""


def fedrod_loss(model: FedRoDClassifier, label_prior: str = LABEL_PRIOR):
    """The FedRoD client loss, L = L_BSM(g) + CE(sg(g) + p) of the module docstring.

    Args:
      model: the :class:`FedRoDClassifier` whose ``heads(tokens)`` gives the generic and
        personal logits, float32 ``[B, C]`` each.
      label_prior: where the balanced softmax's N_c come from: ``"client"``, the client's
        whole training split (``start.data``), or ``"batch"``, the step's mini-batch.

    Returns:
      ``loss(params, batch, rng, start) -> (value, aux)``: ``value`` the float32 scalar BSM +
      CE, both masked means over the batch's real rows (labels int32 in [0, C)); aux
      ``accuracy`` (of g + p on the real rows), ``generic_accuracy``, ``bsm`` and
      ``personal_ce`` (float32 scalars).

    Raises:
      ValueError: another ``label_prior``; with ``"client"``, a ``start`` without ``data``
        (when the loss is called).
    """
    if label_prior not in LABEL_PRIORS:
        raise ValueError(f"fedrod: label_prior must be one of {LABEL_PRIORS}, got "
                         f"{label_prior!r}")

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        del rng
        g, p = model.apply({"params": params}, batch.tokens, method=model.heads)
        if label_prior == "batch":
            counts = label_counts(batch.labels, batch.mask, g.shape[-1])
        elif start.data is None:
            raise ValueError("fedrod: label_prior='client' reads the client's training split "
                             "from ClientStart.data, which is None here; pass it, or use "
                             "label_prior='batch'")
        else:
            counts = label_counts(start.data.labels, start.data.mask, g.shape[-1])
        bsm = masked_mean(balanced_softmax(g, batch.labels, counts), batch.mask)
        personal = jax.lax.stop_gradient(g) + p
        ce = optax.softmax_cross_entropy_with_integer_labels(personal, batch.labels)
        ce = masked_mean(ce, batch.mask)
        hits = lambda x: masked_mean((jnp.argmax(x, -1) == batch.labels).astype(jnp.float32),
                                     batch.mask)
        return bsm + ce, {"accuracy": hits(personal), "generic_accuracy": hits(g),
                          "bsm": bsm, "personal_ce": ce}

    return loss


def fedrod(model: FedRoDClassifier, learning_rate: float = LEARNING_RATE,
           momentum: float = MOMENTUM, embedding_learning_rate: float | None = None,
           label_prior: str = LABEL_PRIOR) -> Algorithm:
    """Builds FedRoD (linear personal head; see the module docstring).

    Args:
      model: :class:`FedRoDClassifier`.
      learning_rate: the step size of the client SGD (both heads and the body).
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      label_prior: the balanced softmax's N_c: ``"client"`` (the client's training split,
        as the authors' method) or ``"batch"`` (the step's mini-batch).

    Returns:
      The :class:`Algorithm`: private leaves ``personal/``; Ap on g + p (mode
      ``full``), Ag on the generic head.

    Raises:
      TypeError: another model.
      ValueError: another ``label_prior``, a FURL vector (the generic head would read the
        client's own vector in training and a zero one for Ag); see
        :func:`~fedjax_sc.algorithms.optimizers.client_sgd`.
    """
    if not isinstance(model, FedRoDClassifier):
        raise TypeError(f"fedrod needs a FedRoDClassifier, got {type(model).__name__}")
    if getattr(model, "furl_dim", 0):
        raise ValueError("FedRoD's generic head is every client's: drop the FURL vector")
    predict_fn, global_fn = predict.single_branch(model)
    return Algorithm(name="fedrod", model=model, client_loss=fedrod_loss(model, label_prior),
                     client_optimizer=client_sgd(learning_rate, momentum,
                                                 embedding_learning_rate),
                     aggregator=weighted_mean, predict=predict_fn, global_predict=global_fn,
                     leaf_rules=RULES)
