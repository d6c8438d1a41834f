"""Ditto (Li, Hu, Beirami and Smith 2021, "Ditto: Fair and Robust Federated Learning Through
Personalization", Eq. 2 and Algorithm 1).

Every client k keeps a personal model v_k beside the global model w. In round t it trains the
downloaded w^t as the global solver does (FedAvg) and, on the same batches, v_k on Eq. 2::

    h_k(v_k; w^t) = F_k(v_k) + (lambda / 2) ||v_k - w^t||^2

The client loss is the separable sum F_glob(w) + F_k(v) + (lambda / 2) ||v - stop_grad(w^t)||^2:
one SGD step moves w by grad F_glob(w) and v by grad F_k(v) + lambda (v - w^t), Algorithm 1's
two updates. The model is :class:`~fedjax_sc.models.personal_copy.PersonalCopy` (no alpha):
the given model's modules hold w (shared), a ``private_`` copy of each holds v (private), so
the round keeps v_k per client (unchanged while k sits a round out), checkpoints it and trains
its table by local-vocabulary rows. ``predict`` (Ap) is v_k, ``global_predict`` (Ag) is w;
Ap fine-tunes both copies with this loss.

As the authors' code (litian96/ditto, ``flearn/trainers_MTL/ditto.py``): v_k starts as w's
initial values (``PersonalCopy`` draws one init for both), takes one step per step of w on the
same batch, and lambda = 1 (every run script: ``--lam=1``). Ours differs: the client optimizer
(momentum 0.9 by default; theirs is plain SGD) runs on v too; no ``dynamic_lam`` search; with
local vocabularies only the client's words' rows of v are pulled towards w^t (train the dense
table for their update).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import cross_entropy
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM
from fedjax_sc.models.personal_copy import PREFIX, PersonalCopy, parts

DEFAULT_LAMBDA = 1.0
"""lambda (the authors' run scripts, ``--lam=1``)."""


def personalized(algorithm: Algorithm, lam: hparams.Value = DEFAULT_LAMBDA) -> Algorithm:
    """``algorithm`` as Ditto's global solver, with a personal model per client.

    Args:
      algorithm: a one-branch algorithm (FedAvg, FedProx, ...); it trains w, its model's
        cross-entropy is F_k, its leaf rules hold for w and every leaf of v is private.
      lam: lambda (>= 0; 0: each v_k trains alone, as Indiv).

    Returns:
      The :class:`Algorithm` on ``PersonalCopy(algorithm.model)``; the loss's aux holds the
      global copy's ``accuracy`` and the personal copy's ``personal_accuracy`` and
      ``proximal``.

    Raises:
      ValueError: a negative lambda; (at init) a model with ``private_`` modules.
    """
    hparams.check("Ditto lambda", lam, lambda v: v >= 0, ">= 0")
    model, base, own = algorithm.model, algorithm.client_loss, cross_entropy(algorithm.model)

    def loss(params, batch, rng, start):
        (w, v, _), (w0, v0, _) = parts(params), parts(start.params)
        value, aux = base(w, batch, rng, start._replace(params=w0))
        personal, personal_aux = own(v, batch, jax.random.fold_in(rng, 1),  # w keeps rng
                                     start._replace(params=v0))
        w0 = jax.lax.stop_gradient(w0)
        term = 0.5 * lam * sum(jnp.sum(jnp.square(a - b)) for a, b in
                               zip(jax.tree.leaves(v), jax.tree.leaves(w0)))
        return value + personal + term, {**aux, "proximal": term,
                                         "personal_accuracy": personal_aux["accuracy"]}

    rules = algorithm.leaf_rules or {"shared": f"^(?!{PREFIX})"}
    private = rules.get("private", [])
    private = [private] if isinstance(private, str) else list(private)
    global_fn = algorithm.global_predict
    return algorithm._replace(
        model=PersonalCopy(model), client_loss=loss,
        leaf_rules={**rules, "private": [*private, f"^{PREFIX}"]},
        predict=lambda params, tokens: algorithm.predict(parts(params)[1], tokens),
        global_predict=None if global_fn is None else
        lambda params, tokens: global_fn(parts(params)[0], tokens))


def ditto(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
          embedding_learning_rate: float | None = None, lam: float = DEFAULT_LAMBDA
          ) -> Algorithm:
    """Builds Ditto with FedAvg as the global solver.

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the client SGD, for both copies.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      lam: see :func:`personalized`.

    Raises:
      ValueError: see :func:`personalized` and the optimizer's settings.
    """
    return personalized(fedavg(model, learning_rate, momentum, embedding_learning_rate),
                        lam)._replace(name="ditto")
