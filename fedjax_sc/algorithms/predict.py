"""The prediction functions an :class:`~fedjax_sc.algorithms.base.Algorithm` carries: the
personalised model per inference mode (Ap, Li et al. 2021 Eq. 16, Table 6) and the global model
(Ag, Eq. 14)."""

from __future__ import annotations

import flax.linen as nn
import jax

from fedjax_sc.algorithms.base import GlobalPredict, Params, Predict
from fedjax_sc.models.personal_copy import personal
from fedjax_sc.models.private_shared import mode_probabilities


def single_branch(model: nn.Module) -> tuple[Predict, GlobalPredict]:
    """Predictions of a one-branch model (``TextClassifier``): the one mode ``full``.

    The global model is ``model.global_logits`` (FURL's user vector set to zero).
    """

    def predict(params: Params, tokens: jax.Array):
        return {"full": jax.nn.softmax(model.apply({"params": params}, tokens), -1)}

    def global_predict(params: Params, tokens: jax.Array):
        return jax.nn.softmax(model.apply({"params": params}, tokens,
                                          method=model.global_logits), -1)

    return predict, global_predict


def personal_predict(model: nn.Module) -> Predict:
    """``predict`` of a :class:`~fedjax_sc.models.personal_copy.PersonalCopy` of ``model``:
    the personalised model (:func:`~fedjax_sc.models.personal_copy.personal`), mode ``full``."""

    def predict(params: Params, tokens: jax.Array):
        return {"full": jax.nn.softmax(model.apply({"params": personal(params)}, tokens), -1)}

    return predict


def two_branch(model: nn.Module) -> tuple[Predict, GlobalPredict]:
    """Predictions of a ``PrivateSharedClassifier``: modes ``s``, ``p``, ``sp``
    (:func:`fedjax_sc.models.private_shared.mode_probabilities`); the global model is the
    shared branch."""

    def predict(params: Params, tokens: jax.Array):
        return mode_probabilities(model.apply({"params": params}, tokens))

    def global_predict(params: Params, tokens: jax.Array):
        return jax.nn.softmax(model.apply({"params": params}, tokens,
                                          method=model.global_logits), -1)

    return predict, global_predict
