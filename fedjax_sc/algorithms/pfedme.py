"""pFedMe (Dinh, Tran and Nguyen 2020, "Personalized Federated Learning with Moreau
Envelopes", Algorithm 1; the authors' code: CharlieDinh/pFedMe, ``userpFedMe.py``,
``pFedMeOptimizer``, ``persionalized_aggregate_parameters``).

Client i minimises the Moreau envelope F_i(w) = min_theta f_i(theta) + lambda/2 ||theta - w||^2.
A local step on a batch first solves for the personalised model theta approximately, by K
gradient steps of size p from theta's current value, then steps w along the envelope's
gradient; the server moves w by beta towards the clients' mean (beta = 1: FedAvg's mean)::

    theta <- theta - p (grad f(theta; batch) + lambda (theta - w))        (K times)
    w <- w - eta lambda (w - theta);      server: w <- (1 - beta) w + beta mean_i w_i

theta is the private copy of :class:`~fedjax_sc.models.personal_copy.PersonalCopy` (never sent,
kept across rounds); the ``client_gradient`` returns lambda (w - theta) for w and theta_old -
theta_new for theta, which the optimizer's theta part turns into theta_new. Ag is w; Ap scores
theta (the paper's personalised model), then fine-tunes it on f alone. (The authors' code scores
another model as personalised: its ``persionalized_model_bar`` is the model's own parameters,
which ``update_parameters(self.local_model)`` overwrites with the local w at the round's end, so
their personalised accuracy is that of w_i after the round.) Defaults: the authors' lambda 15, K
5, p 0.09, beta 1. Where ours differs: theta warm-starts from the previous step's value across
rounds too (their clients reset it to the downloaded w at a round's start); no 0.001 theta (L2)
term in the inner step; w steps by the client optimizer (momentum included); with local
vocabularies the coupling acts on the client's rows only (the dense table pulls every row of w
towards theta's): exact in the first round only; the local work is the paper's shared E = 2
epochs, every batch one w step (about 400 a round on FDU-MTL), where the authors take R = 20
batches a round (``--local-steps 20`` is that budget); the server's mean is weighted by
N^k (the paper's is uniform; the authors' code weights it too); with clients sampled per
round only the sampled clients train (the paper's Algorithm 1 and the authors' code update
every client and sample for the aggregation alone). w's momentum (0.9, the paper's shared
setting) makes its pull towards theta, eta lambda = 0.15 a step, a damped oscillation (a
modulus of 0.95 a step) where plain SGD contracts by 0.85.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientLoss, ClientStart, GradientFn
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import cross_entropy
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, client_sgd
from fedjax_sc.algorithms.predict import personal_predict
from fedjax_sc.models.personal_copy import PREFIX, PersonalCopy, join, parts, personal

DEFAULT_LAMBDA = 15.0
"""lambda, the proximal weight (the authors' ``--lamda 15``)."""
DEFAULT_STEPS = 5
"""K, gradient steps per approximate theta (``--K 5``)."""
DEFAULT_PERSONAL_LEARNING_RATE = 0.09
"""p, the inner step size (``--personal_learning_rate 0.09``)."""
DEFAULT_BETA = 1.0
"""beta, the server's step towards the clients' mean (``--beta 1``)."""
RULES = {"private": f"^{PREFIX}", "shared": f"^(?!{PREFIX})"}
"""pFedMe's leaf rules: the personal copy theta private, the global w shared."""


def moreau_gradient(lam: float, steps: int, personal_learning_rate: float):
    """The ``client_gradient`` factory of pFedMe (see the module docstring).

    Args:
      lam: lambda > 0.
      steps: K >= 1 (a Python int: the inner loop's length).
      personal_learning_rate: p > 0.

    Returns:
      ``factory(bound_loss) -> grad_fn``; ``grad_fn(params, batch, rng) -> ((loss, aux),
      grads)`` for :class:`PersonalCopy` params (float32 leaves, ``private_*`` the copy theta):
      ``grads`` lambda (w - theta_K) on w's leaves, theta_0 - theta_K on theta's; ``(loss,
      aux)`` the bound loss at theta_0.

    Raises:
      ValueError: lambda <= 0, K < 1 or p <= 0.
    """
    hparams.check("pFedMe lambda", lam, lambda v: v > 0, "> 0")
    hparams.check("pFedMe personal learning rate", personal_learning_rate, lambda v: v > 0,
                  "> 0")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"pFedMe K must be an int >= 1, got {steps!r}")

    def factory(loss: ClientLoss) -> GradientFn:
        def grad_fn(params, batch: Batch, rng):
            w, theta0, _ = parts(params)
            # inner step k's loss key: fold_in(rng, k), one per step
            value_and_grad = jax.value_and_grad(
                lambda t, k: loss(join(w, t), batch, jax.random.fold_in(rng, k)), has_aux=True)

            def step(theta, k):
                out, g = value_and_grad(theta, k)
                return jax.tree.map(lambda t, d, c: t - personal_learning_rate * (
                    d + lam * (t - c)), theta, g, w), out

            theta, outs = jax.lax.scan(step, theta0, jnp.arange(steps))
            grads = join(jax.tree.map(lambda c, t: lam * (c - t), w, theta),
                         jax.tree.map(jnp.subtract, theta0, theta))
            return jax.tree.map(lambda x: x[0], outs), grads

        return grad_fn

    return factory


def pfedme(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None, lam: float = DEFAULT_LAMBDA,
           steps: int = DEFAULT_STEPS,
           personal_learning_rate: float = DEFAULT_PERSONAL_LEARNING_RATE,
           beta: float = DEFAULT_BETA) -> Algorithm:
    """Builds pFedMe on a single-branch model (see the module docstring).

    Args:
      model: the classifier (``TextClassifier`` without a FURL vector); the algorithm's model
        is ``PersonalCopy(model)``: w and the client's theta.
      learning_rate: eta, the step size of the client SGD of w.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: eta).
      lam: lambda (:func:`moreau_gradient`).
      steps: K (:func:`moreau_gradient`).
      personal_learning_rate: p (:func:`moreau_gradient`).
      beta: > 0 (a traced value goes through an SGD server step; a concrete 1 keeps the mean).

    Raises:
      ValueError: see :func:`moreau_gradient`; beta <= 0, a FURL vector, bad SGD settings.
    """
    hparams.check("pFedMe beta", beta, lambda v: v > 0, "> 0")
    if getattr(model, "furl_dim", 0):
        raise ValueError("pFedMe's theta is the client's own model: drop the FURL vector")
    ce = cross_entropy(model)

    def loss(params, batch: Batch, rng: jax.Array, start: ClientStart):  # f(theta)
        return ce(personal(params), batch, rng, start)

    optimizer = optax.multi_transform(
        {"model": client_sgd(learning_rate, momentum, embedding_learning_rate),
         "personal": optax.scale(-1.0)},
        lambda params: {k: "personal" if k.startswith(PREFIX) else "model" for k in params})
    server = None if hparams.concrete(beta) == 1.0 else optax.sgd(beta)  # on w - mean
    return fedavg(model)._replace(
        name="pfedme", model=PersonalCopy(model), client_loss=loss, client_optimizer=optimizer,
        client_gradient=moreau_gradient(lam, steps, personal_learning_rate),
        predict=personal_predict(model), leaf_rules=RULES, server_optimizer=server)
