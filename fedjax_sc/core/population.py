"""Populations: P whole federated runs -- seeds and hyperparameter grids -- as one program.

A population stacks P members' states on a leading *member axis* ``[P, ...]`` and trains them
with one compiled round: :func:`build_population_round` is the federated round (or an
algorithm's centralised trainer) under ``jax.vmap`` over the members, the clients' data shared
(``in_axes=None``: one copy in memory). Each member has its own PRNG key (so its own
initialisation, batch order, client noise) and its own values of the hyperparameters that do
not change the program's shapes -- client and server learning rates, momentum, loss weights
(lambda_kt, lambda_div, FedProx's mu, FedMMD's lambda), upload noise sigma, DP-SGD's noise
multiplier -- given as arrays of shape ``[P]`` and passed to the algorithm's builder as traced
scalars (:mod:`fedjax_sc.algorithms.hparams`). Settings that change shapes or the program
(model sizes, batch size, local epochs, L, the algorithm, a PCA band) are the same for every
member.

Member i trains exactly as the standalone run with member i's key and values (property tests
compare the parameters after two rounds); on an accelerator the members fill the device that
one small run leaves idle. This is the technique of vmapped whole training runs (PureJaxRL),
with ``optax``'s hyperparameters as traced values, applied to federated rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.base import Algorithm, Params
from fedjax_sc.core import central
from fedjax_sc.core.participation import broadcast_clients
from fedjax_sc.core.round import ClientStates, ServerState, build_round, init_states
from fedjax_sc.data.client_data import ClientData

MEMBER_AXES = ("auto", "vmap", "map")
"""How a population's program runs its members (:func:`build_population_round`)."""

HParams = Mapping[str, jax.Array]
"""Per-member hyperparameters: name -> float32 ``[P]``."""

Builder = Callable[[Mapping[str, Any]], Algorithm]
"""``build(hparams) -> Algorithm``: the algorithm of one member from its scalar values (traced
inside a population, Python floats in a standalone run: the same builder serves both)."""


def grid(**values: Sequence[float]) -> dict[str, np.ndarray]:
    """The product of the values as per-member arrays, the first name varying slowest:
    ``grid(lr=[0.01, 0.1], mu=[0, 1])`` -> 4 members ``{"lr": [.01, .01, .1, .1], "mu": [0,
    1, 0, 1]}`` (float32 ``[P]`` each).

    Raises:
      ValueError: a name with no value.
    """
    empty = [k for k, v in values.items() if len(v) == 0]
    if empty:
        raise ValueError(f"grid: no value for {', '.join(empty)}")
    axes = np.meshgrid(*[np.asarray(v, np.float32) for v in values.values()], indexing="ij")
    return {k: a.reshape(-1) for k, a in zip(values, axes)}


