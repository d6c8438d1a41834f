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

The frozen global extractor is part of the model, as in Yao et al.'s code (thu-media/FedFusion,
``model/cifar_models.py``: the ``refer_*`` layers sit in the model's state dict): a second
Embedding-BiGRU, ``reference_embedding`` and ``reference_encoder``, whose features enter the
fusion under ``stop_gradient``. FedFusion declares it a local copy of the extractor
(:data:`REFERENCE`, :mod:`fedjax_sc.algorithms.copies`): a client sets it to the extractor it
downloads, and the global model's reference is the extractor of the round before, the one its
clients trained against, which is what Ag and Ap evaluate with.
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


REFERENCE = {"reference_embedding": "embedding", "reference_encoder": "encoder"}
"""The reference extractor's modules of :class:`FusionClassifier`, each with the module it
copies."""


class FusionClassifier(nn.Module):
    """Embedding-BiGRU-SeqMean extractor, fusion with the frozen reference extractor, MLP
    classifier.

    Params: ``embedding``, ``encoder``, ``fuse``, ``classifier`` and the reference copies
    ``reference_embedding`` (``[V, d]``) and ``reference_encoder`` (no gradient reaches them).

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
        self.reference_embedding = Embedding(self.vocab_size, self.embed_dim, self.dtype)
        self.reference_encoder = BiGRU(self.hidden, self.dtype)
        self.fuse = Fusion(self.fusion)
        self.classifier = MLP(self.mlp_hidden, self.num_classes, self.dtype)

    def features(self, tokens: jax.Array) -> jax.Array:
        """Pooled features of the trained extractor: float32 ``[batch, 2 * hidden]``."""
        mask = tokens != PAD
        return seq_mean(self.encoder(self.embedding(tokens), mask), mask).astype(jnp.float32)

    def reference_features(self, tokens: jax.Array) -> jax.Array:
        """Pooled features of the frozen reference extractor (``stop_gradient``): float32
        ``[batch, 2 * hidden]``."""
        mask = tokens != PAD
        out = seq_mean(self.reference_encoder(self.reference_embedding(tokens), mask), mask)
        return jax.lax.stop_gradient(out.astype(jnp.float32))

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Logits float32 ``[batch, num_classes]`` for int32 ``[batch, len]`` tokens: the
        trained extractor's features fused with the reference extractor's."""
        return self.classifier(self.fuse(self.features(tokens),
                                         self.reference_features(tokens)))
