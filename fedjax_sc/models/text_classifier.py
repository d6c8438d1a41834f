"""Embedding -> BiGRU -> SeqMean -> MLP text classifier (Li et al. 2021, Sec. 3.1-3.3, Eq. 1-4).

The module is a plain Flax (linen) module used through ``init`` / ``apply`` on a params pytree:

    params = {
      "embedding":  {"embedding": [V, d]},                        # E, theta_E
      "encoder":    {"input_kernel": [d, 2, 3h], "input_bias": [2, 3h],
                     "recurrent_kernel": [2, h, 3h], "recurrent_bias": [2, 3h]},   # H, theta_H
      "classifier": {"hidden": {"kernel": [2h, m], "bias": [m]},
                     "output": {"kernel": [m, C], "bias": [C]}},                   # G, theta_G
    }

The three top-level names are the paper's three components (word embedding, encoder,
classifier); the private/shared rules of the personalised algorithms are regexes over these paths.
With ``furl_dim > 0`` a fourth, ``"user": {"vector": [furl_dim]}``, is FURL's private user
embedding (Bui et al. 2019), concatenated to the pooled text feature before the classifier.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.models.gru import gru_recurrence

PAD = 0
"""Token id of ``<pad>``; must match :data:`fedjax_sc.data.vocab.PAD`."""
EMBED_DIM = 200
"""d, the word-embedding size (Li et al. 2021, Sec. 5.2: GloVe 200d)."""
HIDDEN = 64
"""s, the BiGRU's hidden size per direction (Li et al. 2021, Sec. 5.2)."""
MLP_HIDDEN = 128
"""The classifier's hidden width (the paper does not give it)."""
NUM_CLASSES = 2
"""C (FDU-MTL: 2; IYY: 5)."""
DTYPE = "float32"
"""The computation dtype (``"bfloat16"``: mixed precision)."""
GRU_INITS = ("semi_orthogonal", "flax", "pytorch")
"""How :class:`BiGRU`'s weights start (the paper does not say; docs/choices.md):
``semi_orthogonal`` LeCun-normal input kernel, zero biases and one semi-orthogonal ``[h, 3h]``
recurrent kernel a direction (:func:`_orthogonal_per_direction`); ``flax`` as Flax's
``GRUCell``: the same but an orthogonal ``[h, h]`` recurrent kernel per gate; ``pytorch`` as
PyTorch's ``nn.GRU``: every weight and bias uniform in ``[-1/sqrt(h), 1/sqrt(h)]``."""
GRU_INIT = "semi_orthogonal"
"""The default of :data:`GRU_INITS`: every committed run was initialised with it."""

Params = Any
"""A params pytree (nested dict of arrays)."""


