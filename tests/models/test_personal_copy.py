"""The personal copy: both copies start alike (a pretrained table too), the alpha leaf is there
only when asked, a base model with ``private_`` modules is refused, and the personalised
model's params are alpha v + (1 - alpha) w."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.models.personal_copy import ALPHA, PREFIX, PersonalCopy, join, parts, personal
from fedjax_sc.models.private_shared import PrivateSharedClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

BASE = TextClassifier(vocab_size=12, embed_dim=4, hidden=3, mlp_hidden=5)
TOKENS = jnp.array([[3, 4, 5, 0], [6, 0, 0, 0]])


def test_both_copies_start_alike_with_a_pretrained_table():
    table = np.random.default_rng(0).normal(size=(12, 4))
    params = init_params(PersonalCopy(BASE), jax.random.key(0), table)
    w, v, alpha = parts(params)
    assert alpha is None and set(w) == {"embedding", "encoder", "classifier"}
    assert set(params) == set(w) | {PREFIX + k for k in w}
    chex.assert_trees_all_equal(w, v)
    np.testing.assert_array_equal(v["embedding"]["embedding"], table.astype(np.float32))
    chex.assert_trees_all_equal(join(w, v), params)
    np.testing.assert_array_equal(PersonalCopy(BASE).apply({"params": params}, TOKENS),
                                  BASE.apply({"params": v}, TOKENS))


def test_the_alpha_leaf_is_there_only_when_asked():
    params = init_params(PersonalCopy(BASE, 0.25), jax.random.key(0))
    assert params[ALPHA].shape == () and params[ALPHA].dtype == jnp.float32
    assert float(params[ALPHA]) == 0.25
    assert ALPHA not in init_params(PersonalCopy(BASE), jax.random.key(0))


def test_a_base_model_with_private_modules_is_refused():
    two = PrivateSharedClassifier(vocab_size=12, embed_dim=4, hidden=2, mlp_hidden=3)
    with pytest.raises(ValueError, match="private_classifier"):
        init_params(PersonalCopy(two), jax.random.key(0))


def test_the_personal_params_are_the_mixture():
    w = {"a": jnp.float32([1.0, 2.0]), "b": {"c": jnp.float32(-1.0)}}
    v = {"a": jnp.float32([3.0, 0.0]), "b": {"c": jnp.float32(5.0)}}
    chex.assert_trees_all_equal(personal(join(w, v)), v)
    mixed = personal(join(w, v, jnp.float32(0.25)))
    chex.assert_trees_all_close(mixed, {"a": jnp.float32([1.5, 1.5]),
                                        "b": {"c": jnp.float32(0.5)}})
    params = init_params(PersonalCopy(BASE, 0.25), jax.random.key(0))
    moved = join(parts(params)[0], jax.tree.map(lambda x: x + 1.0, parts(params)[1]),
                 params[ALPHA])
    chex.assert_trees_all_close(
        PersonalCopy(BASE, 0.25).apply({"params": moved}, TOKENS),
        BASE.apply({"params": jax.tree.map(lambda x: x + 0.25, parts(params)[0])}, TOKENS),
        atol=1e-6)


def test_the_global_copy_is_what_the_base_model_draws_from_the_same_key():
    """A method on PersonalCopy and FedAvg on the base model start from the same model."""
    base = TextClassifier(vocab_size=30, embed_dim=4, hidden=2, mlp_hidden=3)
    alone = init_params(base, jax.random.key(3))
    w, v, _ = parts(init_params(PersonalCopy(base, alpha=0.25), jax.random.key(3)))
    chex.assert_trees_all_equal(w, alone)
    chex.assert_trees_all_equal(v, alone)
