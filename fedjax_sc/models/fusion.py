"""FedFusion's model: the Embedding-BiGRU-SeqMean extractor, a learned fusion of the local
and the frozen global features, then the MLP classifier (Yao et al. 2019, "Towards Faster and
Better Federated Learning: A Feature Fusion Approach", Sec. 3.2).

Yao et al. fuse convolutional feature maps; here the features are pooled vectors
o in R^{2h} (Eq. 1-3 of Li et al. 2021), and the operators become:

* ``conv``: a 1x1 convolution over the two stacked feature maps,
  which on vectors is ``W [o_local; o_global] + b`` with ``W`` in R^{2h x 4h}, initialised
  (``init``, :data:`CONV_INITS`) as PyTorch initialises the ``nn.Conv2d(128, 64, 1)`` of Yao
  et al.'s code: ``W`` and ``b`` uniform in +-1/sqrt(fan_in), fan_in = 4h (``pytorch``,
  default); ``half_identity`` starts at ``W = [I/2, I/2]``, ``b = 0``, the plain model.
  On FDU-MTL (4 domains, round 8) ``half_identity`` let the classifier come to rely on the
  gap between the trained and the frozen extractor: the global model fused with its
  reference (the previous round's extractor) read 71.6 and 72.1 in two runs, but 51.1 and
  59.5 fused with its own extractor, which is the model every client starts a round (and
  the Ap phase) from; with ``pytorch`` the two read 70.7 / 69.2 (round 6) and 73.0 / 73.4
  (round 13);
* ``multi`` (default): a learned per-channel mix ``gamma * o_global + (1 - gamma) * o_local``,
  ``gamma`` in R^{2h}, unconstrained and starting at 0, so the model starts as the plain
  model on the trained features (Yao et al.'s ``FeatureFuse``: ``nn.Parameter(torch.zeros(1,
  64, 1, 1))``);
* ``single``: the same with one scalar ``gamma`` (``torch.zeros(1)`` there).

Li et al. 2021 do not say which operator their FedFusion used. ``multi`` is the default because it
is the one of the three whose global model trains close to FedAvg's, as their FedFusion row (1.3
points under FedAvg) does: on FDU-MTL (4 domains, 16 rounds, every leaf shared, no server momentum)
FedAvg read 81.7, ``multi`` 79.4, ``conv`` 73.9 (the fused layer, small at PyTorch's init, passes
about a third of the gradient to the trained extractor) and ``single`` 71.0 (its one weight went to
0.996, the frozen extractor's features only). Yao et al.'s server keeps ``gamma`` on a momentum of
0.9 (:func:`fedjax_sc.algorithms.fedfusion.gamma_average`).

The frozen global extractor is part of the model, as in Yao et al.'s code (thu-media/FedFusion,
``model/cifar_models.py``: the ``refer_*`` layers sit in the model's state dict): a second
Embedding-BiGRU, ``reference_embedding`` and ``reference_encoder``, whose features enter the
fusion under ``stop_gradient``. FedFusion declares it a local copy of the extractor
(:data:`REFERENCE`, :mod:`fedjax_sc.core.copies`): a client sets it to the extractor it
downloads, and the global model's reference is the extractor of the round before, the one its
clients trained against, which is what Ag and Ap evaluate with.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.models import text_classifier as tc
from fedjax_sc.models.text_classifier import MLP, PAD, BiGRU, Embedding, seq_mean

FUSIONS = ("conv", "multi", "single")
"""The fusion operators (see the module docstring)."""


CONV_INITS = ("pytorch", "half_identity")
"""The initialisations of the ``conv`` fusion operator."""


def _half_identity_pair(key, shape, dtype=jnp.float32):
    """``[I/2; I/2]`` of shape ``[2f, f]`` (Flax Dense kernels are ``[in, out]``)."""
    del key
    f = shape[1]
    return jnp.concatenate([jnp.eye(f, dtype=dtype), jnp.eye(f, dtype=dtype)]) / 2


def _pytorch_conv_bias(key, shape, dtype=jnp.float32):
    """PyTorch's default bias of a layer with ``fan_in = 2f`` inputs: U(+-1/sqrt(2f)), shape
    ``[f]``."""
    bound = (2 * shape[0]) ** -0.5
    return jax.random.uniform(key, shape, dtype, -bound, bound)


# PyTorch's default weight init, kaiming_uniform(a=sqrt(5)): U(+-1/sqrt(fan_in))
_PYTORCH_CONV_KERNEL = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")


class Fusion(nn.Module):
    """The fusion operator (see the module docstring).

    Attributes:
      kind: ``conv`` | ``multi`` | ``single``.
      init: the ``conv`` operator's initialisation, one of :data:`CONV_INITS`.
    """

    kind: str = "multi"
    init: str = "pytorch"

    @nn.compact
    def __call__(self, local: jax.Array, global_: jax.Array) -> jax.Array:
        """float ``[batch, f]`` x 2 -> fused float ``[batch, f]``."""
        f = local.shape[-1]
        if self.kind == "conv":
            if self.init == "pytorch":
                dense = nn.Dense(f, kernel_init=_PYTORCH_CONV_KERNEL,
                                 bias_init=_pytorch_conv_bias, name="conv")
            else:
                dense = nn.Dense(f, kernel_init=_half_identity_pair, name="conv")
            return dense(jnp.concatenate([local, global_], axis=-1))
        size = (f,) if self.kind == "multi" else (1,)
        gamma = self.param("gamma", nn.initializers.zeros_init(), size, jnp.float32)
        return gamma * global_ + (1.0 - gamma) * local


REFERENCE = {"reference_embedding": "embedding", "reference_encoder": "encoder"}
"""The reference extractor's modules of :class:`FusionClassifier`, each with the module it
copies."""


class FusionClassifier(nn.Module):
    """Embedding-BiGRU-SeqMean extractor, fusion with the frozen reference extractor, MLP
    classifier.

    Params: ``embedding``, ``encoder``, ``fuse``, ``classifier`` and the reference copies
    ``reference_embedding`` (``[V, d]``) and ``reference_encoder`` (no gradient reaches them).

    Attributes:
      vocab_size, embed_dim, hidden, mlp_hidden, num_classes, gru_init: as
        ``TextClassifier``.
      fusion: the operator, one of :data:`FUSIONS` (default ``multi``; see the module
        docstring).
      fusion_init: the ``conv`` operator's initialisation, one of :data:`CONV_INITS`
        (``pytorch``, Yao et al.'s code, default; see the module docstring).
      dtype: the computation dtype (float32 parameters, features and logits).

    Raises:
      ValueError: an unknown ``fusion`` or ``fusion_init`` (when the model is set up).
    """

    vocab_size: int
    embed_dim: int = tc.EMBED_DIM
    hidden: int = tc.HIDDEN
    mlp_hidden: int = tc.MLP_HIDDEN
    num_classes: int = tc.NUM_CLASSES
    fusion: str = "multi"
    fusion_init: str = "pytorch"
    dtype: str = tc.DTYPE
    gru_init: str = tc.GRU_INIT

    def setup(self):
        if self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {self.fusion!r}; choose from {FUSIONS}")
        if self.fusion_init not in CONV_INITS:
            raise ValueError(f"unknown fusion_init {self.fusion_init!r}; choose from "
                             f"{CONV_INITS}")
        self.embedding = Embedding(self.vocab_size, self.embed_dim, self.dtype)
        self.encoder = BiGRU(self.hidden, self.dtype, self.gru_init)
        self.reference_embedding = Embedding(self.vocab_size, self.embed_dim, self.dtype)
        self.reference_encoder = BiGRU(self.hidden, self.dtype, self.gru_init)
        self.fuse = Fusion(self.fusion, self.fusion_init)
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