def population_size(hparams: HParams, keys: jax.Array) -> int:
    """P, checked to be the same for every hyperparameter and the keys.

    Raises:
      ValueError: a hyperparameter that is not a vector, or sizes that differ (names them).
    """
    sizes = {"keys": int(keys.shape[0])}
    for name, value in hparams.items():
        if np.ndim(value) != 1:
            raise ValueError(f"hyperparameter {name!r} must have shape [P], got "
                             f"{np.shape(value)}")
        sizes[name] = int(np.shape(value)[0])
    if len(set(sizes.values())) != 1:
        raise ValueError("population members disagree in number: "
                         + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    return sizes["keys"]


def member(tree: Any, i: int) -> Any:
    """Member i of a stacked pytree (its leading axis removed)."""
    return jax.tree.map(lambda x: x[i], tree)


def init_population(build: Builder, init_params: Callable[[jax.Array], Params],
                    hparams: HParams, keys: jax.Array, num_clients: int
                    ) -> tuple[ServerState, ClientStates]:
    """Round-0 states of every member, stacked ``[P, ...]``.

    Args:
      build: the members' algorithm builder (:data:`Builder`).
      init_params: ``init_params(key) -> params`` of one member (e.g. ``lambda k:
        init_params(model, k, glove_matrix)``).
      hparams: per-member values, ``[P]`` each.
      keys: the members' initialisation keys, ``[P]``.
      num_clients: K.

    Raises:
      ValueError: members that disagree in number (:func:`population_size`).
    """
    population_size(hparams, keys)
    return init_from_params(build, jax.vmap(init_params)(keys), hparams, num_clients)


def init_from_params(build: Builder, params: Params, hparams: HParams, num_clients: int, *,
                     host: bool = False) -> tuple[ServerState, ClientStates]:
    """Round-0 states of every member from their initial parameters ``params`` (stacked
    ``[P, ...]``, e.g. each member's GloVe-initialised model), stacked ``[P, ...]``; the
    client states ``[P, N, ...]`` are read-only NumPy views with ``host=True`` (see
    :func:`~fedjax_sc.core.round.init_states`)."""

    def one(p, values):
        return init_states(build(values), p, 1)

    state, clients = jax.vmap(one)(params, dict(hparams))
    first = jax.tree.map(lambda x: x[:, 0], clients)
    return state, broadcast_clients(first, num_clients, axis=1, host=host)


def build_population_round(build: Builder, *, batch_size: int, local_epochs: int,
                           trainer: Callable[..., Callable] | None = None,
                           per_member_data: bool = False,
                           member_axis: str = "auto", member_shards: int = 1) -> Callable:
    """The un-jitted population round.

    Args:
      build: the members' algorithm builder; its Python-level structure (algorithm, model,
        leaf rules, upload chain) must not depend on the values.
      batch_size: B, shared by the members.
      local_epochs: E, shared by the members.
      trainer: the round builder (default: the algorithm's centralised trainer when it has
        one, else :func:`fedjax_sc.core.round.build_round`).
      per_member_data: ``clients`` is stacked ``[P, ...]`` too (each member sampled its own
        clients); default: one copy for all members.
      member_axis: how the program runs the members: ``vmap`` (batched: every operation over
        all members at once, what fills an accelerator), ``map`` (``jax.lax.map``: one member
        after another inside the one program, each with the shapes of a standalone run, so
        a member is its standalone run exactly and a population never costs more than its
        members in turn), or ``auto`` (default: ``map`` on the CPU, ``vmap`` elsewhere, the
        faster of the two on each: see ``benchmarks/population_speed.py``).
      member_shards: the size of the member axis of a ``members x clients`` device mesh
        (:func:`fedjax_sc.core.sharding.population_mesh`), dividing P. Above 1, ``map`` runs
        the members as ``member_shards`` groups ``vmap``-ped over, each group one member
        after another (``jax.lax.map``), so that XLA gives each row of the mesh its own
        members instead of every member to every device; ``vmap`` is unchanged.

    Returns:
      ``round_step(states, client_states, clients, keys, hparams) -> (states, client_states,
      metrics)``: ``states`` / ``client_states`` / ``metrics`` stacked ``[P, ...]``, ``keys``
      the members' run keys ``[P]`` (as ``rng`` of the one-run round), ``hparams`` ``[P]``
      arrays, ``clients`` one :class:`~fedjax_sc.data.client_data.ClientData` for all. A
      population of one (P = 1, known when the round is traced) runs the one-run round
      without ``vmap``, so a single run's numbers are those of the one-run round exactly.

    Raises:
      ValueError: an unknown ``member_axis``; at call time, hyperparameters or keys that
        disagree on P (:func:`population_size`); the one-run round's errors.
    """

    def one(state, client_states, clients, key, values):
        algorithm = build(values)
        make = trainer or (central.builder(algorithm.central)
                           if algorithm.central is not None else build_round)
        return make(algorithm, batch_size=batch_size, local_epochs=local_epochs)(
            state, client_states, clients, key)

    check_member_axis(member_axis)

    def round_step(states: ServerState, client_states: ClientStates, clients: ClientData,
                   keys: jax.Array, hparams: HParams):
        population_size(hparams, keys)
        if per_member_data:
            return over_members(one, (states, client_states, clients, keys, dict(hparams)),
                                member_axis, member_shards)
        return over_members(lambda s, c, k, v: one(s, c, clients, k, v),
                            (states, client_states, keys, dict(hparams)), member_axis,
                            member_shards)

    return round_step


def check_member_axis(member_axis: str) -> str:
    """``member_axis`` when it is one of :data:`MEMBER_AXES`.

    Raises:
      ValueError: another value (names it and the choices).
    """
    if member_axis not in MEMBER_AXES:
        raise ValueError(f"member_axis {member_axis!r}: choose from {MEMBER_AXES}")
    return member_axis


def over_members(fn: Callable[..., Any], xs: tuple[Any, ...], member_axis: str = "auto",
                 member_shards: int = 1) -> Any:
    """``fn`` applied to every member inside one traced program: ``xs`` are pytrees stacked
    ``[P, ...]``, ``fn(*member_i_of_xs)`` one member's computation; returns its outputs
    stacked ``[P, ...]``.

    ``member_axis`` and ``member_shards`` as in :func:`build_population_round`. A population
    of one (P = 1, known when traced) calls ``fn`` once without ``vmap`` or ``lax.map``, so
    a single run's numbers are those of ``fn`` alone exactly.

    Raises:
      ValueError: an unknown ``member_axis``.
    """
    check_member_axis(member_axis)
    if int(jax.tree.leaves(xs)[0].shape[0]) == 1:
        return jax.tree.map(lambda x: x[None], fn(*member(xs, 0)))
    axis = member_axis
    if axis == "auto":
        axis = "map" if jax.default_backend() == "cpu" else "vmap"
    if axis == "vmap":
        return jax.vmap(fn)(*xs)
    each = lambda x: fn(*x)  # noqa: E731
    if member_shards == 1:
        return jax.lax.map(each, xs)
    groups = jax.tree.map(lambda x: x.reshape(member_shards, -1, *x.shape[1:]), xs)
    out = jax.vmap(lambda g: jax.lax.map(each, g))(groups)
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)


def as_values(hparams: HParams, i: int) -> dict[str, float]:
    """Member i's values as Python floats (to build its standalone run)."""
    return {k: float(np.asarray(v)[i]) for k, v in hparams.items()}


def stack(trees: Sequence[Any]) -> Any:
    """Stacks same-structured pytrees on a new leading member axis (NumPy where every
    member's leaf is NumPy: host states stay on the host; one member's NumPy leaves become
    ``[1, ...]`` views of its own, not copies)."""
    def put(*xs):
        if all(isinstance(x, np.ndarray) for x in xs):
            return xs[0][None] if len(xs) == 1 else np.stack(xs)
        return jnp.stack(xs)

    return jax.tree.map(put, *trees)
