"""What an algorithm is: the pieces that plug into the one compiled federated round.

An :class:`Algorithm` is a value, not a class hierarchy: a model, a client loss, a client
optimizer and an aggregator. :func:`fedjax_sc.run.round.make_round_step` turns it into one
``jax.jit``-compiled function that runs every client's local epochs under ``vmap`` and the
aggregation in the same program. Researchers build their own by replacing any field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import optax

Params = Any
"""A params pytree (nested dict of arrays)."""


class Batch(NamedTuple):
    """One client's mini-batch.

    Attributes:
      tokens: int32 ``[batch, len]`` token ids (``PAD`` = 0 right padding).
      labels: int32 ``[batch]`` class ids in ``[0, C)``.
      mask: bool ``[batch]``; False on padding rows (a client's last, short batch, or a padded
        step of a client with fewer batches than the largest client). Losses must ignore them.
    """

    tokens: jax.Array
    labels: jax.Array
    mask: jax.Array


ClientLoss = Callable[[Params, Batch, jax.Array], tuple[jax.Array, dict[str, jax.Array]]]
"""``loss(params, batch, rng) -> (scalar loss, aux metrics)``; differentiated w.r.t. params."""

Aggregator = Callable[[Params, jax.Array], Params]
"""``aggregate(stacked_params, weights) -> params``: stacked ``[num_clients, ...]`` leaves and
float32 ``[num_clients]`` weights summing to 1 (paper Sec. 3.3: N^k / N)."""


class Algorithm(NamedTuple):
    """A federated algorithm as plug-in pieces of the compiled round.

    Attributes:
      name: identifier used in configs, metrics and the CLI (``fedavg``, ...).
      model: the Flax module; its ``apply`` gives logits ``[batch, C]``.
      client_loss: the local objective (see :data:`ClientLoss`).
      client_optimizer: an optax transformation; its state is created fresh at the start of
        every round for every client (paper Sec. 5.2).
      aggregator: how the server reduces the clients' uploads (see :data:`Aggregator`).
      leaf_rules: ``None`` (every leaf shared, as FedAvg) or ``{"private": regexes,
        "shared": regexes}`` over parameter paths (:func:`fedjax_sc.algorithms.masking.
        label_leaves`; every leaf must match exactly one rule). Private leaves stay on their
        client across rounds and are never uploaded.
    """

    name: str
    model: nn.Module
    client_loss: ClientLoss
    client_optimizer: optax.GradientTransformation
    aggregator: Aggregator
    leaf_rules: Mapping[str, str | Sequence[str]] | None = None
