"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich and Suresh 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", Algorithm 1 with option II).

Client i keeps a control variate c_i, the server keeps c (both zero at first, shaped as the
shared leaves). A local step follows the gradient corrected by c - c_i (line 10): the gradient
of the added term <c - c_i, w - stop_grad(w)>, whose value is 0. After K local steps of size
eta from x to y_i (line 12, option II) and at the server (lines 16-17)::

    c_i+ = c_i - c + (x - y_i) / (K eta),     x <- x + eta_g mean_{i in S}(y_i - x),
    c <- c + (1 / N) sum_{i in S} (c_i+ - c_i)

c goes down with the model, c_i+ - c_i up with the upload (the algorithm's ``Hooks``). Round
1 (c = c_i = 0) is FedAvg's; one client is FedAvg in every round. Where ours differs from
Algorithm 1 and FL-bench (``src/{client,server}/scaffold.py``: ``global_lr`` 1, a uniform mean
of y_i - x, plain SGD): the mean of the y_i is the algorithm's aggregate (FedAvg: weighted by
N^k); under heavy-ball momentum rho, K eta is the distance of K steps along a constant
gradient (``optimizers.momentum_steps``; rho = 0 is the paper's), the embedding tables with
their own eta; with local vocabularies a client corrects only its own words' rows (the dense
model moves every row by c - c_i; c_i's other rows stay 0 either way). Ap fine-tunes with the
corrected gradient. x - y_i is the update as the client sent it (``ClientEnd.sent``: its
upload as the server decodes it, noise and compression included), so the control-variate
change that goes up tells the server nothing the upload does not, and c stays the mean of
the c_i; under the paper's upload noise (sigma 0.01) on four FDU-MTL domains (books, dvd,
electronics, kitchen_housewares; L 64, V 5,000, 40 rounds, seed 0) the mean Ag of the last
10 rounds is 79.2, against 78.9 with the client's exact update (whose message would give the
server each exact update) and FedAvg's 77.1 (results/fdu/beyond.md). A FedOpt server
(``--server-opt``) takes its own step before eta_g's: leave eta_g at 1 with one.
"""

from __future__ import annotations

import re

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax import traverse_util

from fedjax_sc.algorithms import hparams, masking
from fedjax_sc.algorithms.base import (
    Algorithm,
    ClientEnd,
    Hooks,
    ServerInputs,
    sent_update,
)
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import EMBEDDING_RULE, LEARNING_RATE, MOMENTUM, momentum_steps

DEFAULT_GLOBAL_LR = 1.0
"""eta_g, the server's step size (the paper's experiments and FL-bench's default: 1)."""


def control_variates(algorithm: Algorithm, learning_rate: hparams.Value,
                     momentum: hparams.Value, num_clients: int,
                     global_lr: hparams.Value = DEFAULT_GLOBAL_LR,
                     embedding_learning_rate: hparams.Value | None = None) -> Algorithm:
    """``algorithm`` with SCAFFOLD's control variates (client state c_i, server state c).

    Args:
      algorithm: a stateless algorithm (its loss, upload and aggregator are kept); the
        variates cover its shared leaves (a private leaf is not corrected).
      learning_rate: eta_l, the step size of the client SGD the algorithm runs, which option
        II divides by.
      momentum: the client SGD's momentum rho (K becomes the heavy-ball distance
        :func:`fedjax_sc.algorithms.optimizers.momentum_steps`).
      num_clients: N (line 17's mean over every client).
      global_lr: eta_g (> 0); 1 keeps the aggregate as it is.
      embedding_learning_rate: the client SGD's eta for the word embeddings (None: eta_l).

    Returns:
      The :class:`Algorithm`; c and c_i are float32 pytrees shaped as the shared params.

    Raises:
      ValueError: a non-positive learning rate or eta_g, num_clients < 1, or hooks already set.
    """
    for name, value in (("learning_rate", learning_rate), ("global_lr", global_lr),
                        ("embedding_learning_rate", embedding_learning_rate)):
        hparams.check(f"SCAFFOLD {name}", value, lambda v: v > 0, "> 0")
    if int(num_clients) < 1:
        raise ValueError(f"SCAFFOLD needs num_clients >= 1, got {num_clients}")
    if algorithm.hooks != Hooks():
        raise ValueError(f"{algorithm.name} already owns state (hooks); SCAFFOLD adds its own"
                         " (run both with fedjax_sc.algorithms.compose.named_chain)")
    base = algorithm.client_loss

    def loss(params, batch, rng, start):
        value, aux = base(params, batch, rng, start)
        own = masking.like(params, start.state)
        term = sum(jnp.vdot(jax.lax.stop_gradient(c - ci), w - jax.lax.stop_gradient(w))
                   for c, ci, w in zip(jax.tree.leaves(start.server),
                                       jax.tree.leaves(start.state), jax.tree.leaves(own)))
        return value + term, aux

    def step_size(path):
        table = embedding_learning_rate is not None and re.search(EMBEDDING_RULE, "/".join(path))
        return embedding_learning_rate if table else learning_rate

    def client_end(end: ClientEnd):  # from the update as sent (noise included)
        distance = jnp.maximum(momentum_steps(end.steps, momentum), 1.0)
        ci, c, u = (traverse_util.flatten_dict(t) for t in (
            end.start.state, end.start.server, sent_update(end, end.start.state)))
        new = traverse_util.unflatten_dict({p: ci[p] - c[p] - u[p] / (
            step_size(p) * distance) for p in ci})
        return new, jax.tree.map(jnp.subtract, new, end.start.state)  # (c_i+, c_i+ - c_i)

    def server_update(s: ServerInputs):
        share = s.participating.astype(jnp.float32) / num_clients
        c = jax.tree.map(jnp.add, s.state, s.reduce(s.messages, share))
        if hparams.concrete(global_lr) == 1.0:
            return s.params, c
        return jax.tree.map(lambda new, old: old + global_lr * (new - old), s.params,
                            s.previous), c

    zeros = lambda params: jax.tree.map(jnp.zeros_like, params)
    return algorithm._replace(client_loss=loss, hooks=Hooks(
        client_init=zeros, server_init=zeros, client_end=client_end,
        server_update=server_update, server_state_sent=True))


def scaffold(model: nn.Module, num_clients: int, learning_rate: float = LEARNING_RATE,
             momentum: float = MOMENTUM, embedding_learning_rate: float | None = None,
             global_lr: float = DEFAULT_GLOBAL_LR) -> Algorithm:
    """Builds SCAFFOLD on FedAvg (:func:`~fedjax_sc.algorithms.fedavg.fedavg`).

    Args:
      model: the classifier (``TextClassifier``).
      num_clients: N.
      learning_rate: eta_l (paper: 0.01).
      momentum: rho (paper: 0.9).
      embedding_learning_rate: eta for the word embeddings (None: eta_l).
      global_lr: eta_g (default 1).

    Raises:
      ValueError: see :func:`control_variates` and the optimizer's settings.
    """
    return control_variates(fedavg(model, learning_rate, momentum, embedding_learning_rate),
                            learning_rate, momentum, num_clients, global_lr,
                            embedding_learning_rate)._replace(name="scaffold")
