"""FedFusion's model: the Embedding-BiGRU-SeqMean extractor, a learned fusion of the local
and the frozen global features, then the MLP classifier (Yao et al. 2019, "Towards Faster and
Better Federated Learning: A Feature Fusion Approach", Sec. 3.2).

Yao et al. fuse convolutional feature maps; here the features are pooled vectors
o in R^{2h} (Eq. 1-3 of Li et al. 2021), and the operators become:

* ``conv`` (default; Yao et al.'s best): a 1x1 convolution over the two stacked feature maps,
  which on vectors is ``W [o_local; o_global] + b`` with ``W`` in R^{2h x 4h}, initialised to
  ``[I/2, I/2]`` so the fused model starts as the plain model;
* ``multi``: a learned per-channel mix ``a * o_local + (1 - a) * o_global``, ``a =
  sigmoid(v)`` in (0, 1)^{2h} (starts at 1/2);
* ``single``: the same with one scalar ``a``.

Without global features (the global model itself, whose local and global extractors are the
same) the operator fuses the features with themselves.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.models.text_classifier import MLP, PAD, BiGRU, Embedding, seq_mean

FUSIONS = ("conv", "multi", "single")


def _half_identity_pair(key, shape, dtype=jnp.float32):
    """``[I/2; I/2]`` of shape ``[2f, f]`` (Flax Dense kernels are ``[in, out]``)."""
    del key
    f = shape[1]
    return jnp.concatenate([jnp.eye(f, dtype=dtype), jnp.eye(f, dtype=dtype)]) / 2


class Fusion(nn.Module):
    """The fusion operator (see the module docstring).

    Attributes:
      kind: ``conv`` | ``multi`` | ``single``.
    """

    kind: str = "conv"

    @nn.compact
    def __call__(self, local: jax.Array, global_: jax.Array) -> jax.Array:
        """float ``[batch, f]`` x 2 -> fused float ``[batch, f]``."""
        f = local.shape[-1]
        if self.kind == "conv":
            return nn.Dense(f, kernel_init=_half_identity_pair, name="conv")(
                jnp.concatenate([local, global_], axis=-1))
        size = (f,) if self.kind == "multi" else (1,)
        a = jax.nn.sigmoid(self.param("mix", nn.initializers.zeros_init(), size, jnp.float32))
        return a * local + (1.0 - a) * global_


class FusionClassifier(nn.Module):
    """Embedding-BiGRU-SeqMean extractor, fusion with the global extractor, MLP classifier.

    Attributes:
      vocab_size, embed_dim, hidden, mlp_hidden, num_classes: as ``TextClassifier``.
      fusion: the operator, one of :data:`FUSIONS`.
      dtype: the computation dtype (float32 parameters, features and logits).
    """

    vocab_size: int
    embed_dim: int = 200
    hidden: int = 64
    mlp_hidden: int = 128
    num_classes: int = 2
    fusion: str = "conv"
    dtype: str = "float32"

    def setup(self):
        if self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {self.fusion!r}; choose from {FUSIONS}")
        self.embedding = Embedding(self.vocab_size, self.embed_dim, self.dtype)
        self.encoder = BiGRU(self.hidden, self.dtype)
        self.fuse = Fusion(self.fusion)
        self.classifier = MLP(self.mlp_hidden, self.num_classes, self.dtype)

    def features(self, tokens: jax.Array) -> jax.Array:
        """Pooled features of this model's extractor: float32 ``[batch, 2 * hidden]``."""
        mask = tokens != PAD
        return seq_mean(self.encoder(self.embedding(tokens), mask), mask).astype(jnp.float32)

    def __call__(self, tokens: jax.Array, global_features: jax.Array | None = None
                 ) -> jax.Array:
        """Logits float32 ``[batch, num_classes]``.

        Args:
          tokens: int32 ``[batch, len]``.
          global_features: the frozen global extractor's features of the same tokens, float
            ``[batch, 2 * hidden]``; None fuses the model's features with themselves (the
            global model).
        """
        local = self.features(tokens)
        return self.classifier(self.fuse(local, local if global_features is None
                                         else global_features))
