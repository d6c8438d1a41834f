"""FedBABU: federated training of the body only, the head fixed at its random initialisation
(Oh, Kim and Yun 2022, "FedBABU: Toward Enhanced Representation for Federated Image
Classification", Sec. 4; the authors' code, ``main_fed.py`` with
``--local_upt_part body --aggr_part body`` in jhoon-oh/FedBABU).

Every client downloads the body theta_ext and the head theta_cls, trains the body alone with
the head frozen, and the server averages the bodies; the head never changes, so it is the same
random initialisation on every client and in the global model::

    theta_ext_i <- theta_ext_i - alpha grad_ext CE(theta_ext_i, theta_cls^0)   local steps
    theta_ext^{t+1} = sum_i (N^i / N) theta_ext_i,     theta_cls^{t+1} = theta_cls^0

Personalisation then fine-tunes the whole model, head and body, on each client's data (the
authors: 5 epochs at batch 50, one step size for both, 0.01 times the training LR, momentum
0.9, from the round with the best test accuracy, scored after the last epoch). The Ap phase
here fine-tunes every leaf too, with the plain cross-entropy and ``client_sgd`` at mu * LR
(mu = 0.01), but as every method's: from the last round, n_Z * z = 250 steps at batch 8 (about
1.3 epochs of a 1,600-review client; ``--ap-steps 40`` gives about 5), Ap the mean over the
curve (Eq. 16). Ag is the global model with the initial head (the paper's "initial
accuracy").

The head is the model's last layer (``classifier/output``; the authors' ``linear``, their
models' last layer); the body is everything else. As in the authors' code the head is
uploaded with the body and the server keeps its own (their broadcast leaves it out), so the
new global head is the initial one exactly, also under FedOpt or an upload transform.

Where ours differs: the initial head is the model's own (Flax's LeCun-normal kernel, zero
bias; theirs PyTorch's uniform ``nn.Linear`` initialisation, not made orthogonal); the
authors' weight decay is 0, as here; their server mean is unweighted, here N^i / N (the
engine's aggregator, as every method here); the paper's constant LR (theirs is multiplied by
0.1 at half and at three quarters of the rounds).
"""

from __future__ import annotations

import flax.linen as nn
from flax import traverse_util

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Algorithm, Hooks, ServerInputs
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedrep import head_then_body
from fedjax_sc.algorithms.optimizers import LEARNING_RATE, MOMENTUM

HEAD = r"^classifier/output/"
"""The head's leaves: the classifier's output layer."""


def keep_head(inputs: ServerInputs):
    """The server update that keeps the head the round started from: ``(params with the
    :data:`HEAD` leaves of ``inputs.previous``, inputs.state)``.

    Args:
      inputs: the round's :class:`~fedjax_sc.algorithms.base.ServerInputs` (the aggregate
        in ``params``, the round's starting model in ``previous``).

    Raises:
      ValueError: the params hold no head leaf.
    """
    mask = traverse_util.flatten_dict(masking.matching(inputs.params, HEAD))
    new = traverse_util.flatten_dict(inputs.params)
    old = traverse_util.flatten_dict(inputs.previous)
    kept = {p: old[p] if is_head else new[p] for p, is_head in mask.items()}
    return traverse_util.unflatten_dict(kept), inputs.state


def fedbabu(model: nn.Module, learning_rate: float = LEARNING_RATE, momentum: float = MOMENTUM,
            embedding_learning_rate: float | None = None) -> Algorithm:
    """Builds FedBABU: FedAvg with the head frozen on the clients and kept by the server.

    Args:
      model: ``TextClassifier``.
      learning_rate: the step size of the client SGD of the body
        (:func:`fedjax_sc.algorithms.optimizers.client_sgd`).
      momentum: its momentum.
      embedding_learning_rate: its step size for the word embeddings (None: ``learning_rate``).

    Returns:
      The :class:`Algorithm`: every leaf shared (a FURL user vector private, trained), the
      head's updates zero, and a server update that restores the head.

    Raises:
      ValueError: as :func:`fedjax_sc.algorithms.fedavg.fedavg`; in the first round, a model
        without ``classifier/output``.
    """
    base = fedavg(model, learning_rate, momentum, embedding_learning_rate)
    return base._replace(name="fedbabu",
                         client_optimizer=head_then_body(base.client_optimizer, HEAD, 0),
                         hooks=Hooks(server_update=keep_head))
