"""ASP's model: adversarial shared-private multi-task text classification (Liu, Qiu and Huang
2017, "Adversarial Multi-task Learning for Text Classification", Sec. 3-4), with this library's
Embedding-BiGRU-SeqMean blocks.

One shared word embedding and shared BiGRU for all domains; per domain a private BiGRU and a
classifier on the concatenated ``[s; p]`` pooled features; a domain discriminator on the shared
features behind a gradient-reversal layer (Ganin and Lempitsky 2015), so minimising its
cross-entropy trains the discriminator to tell the domains apart and the shared encoder to
make them indistinguishable (Liu et al.'s min-max L_adv).

Parameter paths: ``embedding``, ``encoder``, ``discriminator`` (shared) and
``private_encoder``, ``private_classifier`` (one per domain, the algorithm's private leaves).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.models import text_classifier as tc
from fedjax_sc.models.text_classifier import MLP, PAD, BiGRU, Embedding, seq_mean


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def gradient_reversal(x: jax.Array, scale: float = 1.0) -> jax.Array:
    """Identity forward; the backward pass multiplies the gradient by ``-scale`` (a Python
    float)."""
    return x


def _reversal_fwd(x, scale):
    del scale
    return x, None


def _reversal_bwd(scale, residual, g):
    del residual
    return (-scale * g,)


gradient_reversal.defvjp(_reversal_fwd, _reversal_bwd)


class ASPOutput(NamedTuple):
    """ASP's forward pass.

    Attributes:
      logits: float32 ``[batch, C]`` of the domain's classifier on ``[s; p]``.
      shared_features: s, float32 ``[batch, 2h]``.
      private_features: p, float32 ``[batch, 2h]``.
      domain_logits: float32 ``[batch, num_domains]`` of the discriminator on s (behind the
        gradient reversal).
    """

    logits: jax.Array
    shared_features: jax.Array
    private_features: jax.Array
    domain_logits: jax.Array


class ASPClassifier(nn.Module):
    """Shared-private model with a domain discriminator (see the module docstring).

    Attributes:
      vocab_size, embed_dim, hidden, mlp_hidden, num_classes, gru_init: as
        ``TextClassifier``.
      num_domains: number of domains (clients) the discriminator tells apart.
      dtype: the computation dtype (float32 parameters, features and logits).
    """

    vocab_size: int
    embed_dim: int = tc.EMBED_DIM
    hidden: int = tc.HIDDEN
    mlp_hidden: int = tc.MLP_HIDDEN
    num_classes: int = tc.NUM_CLASSES
    num_domains: int = 2
    dtype: str = tc.DTYPE
    gru_init: str = tc.GRU_INIT

    def setup(self):
        self.embedding = Embedding(self.vocab_size, self.embed_dim, self.dtype)
        self.encoder = BiGRU(self.hidden, self.dtype, self.gru_init)
        self.private_encoder = BiGRU(self.hidden, self.dtype, self.gru_init)
        self.private_classifier = MLP(self.mlp_hidden, self.num_classes, self.dtype)
        self.discriminator = MLP(self.mlp_hidden, self.num_domains, self.dtype)

    def __call__(self, tokens: jax.Array) -> ASPOutput:
        """int32 ``[batch, len]`` tokens -> :class:`ASPOutput`."""
        mask = tokens != PAD
        x = self.embedding(tokens)
        s = seq_mean(self.encoder(x, mask), mask).astype(jnp.float32)
        p = seq_mean(self.private_encoder(x, mask), mask).astype(jnp.float32)
        return ASPOutput(self.private_classifier(jnp.concatenate([s, p], -1)), s, p,
                         self.discriminator(gradient_reversal(s, 1.0)))
