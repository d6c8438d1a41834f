"""The one masked local-step scan and the shuffled batch plans it runs on."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.core.local import epoch_schedule, keep_where, local_steps, step_key


def _quadratic(params, target):
    """Loss 0.5 ||p - target||^2: its gradient is p - target."""
    loss = 0.5 * jnp.sum(jnp.square(params["w"] - target))
    return (loss, {"target": target}), {"w": params["w"] - target}


@settings(max_examples=10, deadline=None)
@given(real=st.lists(st.booleans(), min_size=1, max_size=6))
def test_a_padded_step_changes_neither_params_nor_momentum(real):
    opt = optax.sgd(0.1, momentum=0.9)
    params = {"w": jnp.ones(3)}
    targets = jnp.arange(len(real) * 3, dtype=jnp.float32).reshape(-1, 3)
    run = jax.jit(lambda r: local_steps(_quadratic, opt, params, opt.init(params), targets, r))
    (p, s), (losses, aux) = run(jnp.asarray(real))
    # the same steps without the padded ones, one by one
    q, t = params, opt.init(params)
    for target, r in zip(targets, real):
        if r:
            u, t = opt.update(_quadratic(q, target)[1], t, q)
            q = optax.apply_updates(q, u)
    chex.assert_trees_all_close((p, s), (q, t), atol=1e-6)
    assert losses.shape == (len(real),)
    np.testing.assert_array_equal(aux["target"], targets)  # every step's values, in order


def test_per_part_masks_keep_rows_of_a_client_axis():
    new = ({"a": jnp.ones(2)}, {"b": jnp.ones((3, 2))})
    old = ({"a": jnp.zeros(2)}, {"b": jnp.zeros((3, 2))})
    out = keep_where((jnp.asarray(True), jnp.asarray([True, False, True])), new, old)
    np.testing.assert_array_equal(out[0]["a"], [1, 1])
    np.testing.assert_array_equal(out[1]["b"], [[1, 1], [0, 0], [1, 1]])
    out = keep_where(jnp.asarray(False), new, old)
    chex.assert_trees_all_equal(out, old)


# one compiled program per example, not one per operation
SCHEDULE = jax.jit(epoch_schedule, static_argnums=(2, 3))


@settings(max_examples=5, deadline=None)
@given(n=st.integers(1, 23), real=st.integers(0, 23), batch=st.integers(1, 7),
       epochs=st.integers(1, 3), seed=st.integers(0, 1000))
def test_each_epoch_visits_every_real_example_once(n, real, batch, epochs, seed):
    real = min(real, n)
    mask = jnp.arange(n) < real
    idx, bmask = SCHEDULE(jax.random.key(seed), mask, batch, epochs)
    assert idx.shape == bmask.shape == (epochs, math.ceil(n / batch), batch)
    for e in range(epochs):
        visited = np.asarray(idx[e])[np.asarray(bmask[e])]
        np.testing.assert_array_equal(np.sort(visited), np.arange(real))




@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), epoch=st.integers(0, 3))
def test_a_step_key_is_no_key_of_the_epochs_shuffle(seed, epoch):
    """A loss that draws from its key directly (dropout, say) draws nothing the shuffle drew:
    step j's key differs from example j's key in the same epoch, and the steps' keys differ."""
    key = jax.random.key(seed)
    epoch_key = jax.random.fold_in(key, epoch)
    data = lambda k: tuple(np.asarray(jax.random.key_data(k)).ravel())
    shuffle = {data(jax.random.fold_in(epoch_key, i)) for i in range(16)}
    steps = {data(step_key(key, jnp.int32(epoch), jnp.int32(j))) for j in range(16)}
    assert len(steps) == 16 and not steps & shuffle
