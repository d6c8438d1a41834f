"""A shared body with a generic and a personal head, FedRoD's model (Chen and Chao 2022, "On
Bridging Generic and Personalized Federated Learning for Image Classification", ICLR 2022).

Parameter paths: those of :class:`~fedjax_sc.models.text_classifier.TextClassifier`
(``embedding``, ``encoder``, ``classifier`` = the generic head h_G, optionally ``user``) plus
the personal head h_P, one linear layer on the pooled features::

    personal/kernel [2h, C]      personal/bias [C]      (float32; computed in the model's dtype)

h_P reads the features through ``stop_gradient``, so its loss never trains the body
(:func:`fedjax_sc.algorithms.fedrod.fedrod_loss`).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.models.text_classifier import TextClassifier, with_user


class FedRoDClassifier(TextClassifier):
    """``TextClassifier`` with a personal head ``personal/{kernel [2h, C], bias [C]}`` on the
    pooled features. ``__call__`` returns the personalised logits g + p, ``global_logits`` the
    generic head's g (the other methods as ``TextClassifier``)."""

    def setup(self):
        super().setup()
        self.personal = nn.Dense(self.num_classes, dtype=self.dtype)

    def heads(self, tokens: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(g, p)``: float32 ``[batch, C]`` generic and personal logits for int32 tokens
        ``[batch, len]``; p reads the features through ``stop_gradient``."""
        z = self.features(tokens)
        g = self.classifier(with_user(z, self.user, personal=True))
        return g, self.personal(jax.lax.stop_gradient(z)).astype(jnp.float32)

    def __call__(self, tokens: jax.Array) -> jax.Array:
        g, p = self.heads(tokens)
        return g + p