class BiGRU(nn.Module):
    """Bidirectional GRU over right-padded sequences (paper Eq. 2, "BiRNN" with GRU cells).

    Gate equations are PyTorch's ``nn.GRU`` (reset gate applied to the recurrent candidate):
    ``r = s(W_ir x + b_ir + W_hr h + b_hr)``, ``z = s(W_iz x + b_iz + W_hz h + b_hz)``,
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``.

    Speed: the input projections of all time steps and both directions are one matmul outside
    the recurrence; both directions advance together in one ``lax.scan`` of length L, so the
    sequential part is a single ``[2, B, h] x [2, h, 3h]`` batched matmul per step, and the
    backward pass is hand-written (:func:`fedjax_sc.models.gru.gru_recurrence`).

    Padding: positions where ``mask`` is False keep the previous state. Because padding is on
    the right, the backward direction therefore starts from a zero state at the last real token,
    exactly as a packed sequence would; forward outputs at padded positions are never used by
    :func:`seq_mean`.

    Attributes:
      hidden: hidden size per direction (paper: 64).
      dtype: the computation dtype (``"float32"`` or ``"bfloat16"``); the parameters are
        float32 and cast to it (Flax's ``dtype`` / ``param_dtype`` convention).
      gru_init: how the weights start, one of :data:`GRU_INITS`.

    Raises:
      ValueError: at init, a ``gru_init`` not in :data:`GRU_INITS`.
    """

    hidden: int = HIDDEN
    dtype: str = DTYPE
    gru_init: str = GRU_INIT

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        """Runs both directions.

        Args:
          x: float ``[batch, len, d]`` word vectors.
          mask: bool ``[batch, len]``, True on real (non-pad) tokens, right-padded.

        Returns:
          float ``[batch, len, 2 * hidden]``: forward states then backward states per position.
        """
        h = self.hidden
        d = x.shape[-1]
        f32, dtype = jnp.float32, jnp.dtype(self.dtype)
        input_init, recurrent_init, bias_init = _gru_initializers(self.gru_init, h)
        w_in = self.param("input_kernel", input_init, (d, 2, 3 * h), f32).astype(dtype)
        b_in = self.param("input_bias", bias_init, (2, 3 * h), f32).astype(dtype)
        w_rec = self.param("recurrent_kernel", recurrent_init, (2, h, 3 * h), f32).astype(dtype)
        b_rec = self.param("recurrent_bias", bias_init, (2, 3 * h), f32).astype(dtype)
        x = x.astype(dtype)

        # [len, 2, batch, 3h] input projections of every step and both directions: one matmul.
        proj = (x.reshape(-1, d) @ w_in.reshape(d, 6 * h)).reshape(x.shape[0], x.shape[1], 2,
                                                                  3 * h) + b_in
        proj = jnp.transpose(proj, (1, 2, 0, 3))
        proj = jnp.stack([proj[:, 0], proj[::-1, 1]], axis=1)  # direction 1 runs backwards
        tmask = jnp.swapaxes(mask, 0, 1).astype(x.dtype)
        tmask = jnp.stack([tmask, tmask[::-1]], axis=1)[..., None]  # [len, 2, batch, 1]
        states = gru_recurrence(proj, tmask, w_rec, b_rec)  # [len, 2, batch, h]
        fwd, bwd = states[:, 0], states[::-1, 1]
        return jnp.swapaxes(jnp.concatenate([fwd, bwd], axis=-1), 0, 1)


def _gru_initializers(init: str, hidden: int):
    """``(input kernel, recurrent kernel, biases)`` initialisers of :class:`BiGRU` for
    ``init`` (:data:`GRU_INITS`).

    Raises:
      ValueError: an unknown ``init``.
    """
    if init == "pytorch":
        bound = 1.0 / np.sqrt(hidden)
        uniform = lambda key, shape, dtype=jnp.float32: jax.random.uniform(  # noqa: E731
            key, shape, dtype, -bound, bound)
        return uniform, uniform, uniform
    if init not in GRU_INITS:
        raise ValueError(f"--gru-init {init!r}: choose from {', '.join(GRU_INITS)}")
    return (nn.initializers.lecun_normal(in_axis=0, out_axis=(1, 2)),
            _orthogonal_per_direction if init == "semi_orthogonal" else _orthogonal_per_gate,
            nn.initializers.zeros_init())


def _orthogonal_per_gate(key, shape, dtype=jnp.float32):
    """An orthogonal ``[h, h]`` recurrent kernel for each gate of each direction, as Flax's
    ``GRUCell`` (its ``hr``, ``hz``, ``hn`` Dense layers), side by side as ``[2, h, 3h]``."""
    init = nn.initializers.orthogonal()
    keys = jax.random.split(key, shape[0] * 3)
    h = shape[1]
    return jnp.stack([jnp.concatenate([init(keys[3 * i + g], (h, h), dtype) for g in range(3)],
                                      axis=-1) for i in range(shape[0])])


def _orthogonal_per_direction(key, shape, dtype=jnp.float32):
    """A semi-orthogonal ``[h, 3h]`` recurrent kernel for each direction: its h rows are
    orthonormal across the three gates' columns together, so each gate's ``[h, h]`` block
    holds about a third of the energy and is not itself orthogonal (at h = 64 each block's
    singular values spread over 0.01-0.95).

    Neither Flax's ``GRUCell`` (an orthogonal ``[h, h]`` kernel per gate) nor PyTorch's
    ``nn.GRU`` (every weight and bias uniform in +-1/sqrt(h)); the paper does not say which it
    used. Kept because every committed run was initialised with it (docs/choices.md)."""
    keys = jax.random.split(key, shape[0])
    init = nn.initializers.orthogonal()
    return jnp.stack([init(k, shape[1:], dtype) for k in keys])


