"""Client losses and the loss terms methods add to them: the cross-entropy (Li et al. 2021,
Eq. 5), KTEPS's HSIC and knowledge transfer, FedMMD's MMD, FedRoD's balanced softmax and MOON's
model-contrastive term (each function cites its source)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms.base import Batch, ClientStart, Params


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of ``values`` float ``[batch]`` over rows where ``mask`` bool ``[batch]`` is True.

    Returns 0 (not NaN) when no row is real, so a fully padded batch yields zero gradients.
    """
    m = mask.astype(values.dtype)
    return jnp.sum(values * m) / jnp.maximum(jnp.sum(m), 1.0)


FeatureTerm = Callable[[Params, jax.Array, Batch, ClientStart],
                       tuple[jax.Array, dict[str, jax.Array]]]
"""``term(params, features, batch, start) -> (scalar, aux)``: a loss term on the pooled
features float ``[batch, f]`` the classifier reads (FedMMD's MMD), added to the
cross-entropy by :meth:`CrossEntropy.with_feature_term`."""


@dataclasses.dataclass(frozen=True, eq=False)  # hashed by identity, as a function is
class CrossEntropy:
    """Softmax cross-entropy of ``model``'s logits, averaged over the real rows (Eq. 5), plus
    any terms on the pooled features it computed them from.

    A :data:`~fedjax_sc.algorithms.base.ClientLoss`: ``loss(params, batch, rng, start) ->
    (scalar, aux)``, aux holding ``accuracy`` on the batch's real rows and each term's own
    entries. Without terms the logits are ``model.apply(params, tokens)``; with terms they
    are ``model.head`` of ``model.features``, computed once and read by the head and every
    term (a plug-in that called the model again would run the BiGRU and its backward pass
    twice).

    Attributes:
      model: a module whose ``apply({"params": p}, tokens)`` returns logits ``[batch, C]``;
        with terms, one that also has ``features(tokens)`` and ``head(features)``
        (``TextClassifier``).
      terms: :data:`FeatureTerm` s added to the cross-entropy, in order.
    """

    model: nn.Module
    terms: tuple[FeatureTerm, ...] = ()

    def with_feature_term(self, term: FeatureTerm) -> CrossEntropy:
        """This loss with ``term`` added.

        Raises:
          ValueError: the model has no ``features`` / ``head`` methods.
        """
        if not (hasattr(self.model, "features") and hasattr(self.model, "head")):
            raise ValueError(f"a feature term needs a model with features() and head(), got "
                             f"{type(self.model).__name__}")
        return dataclasses.replace(self, terms=self.terms + (term,))

    def __call__(self, params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        del rng  # deterministic model: no dropout in the paper's architecture
        model, variables = self.model, {"params": params}
        if self.terms:
            features = model.apply(variables, batch.tokens, method=model.features)
            logits = model.apply(variables, features, method=model.head)
        else:
            logits = model.apply(variables, batch.tokens)
        per_example = optax.softmax_cross_entropy_with_integer_labels(logits, batch.labels)
        correct = (jnp.argmax(logits, -1) == batch.labels).astype(jnp.float32)
        value = masked_mean(per_example, batch.mask)
        aux = {"accuracy": masked_mean(correct, batch.mask)}
        for term in self.terms:
            extra, extra_aux = term(params, features, batch, start)
            value, aux = value + extra, {**aux, **extra_aux}
        return value, aux


def cross_entropy(model: nn.Module) -> CrossEntropy:
    """Softmax cross-entropy of ``model``'s logits, averaged over the real rows (Eq. 5).

    Args:
      model: a module whose ``apply({"params": p}, tokens)`` returns logits ``[batch, C]``.

    Returns:
      A :class:`CrossEntropy` (a :data:`~fedjax_sc.algorithms.base.ClientLoss`); its aux dict
      holds ``accuracy`` on the batch's real rows.
    """
    return CrossEntropy(model)


def _pairwise_sq_distances(x: jax.Array) -> jax.Array:
    """``[B, f] -> [B, B]`` squared Euclidean distances (exact differences, never negative)."""
    diff = x[:, None, :] - x[None, :, :]
    return jnp.sum(diff * diff, axis=-1)


def median_bandwidth(x: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """The median heuristic: sigma = median Euclidean distance between distinct real rows.

    Computed without gradient (``stop_gradient``), as the kernel's scale is a setting, not a
    parameter. Falls back to 1.0 when fewer than two real rows exist or all rows coincide.

    Args:
      x: float ``[B, f]``.
      mask: optional bool ``[B]``, True on real rows.

    Returns:
      float32 scalar sigma.
    """
    x = jax.lax.stop_gradient(x)
    b = x.shape[0]
    mask = jnp.ones((b,), bool) if mask is None else mask
    valid = mask[:, None] & mask[None, :] & ~jnp.eye(b, dtype=bool)
    dist = jnp.sqrt(_pairwise_sq_distances(x))
    sigma = jnp.nanmedian(jnp.where(valid, dist, jnp.nan))
    return jnp.where(jnp.isfinite(sigma) & (sigma > 0), sigma, 1.0).astype(jnp.float32)


def gaussian_gram(x: jax.Array, bandwidth: jax.Array | float) -> jax.Array:
    """Gram matrix ``L_ij = exp(-||x_i - x_j||^2 / (2 sigma^2))``: float ``[B, B]``."""
    return jnp.exp(-_pairwise_sq_distances(x) / (2.0 * jnp.square(bandwidth)))


HSIC_NORMALIZATIONS = ("biased", "none")
"""How :func:`hsic` scales the trace: ``biased`` divides by (n - 1)^2 (Gretton et al.'s biased
estimator, bounded by 1 for Gaussian kernels; Li et al. 2021, Eq. 7 as printed), ``none``
leaves ``Tr(L_x H L_y H)`` as it is ((n - 1)^2 = 49 times larger at a batch of 8: the scale
the paper's remarks on the term's magnitude fit, docs/results.md)."""
HSIC_NORMALIZATION = "biased"
"""The default of the two (docs/choices.md says why)."""


def hsic(x: jax.Array, y: jax.Array, mask: jax.Array | None = None,
         bandwidth: float | None = None,
         normalization: str = HSIC_NORMALIZATION) -> jax.Array:
    """Empirical HSIC with Gaussian kernels (Li et al. 2021, Eq. 7; Gretton et al. 2005).

    ``HSIC = (n - 1)^-2 Tr(L_x H L_y H)`` with ``H = I - 11^T / n`` over the n real rows. It
    is >= 0 (a trace of a product of two PSD matrices), near 0 when x and y are independent.
    ``normalization="none"`` drops the ``(n - 1)^-2`` factor that the paper's Eq. 7 prints
    (its remark that the diversity loss is larger than the knowledge-transfer loss fits the
    unscaled trace, not the printed one; see docs/results.md).

    The paper uses "gaussian kernel function" without a bandwidth. Default: the median
    heuristic (:func:`median_bandwidth`), computed per batch and per argument without gradient;
    pass ``bandwidth`` to fix sigma instead.

    Args:
      x: float ``[B, f]`` (KTEPS: the projected shared features o_s, Eq. 6).
      y: float ``[B, g]`` (the projected private features o_p).
      mask: optional bool ``[B]``; rows where it is False are left out entirely.
      bandwidth: optional Gaussian kernel sigma (> 0) for both arguments.
      normalization: one of :data:`HSIC_NORMALIZATIONS`.

    Returns:
      float32 scalar (0 when fewer than two rows are real).

    Raises:
      ValueError: an unknown ``normalization``.
    """
    if normalization not in HSIC_NORMALIZATIONS:
        raise ValueError(f"hsic normalization must be one of {HSIC_NORMALIZATIONS}, got "
                         f"{normalization!r}")
    b = x.shape[0]
    m = (jnp.ones((b,), bool) if mask is None else mask).astype(jnp.float32)
    n = jnp.sum(m)
    sx = median_bandwidth(x, m > 0) if bandwidth is None else bandwidth
    sy = median_bandwidth(y, m > 0) if bandwidth is None else bandwidth
    h = jnp.diag(m) - jnp.outer(m, m) / jnp.maximum(n, 1.0)  # centring over real rows only
    kx = h @ gaussian_gram(x, sx) @ h
    ky = gaussian_gram(y, sy)
    value = jnp.sum(kx * ky)  # Tr(H Lx H Ly)
    if normalization == "biased":
        value = value / jnp.square(jnp.maximum(n - 1.0, 1.0))
    return jnp.where(n >= 2, value, 0.0)


KT_TEMPERATURE = 0.25
"""T of the knowledge-transfer term (Li et al. 2021, Eq. 8; Sec. 5.2: 0.25)."""


def knowledge_transfer(private_logits: jax.Array, shared_logits: jax.Array,
                       temperature: float = KT_TEMPERATURE) -> jax.Array:
    """The knowledge-transfer loss exactly as Li et al. 2021, Eq. 8 prints it.

    ``L_kt = -sum_c Softmax_1(g_p)_c log Softmax_T(g_s)_c``, the gradient stopped through
    g_s (the shared branch is the teacher and gets no gradient from this term).

    Args:
      private_logits: g_p float ``[batch, C]``.
      shared_logits: g_s float ``[batch, C]``.
      temperature: T (paper: 0.25).

    Returns:
      float ``[batch]`` per-example losses.
    """
    teacher = jax.nn.log_softmax(jax.lax.stop_gradient(shared_logits) / temperature, axis=-1)
    return -jnp.sum(jax.nn.softmax(private_logits, axis=-1) * teacher, axis=-1)


MMD_KERNELS = ("multi", "median")
"""Kernels of :func:`mmd`."""
MMD_KERNEL = "multi"
"""The default kernel: the two-stream FedMMD code's sum of 19 Gaussians."""

MULTI_KERNEL_VARIANCES = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 5.0, 10.0, 15.0, 20.0, 25.0,
                          30.0, 35.0, 100.0, 1e3, 1e4, 1e5, 1e6)
"""The 19 Gaussian kernels whose sum is the two-stream FedMMD code's kernel (Yao et al. 2018's
released ``mmd_loss``, the list of Bousmalis et al.'s domain separation networks):
``k(a, b) = sum_s exp(-||a - b||^2 / (2 s))``, each ``s`` a variance."""


def mmd(x: jax.Array, y: jax.Array, mask: jax.Array | None = None,
        bandwidth: float | None = None, kernel: str = MMD_KERNEL) -> jax.Array:
    """Squared maximum mean discrepancy (Gretton et al. 2012, biased V-statistic), as
    FedMMD's penalty (Yao et al. 2018).

    ``MMD^2 = mean k(x_i, x_j) + mean k(y_i, y_j) - 2 mean k(x_i, y_j)`` over the real rows.
    It is >= 0 and exactly 0 when the two samples are equal row for row.

    Kernels: ``multi`` (default) is the sum of 19 Gaussian kernels of
    :data:`MULTI_KERNEL_VARIANCES`, the kernel of Yao et al.'s released code, so its value
    ranges over [0, 38]; ``median`` is one Gaussian kernel whose sigma is the median
    heuristic on the joint sample ``[x; y]`` (:func:`median_bandwidth`, without gradient), or
    ``bandwidth`` when given; its value ranges over [0, 2].

    Args:
      x: float ``[B, f]`` (the local model's pooled features).
      y: float ``[B, f]`` (the frozen global model's pooled features of the same batch).
      mask: optional bool ``[B]``; rows where it is False are left out of both samples.
      bandwidth: optional Gaussian kernel sigma (> 0) of the ``median`` kernel.
      kernel: one of :data:`MMD_KERNELS`.

    Returns:
      float32 scalar (0 when no row is real).

    Raises:
      ValueError: an unknown kernel, or a bandwidth with the ``multi`` kernel.
    """
    if kernel not in MMD_KERNELS:
        raise ValueError(f"unknown MMD kernel {kernel!r}; choose from {MMD_KERNELS}")
    if kernel == "multi" and bandwidth is not None:
        raise ValueError("the multi kernel has its own widths; a bandwidth needs "
                         "kernel='median'")
    b = x.shape[0]
    m = (jnp.ones((b,), bool) if mask is None else mask)
    joint = jnp.concatenate([x, y], axis=0)
    both = jnp.concatenate([m, m])
    if kernel == "multi":
        d2 = _pairwise_sq_distances(joint)
        k = sum(jnp.exp(-d2 / (2.0 * v)) for v in MULTI_KERNEL_VARIANCES)
    else:
        sigma = median_bandwidth(joint, both) if bandwidth is None else bandwidth
        k = gaussian_gram(joint, sigma)
    w = m.astype(jnp.float32) / jnp.maximum(jnp.sum(m), 1.0)
    signed = jnp.concatenate([w, -w])  # mean embedding difference weights
    return jnp.maximum(signed @ k @ signed, 0.0)


def balanced_softmax(logits: jax.Array, labels: jax.Array, counts: jax.Array) -> jax.Array:
    """Per-example balanced softmax (Ren et al. 2020, "Balanced Meta-Softmax for Long-Tailed
    Visual Recognition"; FedRoD's generic-head loss): the cross-entropy of ``logits + log
    counts`` (a zero count: no mass, not NaN).

    Args:
      logits: float ``[B, C]``; labels: int ``[B]``; counts: float ``[C]`` (>= 0).

    Returns:
      float32 ``[B]``.
    """
    prior = jnp.where(counts > 0, jnp.log(jnp.where(counts > 0, counts, 1.0)), -1e4)
    return optax.softmax_cross_entropy_with_integer_labels(logits + prior, labels)


def label_counts(labels: jax.Array, mask: jax.Array, num_classes: int) -> jax.Array:
    """float32 ``[C]``: how many of the real rows (``mask`` bool ``[N]``) have each label
    (``labels`` int ``[N]`` in [0, C))."""
    return jnp.sum(jax.nn.one_hot(labels, num_classes) * mask[:, None], 0)


def contrastive_loss(z: jax.Array, z_glob: jax.Array, z_prev: jax.Array, mask: jax.Array,
                     temperature: float, has_previous: jax.Array) -> jax.Array:
    """l_con of MOON's Eq. 1 (Li, He and Song 2021, "Model-Contrastive Federated Learning"),
    averaged over the real examples: one positive (z_glob) and one negative (z_prev) per
    example, cosine similarity over tau.

    Args:
      z: float ``[B, f]`` representations of the local model.
      z_glob: the same for the global model.
      z_prev: the same for the previous local model.
      mask: bool ``[B]``, the batch's real examples.
      temperature: tau > 0 (not checked here; MOON's builder checks it).
      has_previous: float32 scalar (or a Python number): 1 where a previous model exists, 0
        in a client's first round (the term is 0 there).

    Returns:
      float32 scalar (the cosines are computed in float32 whatever the features' dtype).
    """
    def norm(a):  # finite gradient at 0 too (a padding example's features)
        return jnp.sqrt(jnp.maximum(jnp.sum(a * a, -1), 1e-16))

    def cos(a, b):  # PyTorch's CosineSimilarity: the product of norms clamped at 1e-8
        a = a.astype(jnp.float32)
        b = b.astype(jnp.float32)
        return jnp.sum(a * b, -1) / jnp.maximum(norm(a) * norm(b), 1e-8)

    positive, negative = cos(z, z_glob) / temperature, cos(z, z_prev) / temperature
    per_example = jnp.logaddexp(positive, negative) - positive
    weights = mask.astype(jnp.float32)
    return has_previous * jnp.sum(weights * per_example) / jnp.maximum(jnp.sum(weights), 1.0)
