"""DP-SGD on the shared leaves (Abadi et al. 2016, "Deep Learning with Differential Privacy"; as
used for federated sentiment classification by Wu et al., "Enhance Mono-modal Sentiment
Classification With Federated Cross-modal Transfer": "differential privacy ... on the shared
parts").

Every local step of a client computes per-example gradients of the shared leaves (``jax.vmap``
of ``jax.grad`` over single-example batches), clips each example's gradient to global L2 norm
C (``optax.per_example_global_norm_clip``), sums them, adds N(0, (z C)^2) noise to every
coordinate and divides by the batch size B. Private leaves never leave the client, so they
train on the ordinary batch gradient. The client optimizer (SGD with momentum) then applies the
result, as in Abadi et al.

Choices, as implemented:

* The divisor is the fixed batch size B (padded rows of a short last batch have a zero
  gradient but count), the usual fixed-size DP-SGD normalisation.
* The per-example loss is the client loss on a one-example batch. A batch-level term -- KTEPS's
  HSIC diversity (Eq. 7) -- is zero on one example, so under DP-SGD it acts on the private
  leaves only; a term that couples examples cannot be clipped per example. A term that reads
  no example (FedProx's proximal term, FedDyn's and SCAFFOLD's state terms: the loss's
  gradient on an example masked out) reveals nothing of the data: it is taken out of every
  example's gradient before clipping and added once, unclipped and without noise.
* The noise of step (e, j) of client k in round r draws from the step's own key, so no two
  clients, rounds or steps share noise.
* With local-vocabulary training (paper Remark 3) the noise covers the rows of V^k that the
  client trains and uploads; which rows those are is disclosed to the server, as in the paper.
  ``--dense-embedding`` noises the whole table.

:func:`epsilon` reports (epsilon, delta) with the RDP accountant of Google's ``dp-accounting``
(optional extra ``fedjax_sc[dp]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import optax

from fedjax_sc import streams
from fedjax_sc.algorithms import hparams, masking
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientLoss, GradientFn


def dp_gradient(leaf_rules: Mapping[str, str | Sequence[str]] | None, l2_norm_clip: float,
                noise_multiplier: float):
    """The ``client_gradient`` factory of DP-SGD (see the module docstring).

    Args:
      leaf_rules: the algorithm's private/shared rules (``None``: every leaf shared).
      l2_norm_clip: C > 0, the per-example clipping norm (gradient units).
      noise_multiplier: z >= 0; the noise std on the summed clipped gradient is z * C.

    Returns:
      ``factory(bound_loss) -> grad_fn`` (the loss with the client's start bound) with
      ``grad_fn(params, batch, rng) -> ((loss, aux), grads)``; ``aux`` gains
      ``dp_clipped_fraction``, the share of the batch's real examples whose gradient norm
      exceeded C.

    Raises:
      ValueError: C <= 0 or z < 0.
    """
    if not l2_norm_clip > 0:
        raise ValueError(f"DP-SGD needs a clipping norm > 0, got {l2_norm_clip}")
    hparams.check("DP-SGD noise multiplier", noise_multiplier, lambda v: v >= 0, ">= 0")

    def factory(loss: ClientLoss) -> GradientFn:
        def grad_fn(params, batch: Batch, rng):
            if leaf_rules is None:
                shared, private = params, {}
            else:
                labels = masking.label_leaves(params, leaf_rules)
                shared = masking.select(params, labels, masking.SHARED)
                private = masking.select(params, labels, masking.PRIVATE)
            # the batch loss is differentiated w.r.t. the private leaves only
            (value, aux), private_grads = jax.value_and_grad(
                lambda p: loss(masking.merge(shared, p), batch, rng), has_aux=True)(private)

            def example_loss(shared_params, tokens, label, mask, i):  # example i: its own key
                one = Batch(tokens[None], label[None], mask[None])
                return loss(masking.merge(shared_params, private), one,
                            jax.random.fold_in(rng, i))[0]

            # the data-free part of the loss (its gradient on an example masked out: FedProx's,
            # FedDyn's, SCAFFOLD's terms) is not clipped: taken out of each example, added back
            free = jax.grad(example_loss)(shared, batch.tokens[0], batch.labels[0],
                                          jnp.zeros_like(batch.mask[0]), 0)
            per_example = jax.vmap(jax.grad(example_loss), in_axes=(None, 0, 0, 0, 0))(
                shared, batch.tokens, batch.labels, batch.mask,
                jnp.arange(batch.tokens.shape[0]))
            leaves, treedef = jax.tree.flatten(jax.tree.map(
                lambda g, f: g - f[None], per_example, free))
            summed, num_clipped = optax.per_example_global_norm_clip(leaves, l2_norm_clip)
            key = jax.random.fold_in(rng, streams.DP_NOISE)
            size = batch.tokens.shape[0]
            noisy = [(s + noise_multiplier * l2_norm_clip
                      * jax.random.normal(jax.random.fold_in(key, i), s.shape, s.dtype)) / size
                     + f for i, (s, f) in enumerate(zip(summed, jax.tree.leaves(free)))]
            grads = masking.merge(jax.tree.unflatten(treedef, noisy), private_grads)
            real = jnp.maximum(jnp.sum(batch.mask), 1).astype(jnp.float32)
            return (value, {**aux, "dp_clipped_fraction": num_clipped / real}), grads

        return grad_fn

    return factory


NO_NOISE = 0.0
"""The run's default noise multiplier z (``--dp-noise``): clipping alone, no noise, until a
study sets it (a guarantee needs z > 0)."""


def dp_sgd(algorithm: Algorithm, l2_norm_clip: float,
           noise_multiplier: float = NO_NOISE) -> Algorithm:
    """``algorithm`` with DP-SGD on its shared leaves (``client_gradient`` replaced).

    Args:
      algorithm: any :class:`~fedjax_sc.algorithms.base.Algorithm`.
      l2_norm_clip: C, per-example clipping norm.
      noise_multiplier: z, noise std z * C on the summed clipped gradient (default
        :data:`NO_NOISE`: 0).

    Raises:
      ValueError: ``algorithm`` computes its own client gradient (Per-FedAvg's
        meta-gradient, pFedMe's Moreau-envelope step), which DP-SGD would replace; or see
        :func:`dp_gradient`.
    """
    if algorithm.client_gradient is not None:
        raise ValueError(f"DP-SGD replaces the client gradient, and {algorithm.name} "
                         f"computes its own: the two do not compose")
    return algorithm._replace(client_gradient=dp_gradient(algorithm.leaf_rules, l2_norm_clip,
                                                          noise_multiplier))


def epsilon(noise_multiplier: float, sampling_rate: float, steps: int,
            delta: float) -> float | None:
    """Epsilon of ``steps`` DP-SGD steps at (z, q) for ``delta``, by the RDP accountant.

    Uses ``dp_accounting.rdp.RdpAccountant`` with Poisson-subsampled Gaussian events (Mironov
    et al. 2019). The round's batches are a shuffled partition of the client's data (each
    example once per epoch), not Poisson samples; reporting the Poisson figure for q = B / N^k
    is the usual approximation (Abadi et al. 2016; Opacus does the same).

    Args:
      noise_multiplier: z (0 gives infinity).
      sampling_rate: q = B / N^k in (0, 1].
      steps: local steps the client has taken in all rounds (0: a client without data).
      delta: target delta (e.g. 1e-5, below 1 / N^k).

    Returns:
      epsilon (0 for no step, ``inf`` for z = 0), or ``None`` when ``dp-accounting`` is not installed.
    """
    try:
        import dp_accounting
        from dp_accounting import rdp
    except ImportError:
        return None
    if steps == 0:
        return 0.0  # nothing of the client's was released
    if noise_multiplier == 0:
        return float("inf")
    accountant = rdp.RdpAccountant()
    event = dp_accounting.PoissonSampledDpEvent(min(sampling_rate, 1.0),
                                                dp_accounting.GaussianDpEvent(noise_multiplier))
    accountant.compose(dp_accounting.SelfComposedDpEvent(event, steps))
    return float(accountant.get_epsilon(delta))
