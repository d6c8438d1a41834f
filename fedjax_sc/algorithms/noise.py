"""Gaussian noise on every uploaded leaf (Li et al. 2021, Alg. 1 line 14; Sec. 5.2: sigma = 0.01).

The paper adds N(0, sigma^2) noise independently to every uploaded parameter -- after the PCA
compression, to ``theta_E^k U^k`` and ``U^k`` as well as to the other shared leaves -- "to
satisfy differential privacy as much as possible". This is output perturbation with a fixed
sigma, not calibrated to a sensitivity, so it gives no (epsilon, delta) guarantee by itself;
for a guarantee use DP-SGD (:mod:`fedjax_sc.algorithms.dp_sgd`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.upload import UploadContext, UploadTransform

PAPER_SIGMA = 0.01
"""Noise std of Li et al. 2021, Sec. 5.2 ("we add gaussian noise with sigma = 0.01 to the model
parameters independently", said of the FL methods; Alg. 1 line 14 for KTEPS*)."""


def gaussian_noise(sigma: float) -> UploadTransform:
    """Upload transform adding i.i.d. N(0, sigma^2) to every floating-point leaf of the message.

    Args:
      sigma: standard deviation, in parameter units (paper: 0.01); a float or a scalar array
        (traced in a population). A concrete 0 sends the message as is.

    Returns:
      A stateless :class:`~fedjax_sc.algorithms.upload.UploadTransform`; ``decode`` is the
      identity (the server cannot remove the noise). Leaf i of the message (in
      ``jax.tree.leaves`` order) draws from ``fold_in(rng, i)``. Integer leaves are sent as
      they are.

    Raises:
      ValueError: if sigma < 0.
    """
    hparams.check("gaussian_noise: sigma", sigma, lambda v: v >= 0, ">= 0")

    def init(params):
        del params
        return ()

    def encode(params, state, rng, context: UploadContext | None = None):
        del state, context
        if hparams.is_zero(sigma):
            return params, {}
        leaves, treedef = jax.tree.flatten(params)
        noisy = [x + sigma * jax.random.normal(jax.random.fold_in(rng, i), x.shape, x.dtype)
                 if jnp.issubdtype(x.dtype, jnp.floating) else x
                 for i, x in enumerate(leaves)]
        return jax.tree.unflatten(treedef, noisy), {}

    def decode(message, state, context=None):
        del state, context
        return message

    return UploadTransform(init, encode, decode)
