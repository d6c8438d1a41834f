"""Local copies: modules a client makes itself, when it downloads a model, as frozen copies of
other modules of that model (FedFusion's reference extractor; Yao et al. 2019, "Towards
Faster and Better Federated Learning: A Feature Fusion Approach", Sec. 3).

An algorithm declares them as ``Algorithm.local_copies = {copy: source}`` over top-level
module names of its params. The round then treats them as follows
(:mod:`fedjax_sc.core.round`, :mod:`fedjax_sc.core.client`, :mod:`fedjax_sc.core.personalize`):

* a client that starts training (a round, or the Ap phase's fine-tuning) sets each copy to its
  source as it holds it then (:func:`make_copies`); so does the server at round 0;
* local training never moves a copy (:func:`freeze`: zero updates, whatever the gradient --
  DP-SGD's noise, a weight decay -- and no optimizer state);
* a copy is never sent: the server knows it already, it is what every client downloaded, so
  the upload, its compression and noise, the aggregation and the server optimizer see the
  params without copies (:func:`without_copies`), and the new global model's copies are the
  sources of the model the clients downloaded (the previous round's).

Copies and sources must fall on the same side of the algorithm's private/shared rules.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import optax

from fedjax_sc.algorithms.base import Params


def make_copies(params: Params, copies: Mapping[str, str]) -> Params:
    """``params`` with each copy module set to its source, for those present.

    Works on a part of the params (the shared or the private leaves alone) and on a client's
    local-vocabulary rows as on full tables (the copy takes the source's shapes).

    Raises:
      KeyError: a copy present without its source or a source without its copy.
    """
    if not copies:
        return params
    out = dict(params)
    for copy, source in copies.items():
        if (copy in params) != (source in params):
            raise KeyError(f"local copy {copy!r} and its source {source!r} must be on the same "
                           f"side (both shared or both private); params hold {sorted(params)}")
        if source in params:
            out[copy] = params[source]
    return out


def without_copies(params: Params, copies: Mapping[str, str]) -> Params:
    """``params`` without the copy modules: what is sent, aggregated and counted."""
    if not copies:
        return params
    return {k: v for k, v in params.items() if k not in copies}


def restore_copies(params: Params, reference: Params, copies: Mapping[str, str]) -> Params:
    """``params`` (without copies) completed with the copies made from ``reference``'s
    sources, for the copies ``reference`` holds: the server's new global model after
    aggregation, whose copies are the model its clients downloaded."""
    if not copies:
        return params
    made = make_copies(reference, copies)
    return {**params, **{c: made[c] for c in copies if c in made}}


def freeze(optimizer: optax.GradientTransformation,
           copies: Mapping[str, str]) -> optax.GradientTransformation:
    """``optimizer`` on every leaf but the copy modules', which get zero updates and no
    optimizer state (``optax.multi_transform`` with ``optax.set_to_zero``): a copy is never
    trained, so it needs no momentum buffer, and an optimizer that reads every gradient at
    once (a global-norm clip) does not see a copy's."""
    if not copies:
        return optimizer

    def labels(params):
        return {k: jax.tree.map(lambda _, k=k: "copy" if k in copies else "trained", v)
                for k, v in params.items()}

    return optax.multi_transform({"trained": optimizer, "copy": optax.set_to_zero()}, labels)