class Embedding(nn.Module):
    """Word-embedding lookup E (paper Eq. 1) whose table may hold any number of rows.

    Unlike ``nn.Embed`` the table's row count is not checked against ``vocab_size`` at apply
    time, so a client can run the same model on the rows of its local vocabulary V^k only
    (paper Remark 3) with token ids remapped to them.

    Attributes:
      vocab_size: V, rows created by ``init``.
      embed_dim: d.
      dtype: the dtype of the rows it returns (the table is float32).
    """

    vocab_size: int
    embed_dim: int
    dtype: str = DTYPE

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        """int ``[...]`` ids -> ``[..., d]`` rows of the table, in ``dtype``."""
        table = self.variable(
            "params", "embedding",
            lambda: nn.initializers.normal(stddev=1.0)(
                self.make_rng("params"), (self.vocab_size, self.embed_dim), jnp.float32))
        return jnp.take(table.value, tokens, axis=0).astype(self.dtype)


def seq_mean(states: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean of the hidden states over non-pad positions (paper Eq. 3, SeqMean).

    Args:
      states: float ``[batch, len, f]``.
      mask: bool ``[batch, len]``.

    Returns:
      float ``[batch, f]``; an empty review (no real token) gives the zero vector.
    """
    m = mask.astype(states.dtype)[..., None]
    total = jnp.sum(states * m, axis=1)
    return total / jnp.maximum(jnp.sum(m, axis=1), 1.0)


class MLP(nn.Module):
    """Two fully-connected layers with ReLU between them (paper Sec. 5.2, the classifier G).

    Attributes:
      hidden: width of the hidden layer (the paper does not give it; default 128 = 2 x 64,
        the width of the pooled BiGRU feature).
      num_classes: C.
      dtype: the computation dtype (float32 parameters); the logits are float32.
    """

    hidden: int = MLP_HIDDEN
    num_classes: int = NUM_CLASSES
    dtype: str = DTYPE

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.relu(nn.Dense(self.hidden, dtype=self.dtype, name="hidden")(x))
        return nn.Dense(self.num_classes, dtype=self.dtype, name="output")(x).astype(jnp.float32)


class UserVector(nn.Module):
    """FURL's private per-client user embedding (Bui et al. 2019, Sec. 3): one trainable vector.

    It starts at zeros (FURL's "default value" for a client seen for the first time) and is
    kept private by the personalised leaf rules (path ``user/vector``). The global model, which
    has no user, uses the zero vector.

    Attributes:
      dim: size of the vector.
    """

    dim: int

    @nn.compact
    def __call__(self) -> jax.Array:
        """The float32 ``[dim]`` vector."""
        return self.param("vector", nn.initializers.zeros_init(), (self.dim,), jnp.float32)


def with_user(features: jax.Array, user: UserVector | None, personal: bool) -> jax.Array:
    """Concatenates FURL's user vector (zeros for the global model) to pooled features.

    Args:
      features: float ``[batch, f]``.
      user: the module, or None when FURL is off (``features`` returned unchanged).
      personal: True to use the client's trained vector, False for the zero vector.

    Returns:
      float ``[batch, f + furl_dim]``.
    """
    if user is None:
        return features
    u = user() if personal else jnp.zeros((user.dim,), features.dtype)
    return jnp.concatenate([features, jnp.broadcast_to(u, features.shape[:-1] + u.shape)], -1)


class TextClassifier(nn.Module):
    """Embedding-BiGRU-SeqMean-MLP (paper Fig. 2 left, Eq. 1-4).

    Attributes:
      vocab_size: V (rows of the embedding table, specials included).
      embed_dim: d (paper: 200 with GloVe 200d; 50 with the GloVe 6B 50d shipped here).
      hidden: BiGRU hidden size per direction s (paper: 64).
      mlp_hidden: classifier hidden width (not given by the paper; default 128).
      num_classes: C (FDU: 2, IYY: 5).
      furl_dim: size of FURL's private user vector (0: none).
      dtype: the computation dtype, ``"float32"`` or ``"bfloat16"`` (mixed precision): the
        parameters, the optimizer state and the aggregation stay float32; pooled features
        and logits are returned in float32 for the losses.
      gru_init: how the BiGRU's weights start (:data:`GRU_INITS`).
    """

    vocab_size: int
    embed_dim: int = EMBED_DIM
    hidden: int = HIDDEN
    mlp_hidden: int = MLP_HIDDEN
    num_classes: int = NUM_CLASSES
    furl_dim: int = 0
    dtype: str = DTYPE
    gru_init: str = GRU_INIT

    def setup(self):
        self.embedding = Embedding(self.vocab_size, self.embed_dim, self.dtype)
        self.encoder = BiGRU(self.hidden, self.dtype, self.gru_init)
        self.classifier = MLP(self.mlp_hidden, self.num_classes, self.dtype)
        self.user = UserVector(self.furl_dim) if self.furl_dim else None

    def features(self, tokens: jax.Array) -> jax.Array:
        """Pooled text feature o (Eq. 1-3).

        Args:
          tokens: int32 ``[batch, len]`` token ids, ``PAD`` (0) on padding, right-padded. The ids
            index whatever embedding table the params hold (the global ``[V, d]`` table, or a
            client's local-vocabulary table with ids remapped to it).

        Returns:
          float32 ``[batch, 2 * hidden]``.
        """
        mask = tokens != PAD
        states = self.encoder(self.embedding(tokens), mask)
        return seq_mean(states, mask).astype(jnp.float32)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        """Logits g (Eq. 4) of a client's model: float32 ``[batch, num_classes]``."""
        return self.classifier(with_user(self.features(tokens), self.user, personal=True))

    def head(self, features: jax.Array) -> jax.Array:
        """The classifier alone on pooled features float ``[batch, 2 * hidden]`` (with the
        client's FURL user vector): logits float32 ``[batch, num_classes]`` (FedKC's "last
        layer" consistency, Wang et al. 2022, Sec. 4.3)."""
        return self.classifier(with_user(features, self.user, personal=True))

    def global_logits(self, tokens: jax.Array) -> jax.Array:
        """Logits of the global model (FURL's user vector replaced by zeros; without FURL the
        same as ``__call__``): float32 ``[batch, num_classes]``."""
        return self.classifier(with_user(self.features(tokens), self.user, personal=False))


def init_params(model: nn.Module, rng: jax.Array,
                embedding_matrix: np.ndarray | None = None) -> Params:
    """Initialises the params pytree, optionally with a pretrained embedding table.

    Args:
      model: :class:`TextClassifier` or any of the library's models with ``vocab_size`` and
        ``embed_dim`` attributes (e.g. ``private_shared.PrivateSharedClassifier``).
      rng: PRNG key.
      embedding_matrix: optional float ``[vocab_size, embed_dim]`` (e.g. GloVe rows from
        :mod:`fedjax_sc.data.embeddings`); it initialises every word-embedding table of the
        model (every module of :data:`TABLE_MODULES` it has).

    Returns:
      The ``params`` collection (a nested dict of float32 arrays).

    Raises:
      ValueError: if ``embedding_matrix`` has the wrong shape.
    """
    params = model.init(rng, jnp.zeros((1, 2), jnp.int32))["params"]
    if embedding_matrix is not None:
        expected = (model.vocab_size, model.embed_dim)
        if tuple(embedding_matrix.shape) != expected:
            raise ValueError(f"embedding_matrix has shape {embedding_matrix.shape}, "
                             f"model expects {expected}")
        params = dict(params)
        for name in TABLE_MODULES:
            if name in params:
                params[name] = {"embedding": jnp.asarray(embedding_matrix, jnp.float32)}
    return params


TABLE_MODULES = ("embedding", "private_embedding", "reference_embedding")
"""Top-level names of the word-embedding modules; each holds its ``[V, d]`` table at
``<name>/embedding`` (``reference_embedding``: FedFusion's frozen copy)."""
