"""FedRep: a shared representation and a private head trained in turn (Collins, Hassani,
Mokhtari and Shakkottai 2021, "Exploiting Shared Representations for Personalized Federated
Learning", Algorithm 1; the authors' code, ``LocalUpdate.train`` in lgcollins/FedRep).

In round t every client i first trains its own head h_i with the downloaded representation
phi^t frozen, then the representation with its new head frozen, and uploads phi only::

    h_i <- GRD(f_i(h_i, phi^t), h_i, alpha)          tau_h times
    phi_i <- GRD(f_i(h_i, phi_i), phi_i, alpha)      tau times, from phi_i = phi^t
    phi^{t+1} = sum_i (N^i / N) phi_i                (the authors' code weighs by N^i)

The head is the model's last layer (``classifier/output``), as the authors' models take it
(their ``w_glob_keys`` hold every layer but the last); a FURL user vector, the client's own
too, trains with the head. The representation is the embedding, the BiGRU and the
classifier's hidden layer. The shared leaves do not form a model: no Ag, as FedPer.

Where ours differs: the authors count tau_h and tau in epochs (``local_ep - local_rep_ep`` and
``local_rep_ep``: 10 and 1 on CIFAR, 10 and 5 on Sent140); here the round's E local epochs
are one run of steps and the first ``head_steps`` real steps of a client train the head, the
rest the representation (the client optimizer sees its step count, not the epoch or the
client's size). The default, 200 steps, is one epoch of a paper-sized FDU client (N^k = 1,600
reviews at batch 8), so the paper's E = 2 is one head epoch then one representation epoch; a
client with fewer real steps than ``head_steps`` trains only its head that round (and uploads
the representation it downloaded, at its weight N^k). The step count suits FDU at E = 2
only: with E = 1, a ``--local-steps`` budget under 200, or IYY's clients (thousands of steps
an epoch at batch 64) set ``--rep-head-steps`` to the split wanted. After the
last round the authors refit each head for at least 10 epochs on the frozen final
representation; the Ap phase here fine-tunes the whole model with its own optimizer (the
client optimizer's schedule is not used there). The paper's shared client optimizer: momentum
0.9 and no weight decay (theirs: momentum 0.5, weight decay 1e-4).
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from fedjax_sc.algorithms import hparams, masking
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM, RoundStep

HEAD = r"^(classifier/output|user)/"
"""The head's leaves: the classifier's output layer (and a FURL user vector)."""
RULES = {"private": HEAD, "shared": r"^(embedding|encoder|classifier/hidden)/"}
"""FedRep's leaf rules: the head private, the representation shared."""
DEFAULT_HEAD_STEPS = 200
"""tau_h in real local steps (see the module docstring)."""


def head_then_body(inner: optax.GradientTransformation, head: str,
                   head_steps: hparams.Value) -> optax.GradientTransformation:
    """``inner`` on the head leaves for the first ``head_steps`` updates, then on the others.

    The frozen part's gradients and updates are zero (its momentum buffer stays 0 while it is
    frozen, as a PyTorch parameter with ``requires_grad=False``); the state is ``(int32 count,
    inner state)`` and counts the updates applied (the round's padded no-op steps keep it) as
    an :class:`~fedjax_sc.algorithms.optimizers.RoundStep`, which a kept optimizer state
    starts afresh every round.

    Args:
      inner: the optimizer of the active part (e.g. ``client_sgd``).
      head: regex over leaf paths (``/``-joined), e.g. :data:`HEAD`.
      head_steps: tau_h >= 0 (0: the head never moves); a number or a traced scalar.

    Returns:
      An optax ``GradientTransformation``; its count rises by one at every update it is
      given (a real local step), so the head trains at updates 0 .. tau_h - 1 of a round.

    Raises:
      ValueError: a negative ``head_steps``; at the first update, a ``head`` matching nothing.
    """
    hparams.check("FedRep head_steps", head_steps, lambda v: v >= 0, ">= 0")

    def init(params):
        return RoundStep(jnp.zeros((), jnp.int32)), inner.init(params)

    def update(grads, state, params=None):
        (count,), inner_state = state
        on_head = count < head_steps
        active = jax.tree.map(lambda h: on_head if h else ~on_head, masking.matching(grads, head))
        gate = lambda tree: jax.tree.map(lambda x, a: jnp.where(a, x, jnp.zeros_like(x)),
                                         tree, active)
        updates, inner_state = inner.update(gate(grads), inner_state, params)
        return gate(updates), (RoundStep(count + 1), inner_state)

    return optax.GradientTransformation(init, update)


def fedrep(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
           embedding_learning_rate: float | None = None,
           head_steps: hparams.Value = DEFAULT_HEAD_STEPS) -> Algorithm:
    """Builds FedRep: FedAvg's cross-entropy, a private head, head steps then body steps.

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the client SGD
        (:func:`fedjax_sc.algorithms.optimizers.client_sgd`), one optimizer for both parts.
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).
      head_steps: tau_h, the real local steps per round that train the head (>= 0).

    Returns:
      The :class:`Algorithm`: private ``classifier/output/*`` (and ``user/vector``),
      ``global_predict`` None.

    Raises:
      ValueError: a negative ``head_steps``, or as :func:`fedjax_sc.algorithms.fedavg.fedavg`.
    """
    base = fedavg(model, learning_rate, momentum, embedding_learning_rate)
    return base._replace(name="fedrep", leaf_rules=RULES, global_predict=None,
                         client_optimizer=head_then_body(base.client_optimizer, HEAD,
                                                         head_steps))
