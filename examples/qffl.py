"""q-FFL's q-FedAvg (Li, Sanjabi, Beirami and Smith 2020, "Fair Resource Allocation in Federated
Learning", Algorithm 2), written outside the package on ``import fedjax_sc as fsc``: its own
settings come from the command line, and the server builds the new model from the clients'
messages alone:

    fedjax-sc train --algorithm examples/qffl.py:qffl --algorithm-option q=1 \\
        --momentum 0 --lr 0.1 --scene synthetic
    fedjax-sc train --algorithm examples/qffl.py:qffl --grid q=0,1,5 ...   # one program

Client k trains from w^t to wbar_k (the run's client SGD on FedAvg's loss), then sends

    Delta_k = F_k^q L (w^t - wbar_k),   h_k = q F_k^(q-1) ||L (w^t - wbar_k)||^2 + L F_k^q,

F_k its cross-entropy at w^t over its whole training split (``ClientStart.data``), L the
Lipschitz estimate 1 / lr (the authors'); the server sets
w^{t+1} = w^t - sum_k p_k Delta_k / sum_k p_k h_k. q = 0 is FedAvg's weighted mean; a larger q
weighs the clients with the larger losses more (fairer accuracy across clients).

Where ours differs: the sum over clients is weighted by p_k = N^k / N (the authors sample
clients with probability p_k and sum uniformly: the same in expectation). L = 1 / lr assumes
plain SGD, as the authors train (``--momentum 0``); under heavy-ball momentum the clients move
about 1 / (1 - momentum) times farther and q > 0 takes tiny steps (``lipschitz`` sets L).
The model upload itself never goes up (this server does not read it), but Delta_k is built
from the update as the client would send it (``fsc.sent_update``), so the upload noise and
compression flags act on Delta_k's update; F_k and h_k, two scalars, go up exact.
"""

import jax
import jax.numpy as jnp

import fedjax_sc as fsc


def _squared_norm(tree):
    return sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in jax.tree.leaves(tree))


def q_fedavg(algorithm, q, lipschitz):
    """Any algorithm whose leaves are all shared (FedAvg), its server made q-FedAvg's.

    Args:
      algorithm: a stateless algorithm; its loss is F_k.
      q: >= 0, a float or a traced float32 scalar (``--grid q=...``).
      lipschitz: L > 0.
    """
    base_loss = algorithm.client_loss

    def client_end(end):
        start, trained = end.start, end.steps > 0
        loss, _ = base_loss(start.params, start.data, jax.random.key(0), start)
        f = jnp.where(trained, jnp.maximum(loss, 1e-10), 1.0)
        # L (w^t - wbar_k) from the update as sent: the upload flags' noise reaches Delta_k
        dw = jax.tree.map(lambda u: -lipschitz * u, fsc.sent_update(end, start.params))
        delta = jax.tree.map(lambda d: f ** q * d, dw)
        h = q * f ** (q - 1.0) * _squared_norm(dw) + lipschitz * f ** q
        return (), {"delta": delta, "h": h}

    def server_update(s):  # the aggregate s.params is not used: w^t - sum Delta / sum h
        step = 1.0 / jnp.maximum(jnp.sum(s.weights * s.messages["h"]), 1e-20)
        total = s.reduce(s.messages["delta"], s.weights)
        return jax.tree.map(lambda w, d: w - step * d, s.previous, total), s.state

    # only Delta_k and h_k go up: the communication figures leave the model upload out
    hooks = fsc.Hooks(client_end=client_end, server_update=server_update, upload_sent=False)
    return algorithm._replace(name="qffl", hooks=hooks)


def qffl(context: fsc.BuildContext) -> fsc.Algorithm:
    """``--algorithm examples/qffl.py:qffl``; ``--algorithm-option q=Q`` (default 1) and
    ``lipschitz=L`` (default 1 / lr)."""
    q = context.options.get("q", 1.0)
    lipschitz = context.options.get("lipschitz", 1.0 / context.learning_rate)
    fedavg = fsc.fedavg(context.text_classifier(), context.learning_rate, context.momentum)
    return q_fedavg(fedavg, q, lipschitz)
