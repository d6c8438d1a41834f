"""ASP: adversarial shared-private multi-task learning (Liu, Qiu and Huang 2017, Eq. 9-14), the
centralised upper-range baseline of Li et al. 2021 (Sec. 5.4, Tables 2-3; no data privacy).

Model: :class:`fedjax_sc.models.asp.ASPClassifier`. The loss of domain k's batch is

    L = CE(y, softmax(W_k [s; p_k])) + lambda_adv CE(k, D(GRL(s))) + gamma ||S^T P_k||_F^2

(task loss, adversarial loss through gradient reversal, orthogonality between the batch's
shared features S and private features P_k with unit-norm rows, rows of padding left out;
see :func:`orthogonality`). Liu et al.'s settings: lambda_adv = 0.05, gamma = 0.01.

Training is centralised multi-task (``central=CentralTrainer("multitask")``, trained by
:mod:`fedjax_sc.core.central`),
each domain's data once per epoch (FS's and the FL methods' budget in examples seen). The
default ``schedule="alternate"`` is Liu et al.'s loop: one domain's mini-batch per step, the
domains interleaved in a random order, the step moving the shared leaves and that domain's
private ones. ``schedule="sum"`` takes a batch of every domain per step and moves the shared
leaves by the sum of their gradients: the same to first order and K times more parallel, but
each shared step is K = 16 single-domain steps at once, which under momentum 0.9 is a far
larger step than Liu et al. took. Evaluation: each domain's own shared + private model (Ag^k of
the paper's ASP column is this personal accuracy; there is no global model).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms.aggregate import weighted_mean
from fedjax_sc.algorithms.base import (
    MULTITASK_SCHEDULE,
    Algorithm,
    Batch,
    CentralTrainer,
    ClientStart,
    Params,
)
from fedjax_sc.algorithms.losses import masked_mean
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd
from fedjax_sc.models.asp import ASPClassifier

RULES = {"private": r"^private_", "shared": r"^(embedding|encoder|discriminator)/"}
"""ASP's leaf rules: the private branch private; the shared branch and the domain
discriminator shared."""
ADVERSARIAL_WEIGHT = 0.05
"""lambda_adv, the default weight of the adversarial loss."""
ORTHOGONALITY_WEIGHT = 0.01
"""gamma, the default weight of the orthogonality constraint."""


def orthogonality(shared: jax.Array, private: jax.Array, mask: jax.Array) -> jax.Array:
    """``||S^T P||_F^2`` over the real rows (Liu et al. 2017, Eq. 13), each row of S and P
    scaled to unit L2 norm first: float32 scalar in ``[0, B^2]``.

    Liu et al. print the unnormalised product; on this library's 128-wide pooled BiGRU
    features it reaches ~10^3 per batch of 8 and, at gamma = 0.01, outweighs the task loss
    (measured on FDU: 1227 after one epoch, training accuracy 57%). Normalising the rows, as
    Bousmalis et al.'s (2016) difference loss does in practice, keeps the term's purpose --
    shared and private features orthogonal -- at the task loss's scale.
    """
    # sqrt(|x|^2 + eps): finite gradient on an all-zero row (the features of padding)
    unit = lambda x: x * jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) + 1e-12)
    m = mask.astype(shared.dtype)[:, None]
    return jnp.sum(jnp.square((unit(shared) * m).T @ (unit(private) * m)))


def asp_loss(model: ASPClassifier, adversarial: float, orthogonal: float):
    """The ASP client loss (the domain label is ``start.client``; Liu et al.'s weights are
    :func:`asp`'s defaults); aux: ``accuracy``,
    ``adversarial`` (discriminator CE), ``domain_accuracy``, ``orthogonality``."""

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        del rng
        out = model.apply({"params": params}, batch.tokens)
        ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, batch.labels)
        domain = jnp.full(batch.labels.shape, start.client, jnp.int32)
        adv = optax.softmax_cross_entropy_with_integer_labels(out.domain_logits, domain)
        diff = orthogonality(out.shared_features, out.private_features, batch.mask)
        total = masked_mean(ce + adversarial * adv, batch.mask) + orthogonal * diff
        hit = lambda logits, y: masked_mean((jnp.argmax(logits, -1) == y).astype(jnp.float32),
                                            batch.mask)
        return total, {"accuracy": hit(out.logits, batch.labels),
                       "adversarial": masked_mean(adv, batch.mask),
                       "domain_accuracy": hit(out.domain_logits, domain),
                       "orthogonality": diff}

    return loss


def asp(model: ASPClassifier, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
        embedding_learning_rate: float | None = None,
        adversarial: float = ADVERSARIAL_WEIGHT,
        orthogonal: float = ORTHOGONALITY_WEIGHT,
        schedule: str = MULTITASK_SCHEDULE) -> Algorithm:
    """Builds ASP.

    Args:
      model: ``ASPClassifier`` with ``num_domains`` = the number of clients.
      learning_rate: the step size of the SGD.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      adversarial: lambda_adv (>= 0).
      orthogonal: gamma (>= 0).
      schedule: the multi-task step schedule, ``alternate`` (Liu et al.: one domain's batch
        per step) or ``sum`` (every domain's batch per step, gradients summed); see
        :mod:`fedjax_sc.core.multitask`.

    Raises:
      ValueError: an unknown schedule, a negative weight, a model that is not an ``ASPClassifier``,
        or invalid optimizer settings.
    """
    if adversarial < 0 or orthogonal < 0:
        raise ValueError(f"ASP weights must be >= 0, got {adversarial}, {orthogonal}")
    if not isinstance(model, ASPClassifier):
        raise ValueError(f"asp needs an ASPClassifier, got {type(model).__name__}")

    def predict(params: Params, tokens: jax.Array):
        return {"full": jax.nn.softmax(model.apply({"params": params}, tokens).logits, -1)}

    return Algorithm(
        name="asp",
        model=model,
        client_loss=asp_loss(model, adversarial, orthogonal),
        client_optimizer=client_sgd(learning_rate, momentum, embedding_learning_rate),
        aggregator=weighted_mean,
        predict=predict,
        global_predict=None,
        leaf_rules=RULES,
        central=CentralTrainer("multitask", schedule).check(),
    )
