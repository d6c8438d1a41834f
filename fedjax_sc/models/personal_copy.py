"""A model held twice: the global copy w and the client's personal copy v, optionally mixed.

Its users keep v per client beside the global model w: Ditto (Li, Hu, Beirami and Smith 2021,
"Ditto: Fair and Robust Federated Learning Through Personalization") trains v on its own loss
pulled towards w; APFL (Deng, Kamani and Mahdavi 2020, "Adaptive Personalized Federated
Learning") predicts with the mixture alpha v + (1 - alpha) w and learns alpha; pFedMe (Dinh,
Tran and Nguyen 2020, "Personalized Federated Learning with Moreau Envelopes") keeps its
personalised model theta as v.

Parameter paths, for a base model with top-level modules ``embedding``, ``encoder``,
``classifier`` (``TextClassifier``; every leaf float32, shapes as the base model's)::

    embedding/embedding [V, d]      private_embedding/embedding [V, d]     (v: the same shapes)
    encoder/...                     private_encoder/...
    classifier/...                  private_classifier/...
    alpha []                        (only with ``alpha``: APFL's mixing weight)

Each top-level module of the base model is copied as a top-level module: the library finds a
word-embedding table by its path alone (:func:`fedjax_sc.core.leaves.is_table` recognises only
a top-level ``*embedding/embedding``), so ``private_embedding/embedding`` gets the round's
local-vocabulary rows, the embedding step size and a pretrained init
(:func:`fedjax_sc.models.text_classifier.init_params` fills it as ``embedding``); a copy nested
as ``private/embedding/embedding`` would get none of them. The ``private_`` prefix is also what
the algorithms' leaf rules read to keep v on the client.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.models.text_classifier import Params

PREFIX = "private_"
"""Prefix of the personal copy's top-level modules (``private_embedding``, ...)."""
ALPHA = "alpha"
"""Name of the optional float32 scalar leaf alpha (the mixing weight of :func:`personal`)."""


class PersonalCopy(nn.Module):
    """``base`` twice, w (its top-level modules as they are) and v (each again as
    ``private_<name>``), and with ``alpha`` the float32 scalar leaf ``alpha``.

    ``init`` draws ``base``'s params once, from the key ``base.init`` would get, and uses them for
    both copies (v = w at init; alpha starts at the given value). ``__call__(tokens)`` maps int32
    ``[batch, len]`` tokens to the personalised model's float32 ``[batch, C]`` logits: ``base`` on
    :func:`personal`'s params.

    Attributes:
      base: a one-branch model (``TextClassifier``); ``vocab_size`` and ``embed_dim`` are its.
      alpha: None (no alpha leaf: the personalised model is v) or alpha's initial value.

    Raises:
      ValueError: at init, for a base model with ``private_*`` (or ``alpha``) modules.
    """

    base: nn.Module
    alpha: float | None = None

    vocab_size = property(lambda self: self.base.vocab_size)  # read by init_params
    embed_dim = property(lambda self: self.base.embed_dim)

    def init(self, rngs, *args, **kwargs):
        """``base.init(rngs, *args, **kwargs)``'s params as both copies: w is exactly what
        ``base`` draws from the same key, so a method on this model and FedAvg on ``base``
        start from the same global model (:func:`~fedjax_sc.models.text_classifier.
        init_params` gives both the same pretrained rows); v = w; alpha its initial value.

        Raises:
          ValueError: ``base`` has ``private_*`` (or ``alpha``) modules.
        """
        variables = self.base.clone(parent=None).init(rngs, *args, **kwargs)
        w = variables["params"]
        clash = sorted(k for k in w if k.startswith(PREFIX) or k == ALPHA)
        if clash:
            raise ValueError(f"PersonalCopy copies a one-branch model; "
                             f"{type(self.base).__name__} has modules {clash}")
        alpha = None if self.alpha is None else jnp.asarray(self.alpha, jnp.float32)
        return {**variables, "params": join(w, w, alpha)}

    @nn.compact
    def __call__(self, tokens: jax.Array) -> jax.Array:
        base = self.base.clone(parent=None)
        return base.apply({"params": personal(self.variables["params"])}, tokens)


def parts(params: Params) -> tuple[Params, Params, jax.Array | None]:
    """``(w, v, alpha)`` of :class:`PersonalCopy` params (a dict of top-level modules; any
    part may be absent): w and v as ``base`` params (v's names without the prefix), alpha
    None without the leaf."""
    return ({k: x for k, x in params.items() if not k.startswith(PREFIX) and k != ALPHA},
            {k[len(PREFIX):]: x for k, x in params.items() if k.startswith(PREFIX)},
            params.get(ALPHA))


def join(w: Params, v: Params, alpha: jax.Array | None = None) -> Params:
    """:class:`PersonalCopy` params of their parts, the inverse of :func:`parts`."""
    return {**w, **{PREFIX + k: x for k, x in v.items()},
            **({} if alpha is None else {ALPHA: alpha})}


def personal(params: Params) -> Params:
    """The personalised model's ``base`` params: alpha v + (1 - alpha) w, or v without
    alpha."""
    w, v, alpha = parts(params)
    return v if alpha is None else jax.tree.map(lambda a, b: alpha * a + (1 - alpha) * b, v, w)
