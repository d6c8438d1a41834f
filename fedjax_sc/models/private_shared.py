"""Two-branch private-shared classifiers: KTEPS, PFL-DA and the architecture ablation.

One module covers the paper's parallel-branch family (Li et al. 2021, Fig. 2(C), Fig. 3 top,
Sec. 4.1, Table 8). The shared branch is always a complete model -- word embedding E_s, BiGRU
H_s, optional projection P_s (Eq. 6), MLP classifier G_s -- so the server's shared leaves form
the global model. The private branch starts from a component of its own:

=================  ==============================================  ======================
``private_from``   private branch                                  used by
=================  ==============================================  ======================
``classifier``     [P_p] + G_p on the shared pooled feature         KTEPS (Fig. 3), arch A
``encoder``        H_p + G_p on the shared word vectors             arch B
``embedding``      E_p + H_p + G_p (a complete private model)       arch C, PFL-DA
=================  ==============================================  ======================

Parameter paths (the leaf rules go by the prefix: ``private_*``, ``gate``, ``user`` are
private, ``embedding``, ``encoder``, ``shared_*`` are shared)::

    embedding/embedding [V, d]          private_embedding/embedding [V, d]   (embedding)
    encoder/...  (BiGRU, as TextClassifier)   private_encoder/...    (encoder, embedding)
    shared_projection/{kernel [f, f], bias [f]}   private_projection/...  (projection=True)
    shared_classifier/{hidden, output}/...        private_classifier/{hidden, output}/...
    gate/{kernel [2f, 1], bias [1]}  (gated=True, PFL-DA)     user/vector [furl_dim] (FURL)

where f = 2 * hidden + furl_dim.
"""

from __future__ import annotations

from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.models import text_classifier as tc
from fedjax_sc.models.text_classifier import (
    MLP,
    PAD,
    BiGRU,
    Embedding,
    UserVector,
    seq_mean,
    with_user,
)

PRIVATE_FROM = ("classifier", "encoder", "embedding")
"""The values of ``private_from``: where the private branch starts."""


class TwoBranchOutput(NamedTuple):
    """What the two-branch model computes for a batch (all float32).

    Attributes:
      shared_logits: g_s ``[batch, C]``.
      private_logits: g_p ``[batch, C]``.
      shared_features: o_s ``[batch, f]`` (after P_s when ``projection``; Eq. 6).
      private_features: o_p ``[batch, f]`` (after P_p when ``projection``).
      gate_logit: ``[batch]`` the gate's logit z, the private branch weighted by
        ``sigmoid(z)`` (PFL-DA), or None. A loss takes ``log_sigmoid(z)`` and
        ``log_sigmoid(-z)`` from it, finite where ``log(gate)`` would not be.
    """

    shared_logits: jax.Array
    private_logits: jax.Array
    shared_features: jax.Array
    private_features: jax.Array
    gate_logit: jax.Array | None

    @property
    def gate(self) -> jax.Array | None:
        """``[batch]`` weight of the private branch in (0, 1), ``sigmoid(gate_logit)``
        (PFL-DA), or None."""
        return None if self.gate_logit is None else jax.nn.sigmoid(self.gate_logit)


