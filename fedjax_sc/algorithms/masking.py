"""Which parameter leaves are private and which are shared: regex rules over parameter paths.

A personalised algorithm (FedPer, LG-FedAvg, KTEPS; Li et al. 2021, Sec. 3.4, Fig. 2-3) keeps
some leaves on the client and aggregates the rest. Leaves are named by their path
(``"classifier/hidden/kernel"``) and assigned a label by regex rules, as big_vision assigns
optimizer masks: every leaf must match exactly one rule, otherwise a ``ValueError`` lists the
unmatched (or doubly matched) paths, so a renamed layer can never silently change sides.

The label pytree is directly usable as the ``param_labels`` of ``optax.multi_transform`` (for
example a smaller learning rate for the embedding, paper Sec. 5.2 IYY setting).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from flax import traverse_util

from fedjax_sc.algorithms.upload import Params

PRIVATE = "private"
"""The label of the leaves a client keeps to itself."""
SHARED = "shared"
"""The label of the leaves the clients upload and the server aggregates."""


def leaf_paths(params: Params) -> list[str]:
    """Paths of all leaves of a nested-dict pytree, joined by ``/``, in flatten order."""
    return ["/".join(p) for p in traverse_util.flatten_dict(params)]


def label_leaves(params: Params, rules: Mapping[str, str | Sequence[str]]) -> Params:
    """Labels every leaf by the one rule whose regex matches its path.

    Args:
      params: nested-dict params pytree.
      rules: ``{label: regex or [regexes]}``; ``re.search`` semantics on the ``/``-joined path.

    Returns:
      A pytree of the same structure as ``params`` whose leaves are label strings.

    Raises:
      ValueError: a leaf matched by no rule or by more than one (the message lists them), or
        a regex that matches no leaf at all (a typo that would otherwise go unnoticed).
    """
    compiled = [(label, pattern, re.compile(pattern))
                for label, patterns in rules.items()
                for pattern in ([patterns] if isinstance(patterns, str) else patterns)]
    flat = traverse_util.flatten_dict(params)
    labels, unmatched, ambiguous, used = {}, [], [], set()
    for path in flat:
        name = "/".join(path)
        hits = [(label, pattern) for label, pattern, rx in compiled if rx.search(name)]
        used.update(pattern for _, pattern in hits)
        if not hits:
            unmatched.append(name)
        elif len(hits) > 1:
            ambiguous.append(f"{name} <- {[p for _, p in hits]}")
        else:
            labels[path] = hits[0][0]
    problems = []
    if unmatched:
        problems.append(f"leaves matched by no rule: {unmatched}")
    if ambiguous:
        problems.append(f"leaves matched by several rules: {ambiguous}")
    unused = [pattern for _, pattern, _ in compiled if pattern not in used]
    if unused:
        problems.append(f"rules matching no leaf: {unused}")
    if problems:
        raise ValueError("; ".join(problems) + f" (all leaves: {list(map('/'.join, flat))})")
    return traverse_util.unflatten_dict(labels)


def matching(params: Params, pattern: str) -> Params:
    """A bool pytree shaped as ``params``: True on the leaves whose ``/``-joined path
    ``pattern`` matches (``re.search``), e.g. a head's leaves for an optimizer's freeze.

    Raises:
      ValueError: ``pattern`` matches no leaf (the message lists the paths).
    """
    flat = traverse_util.flatten_dict(params)
    mask = {p: re.search(pattern, "/".join(p)) is not None for p in flat}
    if not any(mask.values()):
        raise ValueError(f"rule {pattern!r} matches no leaf of {list(map('/'.join, flat))}")
    return traverse_util.unflatten_dict(mask)


def select(params: Params, labels: Params, label: str) -> Params:
    """The sub-pytree of the leaves labelled ``label`` (nested dict; other leaves absent)."""
    flat = traverse_util.flatten_dict(params)
    flat_labels = traverse_util.flatten_dict(labels)
    return traverse_util.unflatten_dict({p: v for p, v in flat.items()
                                         if flat_labels[p] == label})


def like(params: Params, part: Params) -> Params:
    """The leaves of ``params`` at the paths that ``part`` holds, as a tree shaped as ``part``
    (e.g. the shared leaves of a full model, given a tree of the shared leaves)."""
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict({p: flat[p] for p in traverse_util.flatten_dict(part)})


def overlay(params: Params, part: Params) -> Params:
    """``params`` with the leaves that ``part`` holds replaced by ``part``'s."""
    return traverse_util.unflatten_dict({**traverse_util.flatten_dict(params),
                                         **traverse_util.flatten_dict(part)})


def merge(*parts: Params) -> Params:
    """Union of disjoint nested-dict pytrees (e.g. the shared and the private part).

    Raises:
      ValueError: if two parts hold the same leaf.
    """
    out: dict = {}
    for part in parts:
        for path, value in traverse_util.flatten_dict(part).items():
            if path in out:
                raise ValueError(f"leaf {'/'.join(path)} is in more than one part")
            out[path] = value
    return traverse_util.unflatten_dict(out)


def split_private(algorithm, params: Params) -> tuple[Params, Params]:
    """``(shared, private)`` parts of ``params`` by ``algorithm.leaf_rules`` (None: all shared).

    Raises:
      ValueError: the rules do not cover the params exactly once.
    """
    if algorithm.leaf_rules is None:
        return params, {}
    labels = label_leaves(params, algorithm.leaf_rules)
    return (select(params, labels, SHARED),
            select(params, labels, PRIVATE))
