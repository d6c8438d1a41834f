"""MOON: model-contrastive federated learning (Li, He and Song 2021, "Model-Contrastive
Federated Learning", Sec. 3.2, Eq. 1-3; the authors' code, ``train_net_fedcon`` in
QinbinLi/MOON ``main.py``).

Each client keeps the model it ended its last round with. A local step adds to the
cross-entropy a contrastive term that pulls the local representation z of every example
towards the downloaded global model's z_glob and away from the previous local model's z_prev::

    l_con = -log( exp(cos(z, z_glob) / tau) / (exp(cos(z, z_glob) / tau)
                                                + exp(cos(z, z_prev) / tau)) )
    L = CE + mu * l_con

As in the authors' code: in a client's first round there is no previous model and the term is
0 (the positive logit alone); the previous model is the one the client trained last (their
default ``--model_buffer_size 1``); both frozen models run without gradient; mu = 1, tau = 0.5.
Where ours differs: z is the model's pooled features (``TextClassifier.features``, what the
classifier reads), not an extra projection head's output (their image models add one; the
classifier's hidden layer takes its place, so the model stays Embedding-BiGRU-MLP). The client
state (the previous model, and whether there is one) is ``Hooks`` state: checkpointed, kept by
a client that sits a round out. mu = 0 is FedAvg exactly. The authors' weight decay (1e-5) is
not applied (the paper's shared settings have none); with partial participation a client
sampled for the first time has no previous model here (the term is 0), where theirs uses its
own net as first initialised (each party's drawn apart from the global model's).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from fedjax_sc.algorithms import hparams, masking
from fedjax_sc.algorithms.base import Algorithm, Batch, ClientEnd, ClientStart, Hooks, Params
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.losses import CrossEntropy, contrastive_loss
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

DEFAULT_MU = 1.0
"""mu, the contrastive term's weight (the authors' code default, ``--mu 1``)."""
DEFAULT_TEMPERATURE = 0.5
"""tau (the authors' code default, ``--temperature 0.5``)."""


def model_contrastive(algorithm: Algorithm, mu: float = DEFAULT_MU,
                      temperature: float = DEFAULT_TEMPERATURE) -> Algorithm:
    """``algorithm`` with MOON's client state (the previous local model) and contrastive term.

    Args:
      algorithm: an algorithm without hooks of its own whose model has
        ``features(tokens) -> [batch, f]`` (``TextClassifier``). The state keeps the shared
        leaves of the previous model; its private leaves (a FURL user vector) are the
        client's own, which it starts the round with unchanged.
      mu: the term's weight (>= 0; 0: the algorithm unchanged in what it trains).
      temperature: tau (> 0).

    Returns:
      The :class:`Algorithm`; the loss's aux dict gains ``contrastive`` (l_con).

    Raises:
      ValueError: a negative mu, a non-positive temperature, hooks already set, or a model
        without ``features``.
    """
    hparams.check("MOON mu", mu, lambda v: v >= 0, ">= 0")
    hparams.check("MOON temperature", temperature, lambda v: v > 0, "> 0")
    model = algorithm.model
    if not hasattr(model, "features"):
        raise ValueError(f"MOON needs a model with a features() method, got "
                         f"{type(model).__name__}")
    if algorithm.hooks != Hooks():
        raise ValueError(f"MOON keeps its own client state: {algorithm.name} has hooks "
                         f"already (run both with fedjax_sc.algorithms.compose.named_chain)")
    base = algorithm.client_loss
    features = lambda params, tokens: model.apply({"params": params}, tokens,
                                                  method=model.features)

    def term(params: Params, z: jax.Array, batch: Batch, start: ClientStart):
        previous, has_previous = start.state
        frozen = jax.lax.stop_gradient
        value = contrastive_loss(z, frozen(features(start.params, batch.tokens)),
                                 frozen(features(masking.overlay(start.params, previous),
                                                 batch.tokens)), batch.mask,
                                 temperature, has_previous)
        return mu * value, {"contrastive": value}

    if isinstance(base, CrossEntropy) and hasattr(model, "head"):
        loss = base.with_feature_term(term)  # z shared with the cross-entropy's forward pass
    else:
        def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
            value, aux = base(params, batch, rng, start)
            extra, extra_aux = term(params, features(params, batch.tokens), batch, start)
            return value + extra, {**aux, **extra_aux}

    def client_end(end: ClientEnd):  # the model this client trained is its next "previous"
        return (masking.like(end.params, end.start.state[0]), jnp.ones((), jnp.float32)), ()

    return algorithm._replace(client_loss=loss, hooks=Hooks(
        client_init=lambda params: (params, jnp.zeros((), jnp.float32)),
        client_end=client_end))


def moon(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
         embedding_learning_rate: float | None = None, mu: float = DEFAULT_MU,
         temperature: float = DEFAULT_TEMPERATURE) -> Algorithm:
    """Builds MOON: FedAvg with the model-contrastive term.

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the client SGD.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      mu: see :func:`model_contrastive`.
      temperature: see :func:`model_contrastive`.

    Raises:
      ValueError: see :func:`model_contrastive`.
    """
    return model_contrastive(fedavg(model, learning_rate, momentum, embedding_learning_rate),
                             mu, temperature)._replace(name="moon")
