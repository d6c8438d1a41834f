"""Several plug-ins that own state, on one algorithm: optax's ``named_chain`` for
:class:`~fedjax_sc.algorithms.base.Hooks`.

A stateful plug-in (SCAFFOLD's :func:`~fedjax_sc.algorithms.scaffold.control_variates`,
FedDyn's :func:`~fedjax_sc.algorithms.feddyn.dynamic_regularizer`, MOON's
:func:`~fedjax_sc.algorithms.moon.model_contrastive`, one's own) reads *its* state as
``start.state`` / ``start.server`` and refuses an algorithm that has hooks already: two
plug-ins would read one state. :func:`named_chain` runs several side by side. The state is
a dict of the parts' states by name (``{"moon": (previous, flag), "scaffold": c_i}``),
and each part sees only its own:

* the client loss: each plug-in wraps the loss below it, as it would alone; the chain hands
  it a :class:`~fedjax_sc.algorithms.base.ClientStart` whose ``state`` and ``server`` are its
  own part, and hands the loss below the whole start again (over a stateful part the
  plug-in is applied afresh, at trace time, to a base whose loss closes over the call's
  whole start: pure functions, no state on the side);
* ``client_init`` / ``server_init``: every part's, by name;
* ``client_end``: every part's on its own state, the messages by name (a part without one
  keeps its state and sends ``()``);
* ``server_update``: the parts in order, each on the params the one before returned (as
  ``optax.chain`` applies its transforms), with its own state and messages;
* ``server_state_sent``: the parts that send theirs (the rest stays on the server);
  ``server_metrics``: every part's, named ``<part>_<name>``; ``upload_sent``: whether any
  part reads the model upload; ``optimizer_init``: the parts' in order, each on the
  optimizer state the one before made.

A plug-in without hooks (FedProx's ``proximal``) adds no part: it wraps the loss as usual.
The Ap phase's loss (``Algorithm.personal_loss``) is chained the same way where a plug-in
sets one; one that sets none keeps the loss below's, as it would alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedjax_sc.algorithms.base import Algorithm, ClientEnd, ClientStart, Hooks, ServerInputs

Plugin = Callable[[Algorithm], Algorithm]
"""``plugin(algorithm) -> algorithm``: wraps ``algorithm``'s client loss and sets its own
:class:`Hooks` (``lambda a: control_variates(a, lr, momentum, n)``)."""


def _view(start: ClientStart, name: str) -> ClientStart:
    """``start`` as part ``name`` sees it: its own client and server state."""
    return start._replace(state=start.state[name], server=start.server[name])


def _restore(whole: ClientStart, seen: ClientStart) -> ClientStart:
    """What a part passed on to the loss below it (``seen``: its own view, params maybe
    changed), with the whole chain's states again (``whole``)."""
    return seen._replace(state=whole.state, server=whole.server)


def _viewing(loss, name: str):
    """``loss`` (of a plug-in over losses that read no state) on part ``name``'s view."""
    return lambda params, batch, rng, start: loss(params, batch, rng, _view(start, name))


def _stacked(algorithm: Algorithm, plugin: Plugin, name: str, below, personal: bool):
    """The client loss (``personal``: the Ap phase's) of ``plugin`` over ``below`` (a loss
    of the whole chain's start), reading part ``name``'s state."""
    def loss(params, batch, rng, start):
        base = algorithm._replace(
            client_loss=lambda p, b, r, seen: below(p, b, r, _restore(start, seen)),
            personal_loss=None, hooks=Hooks())
        built = plugin(base)
        chosen = (built.personal_loss or built.client_loss) if personal else built.client_loss
        return chosen(params, batch, rng, _view(start, name))
    return loss


def _chained_hooks(parts: list[tuple[str, Hooks]]) -> Hooks:
    """One :class:`Hooks` running every part's on its own entry of dict states."""
    def client_init(params):
        return {n: h.client_init(params) for n, h in parts}

    def server_init(params):
        return {n: h.server_init(params) for n, h in parts}

    def client_end(end: ClientEnd):
        states, messages = {}, {}
        for n, h in parts:
            if h.client_end is None:
                states[n], messages[n] = end.start.state[n], ()
            else:
                states[n], messages[n] = h.client_end(end._replace(start=_view(end.start, n)))
        return states, messages

    def server_update(s: ServerInputs):
        params, states = s.params, {}
        for n, h in parts:
            if h.server_update is None:
                states[n] = s.state[n]
            else:
                # no part's client_end: the engine hands the server no messages at all
                messages = s.messages[n] if isinstance(s.messages, dict) else ()
                params, states[n] = h.server_update(s._replace(
                    params=params, state=s.state[n], messages=messages))
        return params, states

    sending = [(n, h.server_state_sent) for n, h in parts if h.server_state_sent]

    def server_state_sent(state):
        return {n: sent(state[n]) if callable(sent) else state[n] for n, sent in sending}

    measured = [(n, h.server_metrics) for n, h in parts if h.server_metrics is not None]

    def server_metrics(state):
        figures = {}
        for n, f in measured:
            for k, v in f(state[n]).items():
                if f"{n}_{k}" in figures:
                    raise ValueError(f"named_chain: two server metrics named {n}_{k!s}")
                figures[f"{n}_{k}"] = v
        return figures

    initializing = [(n, h.optimizer_init) for n, h in parts if h.optimizer_init is not None]

    def optimizer_init(start: ClientStart, fresh):
        for n, f in initializing:
            fresh = f(_view(start, n), fresh)
        return fresh

    return Hooks(
        optimizer_init=optimizer_init if initializing else None,
        client_init=client_init, server_init=server_init,
        client_end=client_end if any(h.client_end for _, h in parts) else None,
        server_update=server_update if any(h.server_update for _, h in parts) else None,
        server_state_sent=server_state_sent if sending else False,
        server_metrics=server_metrics if measured else None,
        upload_sent=any(h.upload_sent for _, h in parts))


