"""Upload transforms compose; the client optimizer's embedding learning rate."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.algorithms.base import UploadTransform, chain, identity_upload
from fedjax_sc.algorithms.optimizers import client_sgd


def _scale(factor):
    """Multiplies by ``factor`` on the client and divides on the server; records keys."""
    def init(params):
        return jnp.asarray(factor, jnp.float32)
    def encode(params, state, rng, context=None):
        return jax.tree.map(lambda x: x * state, params), {}
    def decode(message, state, context=None):
        return jax.tree.map(lambda x: x / state, message)
    return UploadTransform(init, encode, decode)


def _shift(amount):
    return UploadTransform(lambda p: (),
                           lambda p, s, r, c=None: (jax.tree.map(lambda x: x + amount, p), {}),
                           lambda m, s, c=None: jax.tree.map(lambda x: x - amount, m))


def test_chain_encodes_in_order_and_decodes_in_reverse():
    params = {"a": jnp.arange(3.0), "b": {"c": jnp.ones((2, 2))}}
    t = chain(_scale(2.0), _shift(1.0), identity_upload())
    state = t.init(params)
    message, diagnostics = t.encode(params, state, jax.random.key(0))
    assert diagnostics == {}
    chex.assert_trees_all_close(message["a"], jnp.arange(3.0) * 2 + 1)
    chex.assert_trees_all_close(t.decode(message, state), params)
    chex.assert_trees_all_equal(identity_upload().encode(params, (), jax.random.key(1))[0],
                                params)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_embedding_learning_rate_applies_to_embedding_tables_only(momentum):
    params = {"embedding": {"embedding": jnp.ones((4, 2))},
              "private_embedding": {"embedding": jnp.ones((4, 2))},
              "encoder": {"w": jnp.ones((2,))}}
    grads = jax.tree.map(jnp.ones_like, params)
    opt = client_sgd(0.1, momentum, embedding_learning_rate=0.01)
    updates, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_allclose(updates["embedding"]["embedding"], -0.01)
    np.testing.assert_allclose(updates["private_embedding"]["embedding"], -0.01)
    np.testing.assert_allclose(updates["encoder"]["w"], -0.1)
    with pytest.raises(ValueError, match="momentum"):
        client_sgd(0.1, 1.0)
    with pytest.raises(ValueError, match="matched by no rule|matching no leaf"):
        opt.init({"encoder": {"w": jnp.ones(2)}})  # no embedding table: refused


def test_round_schedules_are_optax_schedules_by_round():
    from fedjax_sc.algorithms.optimizers import round_schedule
    assert [round_schedule("constant", 5)(r) for r in (1, 5)] == [1.0, 1.0]
    assert [round_schedule("step:2:0.5", 6)(r) for r in range(1, 7)] == pytest.approx(
        [1, 1, 0.5, 0.5, 0.25, 0.25])
    assert [round_schedule("exponential:0.5", 3)(r) for r in (1, 2, 3)] == pytest.approx(
        [1, 0.5, 0.25])
    cosine = [round_schedule("cosine", 4)(r) for r in range(1, 5)]
    assert cosine == pytest.approx([1, (1 + np.cos(np.pi / 4)) / 2, 0.5,
                                    (1 + np.cos(3 * np.pi / 4)) / 2], abs=1e-6)
    for bad in ("cosine:2", "step:1", "step:1.5:0.5", "exponential:1.5", "exponential:0"):
        with pytest.raises(ValueError, match="--lr-schedule"):
            round_schedule(bad, 3)
