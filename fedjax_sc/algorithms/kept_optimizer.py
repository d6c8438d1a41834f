"""The client optimizer's state kept across rounds: each client's local steps start from the
momentum (or Adam's moments and step count) its previous round ended with, instead of a fresh
``client_optimizer.init``, this library's default (the paper gives the client SGD's momentum,
Li et al. 2021, Sec. 5.2, not whether it outlives a round). A schedule within the round
(FedRep's head steps, then body steps) counts its steps in a
:class:`~fedjax_sc.algorithms.optimizers.RoundStep`, which starts afresh every round.

A client's state is its optimizer state, shaped as ``client_optimizer.init(params)`` (the
shared and private leaves it trains; word-embedding tables' leaves by rows under local
vocabularies, as the params): :attr:`~fedjax_sc.algorithms.base.Hooks.optimizer_init` hands
it to the local steps and ``client_end`` keeps what they end with. A client that sits a
round out, or runs no step, keeps it unchanged; nothing of it leaves the client, and the Ap
phase fine-tunes with a fresh optimizer. With ``optax.sgd`` without momentum the state is
empty and the run is the plain one.

Momentum kept on the client carries the direction of its previous round's local steps,
taken from another global model, into the next round: with heavy-ball rho = 0.9 the first
steps of a round move mostly along the old client direction. A rule that counts a round's
steps from a zero momentum reads that carried part as the round's own: FedNova's
normalisation (refused with it) and SCAFFOLD's option II (c_i then absorbs some of the
previous round's direction). Momentum across rounds without client state lives on the
server instead (FedAvgM, Hsu, Qi and Brown 2019: ``--server-opt momentum``), over the global
model's updates.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms import masking
from fedjax_sc.algorithms.base import Algorithm, ClientEnd, ClientStart, Hooks
from fedjax_sc.algorithms.compose import named_chain
from fedjax_sc.algorithms.optimizers import RoundStep
from fedjax_sc.models.text_classifier import init_params


def kept_optimizer_state(algorithm: Algorithm) -> Algorithm:
    """``algorithm`` whose clients keep their optimizer state from one round to the next.

    Args:
      algorithm: an algorithm without hooks (chain it with one that has them with
        :func:`fedjax_sc.algorithms.compose.named_chain`: ``("optimizer",
        kept_optimizer_state)``) and without local copies (FedFusion's frozen extractor).

    Returns:
      The :class:`Algorithm`; each client's state is its ``client_optimizer`` state.

    Raises:
      ValueError: an algorithm with hooks or local copies.
    """
    if algorithm.hooks != Hooks():
        raise ValueError(f"{algorithm.name} already owns state (hooks); keeping the client "
                         f"optimizer's adds its own (run both with "
                         f"fedjax_sc.algorithms.compose.named_chain)")
    if algorithm.local_copies:
        raise ValueError(f"{algorithm.name} makes local copies ({sorted(algorithm.local_copies)})"
                         f", whose frozen leaves the optimizer skips: its state is not kept")
    opt, model = algorithm.client_optimizer, algorithm.model

    def client_init(shared):  # the optimizer's state over every leaf a client trains
        shapes = jax.eval_shape(lambda: init_params(model, jax.random.key(0)))
        full = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return opt.init(masking.overlay(full, shared))  # private leaves at zero

    def optimizer_init(start: ClientStart, fresh):  # the same structure (checked)
        step = lambda x: isinstance(x, RoundStep)
        return jax.tree.map(lambda kept, new: new if step(kept) else kept, start.state,
                            fresh, is_leaf=step)

    def client_end(end: ClientEnd):
        return end.optimizer_state, ()

    return algorithm._replace(hooks=Hooks(client_init=client_init, optimizer_init=optimizer_init,
                                          client_end=client_end))


CLIENT_OPTIMIZER_STATES = ("fresh", "kept")
"""Where a client's local steps start the optimizer from each round: a fresh
``client_optimizer.init`` (the default) or the state its last round ended with."""


def client_optimizer_state(algorithm: Algorithm, state: str = "fresh") -> Algorithm:
    """``algorithm`` as ``--client-optimizer-state`` asks: unchanged for ``fresh``; for
    ``kept``, :func:`kept_optimizer_state`, chained as the part ``optimizer`` beside the
    state ``algorithm`` owns already (:func:`~fedjax_sc.algorithms.compose.named_chain`).

    Raises:
      ValueError: an unknown ``state``, or ``kept`` for an algorithm trained centrally (FS,
        ASP: no rounds of clients), one with local copies (FedFusion) or one whose hooks
        set the optimizer's start themselves (``Hooks.optimizer_init``).
    """
    if state not in CLIENT_OPTIMIZER_STATES:
        raise ValueError(f"--client-optimizer-state {state!r}: choose from "
                         f"{', '.join(CLIENT_OPTIMIZER_STATES)}")
    if state == "fresh":
        return algorithm
    if algorithm.central is not None:
        raise ValueError(f"--client-optimizer-state kept: {algorithm.name} is trained "
                         f"centrally, with no rounds of clients to keep it across")
    if algorithm.hooks.optimizer_init is not None:
        raise ValueError(f"--client-optimizer-state kept: {algorithm.name} sets where its "
                         f"client optimizer starts itself (Hooks.optimizer_init)")
    if algorithm.hooks == Hooks():
        return kept_optimizer_state(algorithm)
    return named_chain(algorithm, ("optimizer", kept_optimizer_state), name=algorithm.name)