def named_chain(algorithm: Algorithm, *plugins: tuple[str, Plugin], name: str | None = None,
                base_name: str | None = None) -> Algorithm:
    """``algorithm`` with every plug-in of ``plugins`` applied in order, each owning its
    state under its name (see the module's docstring).

    Args:
      algorithm: the base; where it has hooks (MOON, FedDyn, one's own), its state is the
        part named ``base_name`` (default ``algorithm.name``: ``moon(...)``'s is ``moon``,
        ``model_contrastive(fedavg(...))``'s ``fedavg``).
      plugins: ``(name, plugin)`` pairs; ``plugin`` maps an algorithm without hooks to one
        with a wrapped loss and (optionally) hooks of its own, e.g.
        ``("scaffold", lambda a: control_variates(a, lr, momentum, num_clients))``.
      name: the result's name (default: the base's and the plug-ins' names joined by ``+``).
      base_name: see ``algorithm``.

    Returns:
      The :class:`Algorithm`: the last plug-in's fields (model, upload, aggregator, ...), the
      chained client loss and the chained :class:`Hooks`; its client and server states are
      dicts ``{part: state}`` over the parts with hooks (a part without a client or server
      state has ``()`` there; a chain without one has ``Hooks()``). A chain whose only part
      is a plug-in's runs exactly as that plug-in alone, its state one level down, and so
      does its Ap phase: a plug-in that sets no ``personal_loss`` keeps the one below.

    Unlike optax's ``named_chain`` it starts from an algorithm, not a transform, and a
    plug-in without hooks keeps no entry. Cost: the first stateful plug-in over a base
    without hooks is applied once (MOON keeps its one forward pass for the cross-entropy
    and its term); one over a stateful part is applied afresh at trace time over a loss
    that is a plain function, so a plug-in that would share the base's forward pass
    (MOON's ``CrossEntropy.with_feature_term``, FedMMD's) runs its own.

    Raises:
      ValueError: two parts of one name, a name that is not a non-empty string, or nothing
        to chain.
    """
    if not plugins:
        raise ValueError("named_chain needs at least one (name, plugin) pair")
    parts: list[tuple[str, Hooks]] = []
    loss, personal = algorithm.client_loss, algorithm.personal_loss
    if algorithm.hooks != Hooks():  # the base's loss reads its own part
        own = base_name or algorithm.name
        parts.append((own, algorithm.hooks))
        loss = _viewing(loss, own)
        personal = None if personal is None else _viewing(personal, own)
    current = algorithm._replace(hooks=Hooks())
    for part, plugin in plugins:
        if not isinstance(part, str) or not part:
            raise ValueError(f"named_chain: a part's name must be a non-empty string, got "
                             f"{part!r}")
        if part in {n for n, _ in parts}:
            raise ValueError(f"named_chain: two parts named {part!r}")
        built = plugin(current._replace(client_loss=loss, personal_loss=personal))
        own_personal = built.personal_loss is not personal  # else the one below is kept
        if built.hooks == Hooks():  # stateless: it wraps the loss as usual, no part
            loss, personal = built.client_loss, built.personal_loss
        elif not parts:  # the losses below read no state: built once, on its own view
            loss = _viewing(built.client_loss, part)
            if own_personal:
                personal = (None if built.personal_loss is None
                            else _viewing(built.personal_loss, part))
            parts.append((part, built.hooks))
        else:
            below, below_personal = loss, personal
            loss = _stacked(current, plugin, part, below, personal=False)
            if own_personal:
                personal = None if built.personal_loss is None else _stacked(
                    current, plugin, part, below_personal or below, personal=True)
            parts.append((part, built.hooks))
        current = built._replace(hooks=Hooks())
    names = [algorithm.name, *(n for n, _ in plugins)]
    hooks = _chained_hooks(parts) if parts else Hooks()
    return current._replace(name=name or "+".join(names), client_loss=loss,
                            personal_loss=personal, hooks=hooks)


def part_state(state: Any, part: str) -> Any:
    """Part ``part``'s entry of a chained state (client states stacked ``[N, ...]`` or the
    server's), e.g. SCAFFOLD's c of ``server.algorithm``.

    Raises:
      KeyError: no part of that name (the message lists the parts).
    """
    if not isinstance(state, dict) or part not in state:
        held = sorted(state) if isinstance(state, dict) else []
        raise KeyError(f"no part {part!r} in the chained state; parts: {held}")
    return state[part]
