"""APFL (Deng, Kamani and Mahdavi 2020, "Adaptive Personalized Federated Learning",
Algorithm 1; the authors' code: MLOPTPSU/FedTorch, ``apfl.py`` and ``alpha_update``).

Client i keeps a local model v and a mixing weight alpha besides the global model w; its
personalised model is the parameter mixture v_bar = alpha v + (1 - alpha) w. A local step on
a batch xi (w, v and alpha moved from the same point)::

    w <- w - eta grad f(w; xi)                  (FedAvg's step: w's own loss only)
    v <- v - eta alpha grad f(v_bar; xi)
    alpha <- clip(alpha - eta_a <v - w, grad f(v_bar; xi)>, 0, 1)

and the server averages w as FedAvg. One loss, f(w) + f(alpha v + (1 - alpha) sg(w)) (sg:
stop-gradient), gives the three gradients. The model is
:class:`~fedjax_sc.models.personal_copy.PersonalCopy` with alpha: v and alpha are private leaves
(never sent, kept across rounds, checkpointed). Ag is w; Ap fine-tunes w, v and alpha with this
loss (alpha unclipped there) and scores the mixture.

As in the authors' code: v starts as a copy of w, alpha at 0.5, clipped to [0, 1] after each
step, eta_a the client learning rate. Where ours differs: the paper's parameter mixture (their
code mixes the two models' outputs); alpha takes a plain SGD step at every local step (theirs:
once a round, with 0.02 alpha added to its gradient); alpha is learned by default, as the
paper's method (their ``--fed_adaptive_alpha`` defaults to off, and their README's APFL
command keeps alpha at 0.5: ``alpha_learning_rate=0`` is that run); w, v and alpha step from
the same point, as Algorithm 1 (their code steps w first and mixes the new w into v_bar); the
paper's shared optimizer settings (momentum 0.9, constant LR, no weight decay; theirs: no
momentum, weight decay 1e-4, the LR divided by 1.01 an epoch); the server's mean of w is
the algorithm's aggregate, weighted by N^k (the paper's is uniform). With clients sampled
per round, only the sampled clients train w, v and alpha, as the authors' code (the paper's
Algorithm 1 updates v and alpha on every client).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import cross_entropy
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd
from fedjax_sc.algorithms.predict import personal_predict
from fedjax_sc.models.personal_copy import ALPHA, PREFIX, PersonalCopy, parts, personal

DEFAULT_ALPHA = 0.5
"""alpha_i's initial value (the authors' code: ``--fed_personal_alpha 0.5``)."""
RULES = {"private": (f"^{PREFIX}", f"^{ALPHA}$"), "shared": f"^(?!{PREFIX}|{ALPHA}$)"}
"""The leaf rules: v (``private_*``) and ``alpha`` stay on the client, w is sent."""


def _clipped_sgd(learning_rate) -> optax.GradientTransformation:
    def update(grads, state, params):
        return jax.tree.map(lambda g, a: jnp.clip(a - learning_rate * g, 0.0, 1.0) - a,
                            grads, params), state
    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def apfl(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
         embedding_learning_rate: float | None = None, alpha: float = DEFAULT_ALPHA,
         alpha_learning_rate: float | None = None) -> Algorithm:
    """Builds APFL on a single-branch model (see the module docstring).

    Args:
      model: the classifier (``TextClassifier`` without a FURL vector); the algorithm's model
        is ``PersonalCopy(model, alpha)``.
      learning_rate: the step size of the client SGD of w and v (paper: eta).
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      alpha: alpha_i's initial value in [0, 1] (a Python number: it sets the initial params).
      alpha_learning_rate: eta_a >= 0, plain SGD with clipping (None: ``learning_rate``; 0:
        alpha fixed).

    Returns:
      The :class:`Algorithm`; its loss f(w) + f(v_bar) reports the mixture's ``accuracy``,
      ``global_loss`` f(w) and ``alpha``.

    Raises:
      ValueError: alpha outside [0, 1], eta_a < 0, a FURL vector, the optimizer's settings.
    """
    hparams.check("APFL alpha", alpha, lambda v: 0 <= v <= 1, "in [0, 1]")
    hparams.check("APFL alpha learning rate", alpha_learning_rate, lambda v: v >= 0, ">= 0")
    if getattr(model, "furl_dim", 0):
        raise ValueError("APFL's local model is the client's own: drop the FURL vector")
    ce = cross_entropy(model)

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        w, _, a = parts(params)
        global_loss, _ = ce(w, batch, rng, start)  # w's gradient: its own loss only
        mixed = personal({**params, **jax.lax.stop_gradient(w)})
        value, aux = ce(mixed, batch, jax.random.fold_in(rng, 1), start)  # w keeps rng
        return global_loss + value, {**aux, "global_loss": global_loss, "alpha": a}

    eta_a = learning_rate if alpha_learning_rate is None else alpha_learning_rate
    optimizer = optax.multi_transform(
        {"model": client_sgd(learning_rate, momentum, embedding_learning_rate),
         ALPHA: _clipped_sgd(eta_a)},
        lambda params: {k: ALPHA if k == ALPHA else "model" for k in params})
    return fedavg(model)._replace(
        name="apfl", model=PersonalCopy(model, float(alpha)), client_loss=loss,
        client_optimizer=optimizer, predict=personal_predict(model), leaf_rules=RULES)