class PrivateSharedClassifier(nn.Module):
    """Parallel shared and private branches over the Embedding-BiGRU-SeqMean-MLP model.

    Attributes:
      vocab_size: V.
      embed_dim: d.
      hidden: BiGRU hidden size per direction (paper: 64).
      mlp_hidden: width of both classifiers' hidden layer (paper: unspecified; 128).
      num_classes: C.
      private_from: ``classifier`` | ``encoder`` | ``embedding`` (see the module docstring).
      projection: add the projections P_s, P_p: one fully-connected layer each, output size =
        input size, no activation (Sec. 4.1.1, "single-layer fully-connected projection").
      gated: add PFL-DA's learned gate (Peterson et al. 2019): a private ``Dense(1)`` + sigmoid
        on ``[o_s, o_p]`` giving the private branch's weight in the mixture.
      furl_dim: size of FURL's private user vector concatenated to both pooled features
        (0: none).
      dtype: the computation dtype (see :class:`~fedjax_sc.models.text_classifier.
        TextClassifier`); features and logits are returned in float32.
      gru_init: how both BiGRUs' weights start (as ``TextClassifier``'s).

    Raises:
      ValueError: an unknown ``private_from`` (when the model is set up).
    """

    vocab_size: int
    embed_dim: int = tc.EMBED_DIM
    hidden: int = tc.HIDDEN
    mlp_hidden: int = tc.MLP_HIDDEN
    num_classes: int = tc.NUM_CLASSES
    private_from: str = "classifier"
    projection: bool = True
    gated: bool = False
    furl_dim: int = 0
    dtype: str = tc.DTYPE
    gru_init: str = tc.GRU_INIT

    def setup(self):
        if self.private_from not in PRIVATE_FROM:
            raise ValueError(f"private_from must be one of {PRIVATE_FROM}, "
                             f"got {self.private_from!r}")
        f = 2 * self.hidden + self.furl_dim
        dtype = self.dtype
        self.embedding = Embedding(self.vocab_size, self.embed_dim, dtype)
        self.encoder = BiGRU(self.hidden, dtype, self.gru_init)
        if self.private_from == "embedding":
            self.private_embedding = Embedding(self.vocab_size, self.embed_dim, dtype)
        if self.private_from in ("encoder", "embedding"):
            self.private_encoder = BiGRU(self.hidden, dtype, self.gru_init)
        if self.projection:
            self.shared_projection = nn.Dense(f, dtype=dtype)
            self.private_projection = nn.Dense(f, dtype=dtype)
        self.shared_classifier = MLP(self.mlp_hidden, self.num_classes, dtype)
        self.private_classifier = MLP(self.mlp_hidden, self.num_classes, dtype)
        self.gate = nn.Dense(1, dtype=dtype) if self.gated else None
        self.user = UserVector(self.furl_dim) if self.furl_dim else None

    def _shared_features(self, tokens: jax.Array, personal: bool):
        mask = tokens != PAD
        words = self.embedding(tokens)
        o = with_user(seq_mean(self.encoder(words, mask), mask), self.user, personal)
        return (self.shared_projection(o) if self.projection else o), o, words, mask

    def __call__(self, tokens: jax.Array) -> TwoBranchOutput:
        """Both branches of a client's model.

        Args:
          tokens: int32 ``[batch, len]``, right-padded with ``PAD``.

        Returns:
          :class:`TwoBranchOutput`.
        """
        o_s, o, words, mask = self._shared_features(tokens, personal=True)
        if self.private_from == "classifier":
            o_priv = o
        else:
            if self.private_from == "embedding":
                words = self.private_embedding(tokens)
            o_priv = with_user(seq_mean(self.private_encoder(words, mask), mask), self.user,
                               personal=True)
        o_p = self.private_projection(o_priv) if self.projection else o_priv
        gate_logit = None
        if self.gate is not None:
            gate_logit = self.gate(jnp.concatenate([o_s, o_p], -1))[:, 0]
        f32 = lambda x: None if x is None else x.astype(jnp.float32)
        return TwoBranchOutput(self.shared_classifier(o_s), self.private_classifier(o_p),
                               f32(o_s), f32(o_p), f32(gate_logit))

    def global_logits(self, tokens: jax.Array) -> jax.Array:
        """Logits g_s of the global model: the shared branch alone, FURL's vector zero.

        Only shared leaves are read, so the server's params suffice.

        Returns:
          float32 ``[batch, C]``.
        """
        return self.shared_classifier(self._shared_features(tokens, personal=False)[0])


def mode_probabilities(out: TwoBranchOutput) -> dict[str, jax.Array]:
    """Class probabilities per inference mode (Li et al. 2021, Table 6).

    ``s``: the shared classifier; ``p``: the private classifier; ``sp``: the mean of the two
    classifiers' probabilities (Remark 4), or for a gated model (PFL-DA) the gate's mixture
    ``gate * p + (1 - gate) * s``.

    Returns:
      ``{"s", "p", "sp"}`` -> float32 ``[batch, C]``.
    """
    s = jax.nn.softmax(out.shared_logits, -1)
    p = jax.nn.softmax(out.private_logits, -1)
    w = 0.5 if out.gate is None else out.gate[:, None]
    return {"s": s, "p": p, "sp": w * p + (1.0 - w) * s}
