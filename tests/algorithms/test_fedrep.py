"""FedRep: the head steps come first and leave the body, the body steps leave the head, the
head never leaves its client, and with no head step the body trains as FedAvg's with a frozen
private head."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import fedrep, masking
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

LR = 0.1


def frozen(loss, head):
    """``loss`` with the ``head`` leaves behind ``stop_gradient`` (an independent freeze)."""
    def wrapped(params, batch, rng, start):
        mask = masking.matching(params, head)
        params = jax.tree.map(lambda p, h: jax.lax.stop_gradient(p) if h else p, params, mask)
        return loss(params, batch, rng, start)
    return wrapped


def initial(algorithm, model, num_clients):
    """The round-0 states from the seed-0 params of the ``rounds`` fixture."""
    return rnd.init_states(algorithm, init_params(model, jax.random.key(0)), num_clients)


@settings(deadline=None, max_examples=15)
@given(st.integers(0, 6), st.integers(1, 6), st.sampled_from([0.0, 0.5, 0.9]),
       st.integers(0, 2**31 - 1))
def test_the_head_trains_for_head_steps_then_the_body(head_steps, steps, momentum, seed):
    """Step by step: SGD on the head alone for the first head_steps steps, then SGD with a
    fresh momentum on the body alone; a traced head_steps gives the same."""
    rng = np.random.default_rng(seed)
    params = {"classifier": {"output": {"kernel": rng.normal(size=(2, 3)).astype(np.float32)}},
              "encoder": {"w": rng.normal(size=(3,)).astype(np.float32)}}
    grads = [jax.tree.map(lambda x: rng.normal(size=x.shape).astype(np.float32), params)
             for _ in range(steps)]
    sgd = optax.sgd(LR, momentum=momentum or None)

    def run(opt, part, gs):
        state = opt.init(part)
        for g in gs:
            updates, state = opt.update(g, state, part)
            part = optax.apply_updates(part, updates)
        return part

    def ours(h):
        opt = fedrep.head_then_body(sgd, fedrep.HEAD, h)
        return run(opt, params, grads)

    split = min(head_steps, steps)
    head = run(sgd, params["classifier"], [g["classifier"] for g in grads[:split]])
    body = run(sgd, params["encoder"], [g["encoder"] for g in grads[split:]])
    got = ours(head_steps)
    chex.assert_trees_all_close(got, {"classifier": head, "encoder": body}, atol=1e-6)
    chex.assert_trees_all_close(jax.jit(ours)(jnp.float32(head_steps)), got, atol=1e-6)


def test_the_head_stays_on_its_client_and_the_phases_move_their_part(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    init, init_private = initial(fedrep.fedrep(model, LR), model, n)
    assert all(p.startswith(("embedding/", "encoder/", "classifier/hidden/"))
               for p in masking.leaf_paths(init.params))  # the head is never uploaded
    assert masking.leaf_paths(init_private.private) == ["classifier/output/bias",
                                                        "classifier/output/kernel"]
    # every step a head step: the body comes back as it went, each head moved
    state, clients, _ = rounds(fedrep.fedrep(model, LR, head_steps=1000), model, data, 2, n)
    chex.assert_trees_all_close(state.params, init.params, atol=1e-6)
    kernel = clients.private["classifier"]["output"]["kernel"]
    start = init_private.private["classifier"]["output"]["kernel"]
    assert all(float(jnp.max(jnp.abs(kernel[k] - start[k]))) > 1e-4 for k in range(n))


def test_no_head_step_is_fedavg_of_the_body_with_a_frozen_private_head(model, scene, rounds):
    data = client_data(scene.train, local_vocab=True)
    n = scene.num_clients
    ours = rounds(fedrep.fedrep(model, LR, 0.9, head_steps=0), model, data, 2, n)
    plain = fedavg(model, LR, 0.9)
    reference = plain._replace(leaf_rules=fedrep.RULES,
                               client_loss=frozen(plain.client_loss, fedrep.HEAD))
    theirs = rounds(reference, model, data, 2, n)
    chex.assert_trees_all_close(ours[0].params, theirs[0].params, atol=1e-6)
    start = initial(reference, model, n)[1].private
    chex.assert_trees_all_equal(ours[1].private, start)


def test_bad_settings_are_refused(model):
    with pytest.raises(ValueError, match="head_steps"):
        fedrep.fedrep(model, head_steps=-1)
    with pytest.raises(ValueError, match="matches no leaf"):
        masking.matching({"encoder": {"w": jnp.zeros(2)}}, fedrep.HEAD)
