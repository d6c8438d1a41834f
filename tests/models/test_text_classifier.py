"""Model: shapes, finiteness, padding invariance, and a NumPy reference of the BiGRU."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.models.text_classifier import BiGRU, TextClassifier, init_params, seq_mean


def _np_gru_direction(x, w_in, b_in, w_rec, b_rec, h):
    """PyTorch-convention GRU over the rows of x [T, d] for one direction, NumPy."""
    sig = lambda v: 1 / (1 + np.exp(-v))
    state, out = np.zeros(h), []
    for t in range(x.shape[0]):
        xg, hg = x[t] @ w_in + b_in, state @ w_rec + b_rec
        r, z = sig(xg[:h] + hg[:h]), sig(xg[h:2 * h] + hg[h:2 * h])
        n = np.tanh(xg[2 * h:] + r * hg[2 * h:])
        state = (1 - z) * n + z * state
        out.append(state)
    return np.stack(out)


def test_bigru_matches_numpy_reference_on_a_padded_batch():
    h, d, L = 3, 4, 6
    x = jax.random.normal(jax.random.key(0), (2, L, d))
    lengths = np.array([6, 4])
    mask = jnp.arange(L)[None] < lengths[:, None]
    gru = BiGRU(hidden=h)
    params = gru.init(jax.random.key(1), x, mask)["params"]
    out = np.asarray(gru.apply({"params": params}, x, mask))
    p = jax.tree.map(np.asarray, params)
    for b, n in enumerate(lengths):
        xb = np.asarray(x[b, :n])
        fwd = _np_gru_direction(xb, p["input_kernel"][:, 0], p["input_bias"][0],
                                p["recurrent_kernel"][0], p["recurrent_bias"][0], h)
        bwd = _np_gru_direction(xb[::-1], p["input_kernel"][:, 1], p["input_bias"][1],
                                p["recurrent_kernel"][1], p["recurrent_bias"][1], h)[::-1]
        np.testing.assert_allclose(out[b, :n], np.concatenate([fwd, bwd], -1), atol=1e-5)


def test_classifier_shapes_and_finite_including_empty_review():
    model = TextClassifier(vocab_size=30, embed_dim=8, hidden=4, mlp_hidden=5, num_classes=3)
    params = init_params(model, jax.random.key(0))
    chex.assert_shape(params["embedding"]["embedding"], (30, 8))
    tokens = jnp.array([[3, 4, 5, 0], [0, 0, 0, 0]], jnp.int32)  # second review is empty
    logits = jax.jit(model.apply)({"params": params}, tokens)
    chex.assert_shape(logits, (2, 3))
    chex.assert_tree_all_finite(logits)


@pytest.fixture(scope="module")
def features():
    """The model's features as one compiled forward pass per input length (op by op, each
    example compiled ~150 small programs)."""
    model = TextClassifier(vocab_size=20, embed_dim=6, hidden=3, mlp_hidden=4)
    params = init_params(model, jax.random.key(0))
    return jax.jit(lambda t: model.apply({"params": params}, t, method=model.features))


@settings(max_examples=4, deadline=None)
@given(length=st.integers(1, 7), extra_pad=st.integers(1, 5))
def test_right_padding_does_not_change_the_features(features, length, extra_pad):
    ids = jax.random.randint(jax.random.key(length), (1, length), 2, 20)
    padded = jnp.pad(ids, ((0, 0), (0, extra_pad)))
    chex.assert_trees_all_close(features(ids), features(padded), atol=1e-6)


def test_seq_mean_matches_numpy():
    states = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
    mask = np.array([[1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], bool)
    out = np.asarray(seq_mean(jnp.asarray(states), jnp.asarray(mask)))
    np.testing.assert_allclose(out[0], states[0, :2].mean(0), rtol=1e-6)
    np.testing.assert_array_equal(out[1], np.zeros(3))


def test_pretrained_matrix_is_used_and_checked():
    model = TextClassifier(vocab_size=10, embed_dim=4, hidden=2, mlp_hidden=3)
    matrix = np.arange(40, dtype=np.float32).reshape(10, 4)
    params = init_params(model, jax.random.key(0), matrix)
    np.testing.assert_array_equal(params["embedding"]["embedding"], matrix)
    try:
        init_params(model, jax.random.key(0), matrix[:5])
    except ValueError as e:
        assert "(10, 4)" in str(e)
    else:
        raise AssertionError("wrong shape accepted")


def test_bfloat16_computes_in_bf16_with_float32_parameters_and_outputs():
    from fedjax_sc.models.private_shared import PrivateSharedClassifier
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, 30, (4, 9)), jnp.int32)
    for cls in (TextClassifier, PrivateSharedClassifier):
        f32 = cls(vocab_size=30, embed_dim=8, hidden=4, mlp_hidden=6)
        bf16 = f32.clone(dtype="bfloat16")
        params = init_params(f32, jax.random.key(0))
        assert jax.tree.structure(params) == jax.tree.structure(
            init_params(bf16, jax.random.key(0)))
        assert {x.dtype for x in jax.tree.leaves(init_params(bf16, jax.random.key(0)))} == {
            jnp.dtype(jnp.float32)}
        out32, out16 = (jax.jit(m.apply)({"params": params}, tokens) for m in (f32, bf16))
        for a, b in zip(jax.tree.leaves(out32), jax.tree.leaves(out16)):
            assert b.dtype == jnp.float32  # logits and features leave the model in float32
            np.testing.assert_allclose(a, b, atol=0.05, rtol=0.05)  # bf16: 8 mantissa bits
        hlo = jax.jit(bf16.apply).lower({"params": params}, tokens).as_text()
        assert "bf16" in hlo and "bf16" not in jax.jit(f32.apply).lower(
            {"params": params}, tokens).as_text()


def test_a_bfloat16_round_keeps_float32_state_and_trains():
    from fedjax_sc.algorithms.fedavg import fedavg
    from fedjax_sc.core import round as rnd
    from fedjax_sc.data.client_data import client_data
    from fedjax_sc.data.scenes import synthetic_scene
    scene = synthetic_scene(num_clients=2, train_per_client=12, test_per_client=4, max_len=8)
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=8, hidden=4, mlp_hidden=6,
                           dtype="bfloat16")
    alg = fedavg(model, 0.1)
    state, clients = rnd.init_states(alg, init_params(model, jax.random.key(0)), 2)
    step = rnd.make_round_step(alg, batch_size=4, local_epochs=2)
    train = client_data(scene.train, True)
    new, clients, metrics = step(state, clients, train, jax.random.key(1))
    assert {x.dtype for x in jax.tree.leaves(new.params)} == {jnp.dtype(jnp.float32)}
    assert bool(metrics.finite.all())
    moved = jax.tree.map(lambda a, b: float(jnp.abs(a - b).max()), new.params, state.params)
    assert min(jax.tree.leaves(moved)) > 0
    losses = [float(metrics.train_loss.mean())]  # ln 2 = 0.693 untrained
    for r in range(2, 6):
        new, clients, metrics = step(new, clients, train, jax.random.key(r))
        losses.append(float(metrics.train_loss.mean()))
    assert losses[-1] < losses[0] - 0.05, losses  # it trains, in bfloat16


@pytest.mark.parametrize("hidden", [3, 8])
def test_the_gru_inits_give_their_defining_weights(hidden):
    """semi_orthogonal (the default): each direction's [h, 3h] recurrent kernel has
    orthonormal rows; flax: each gate's [h, h] block is orthogonal (Flax's GRUCell); pytorch:
    every GRU weight and bias within +-1/sqrt(h) (PyTorch's nn.GRU), the biases not zero. The
    models' other leaves do not depend on it."""
    encoder = {}
    for init in ("semi_orthogonal", "flax", "pytorch"):
        model = TextClassifier(vocab_size=12, embed_dim=5, hidden=hidden, mlp_hidden=4,
                               gru_init=init)
        params = init_params(model, jax.random.key(0))
        encoder[init] = {k: np.asarray(v) for k, v in params["encoder"].items()}
        if init == "semi_orthogonal":
            default = init_params(TextClassifier(vocab_size=12, embed_dim=5, hidden=hidden,
                                                 mlp_hidden=4), jax.random.key(0))
            chex.assert_trees_all_equal(params, default)
            rest = {k: v for k, v in params.items() if k != "encoder"}
        else:
            chex.assert_trees_all_equal({k: v for k, v in params.items() if k != "encoder"},
                                        rest)
    eye = np.eye(hidden)
    for w in encoder["semi_orthogonal"]["recurrent_kernel"]:
        np.testing.assert_allclose(w @ w.T, eye, atol=1e-5)
    for w in encoder["flax"]["recurrent_kernel"]:
        for g in range(3):
            block = w[:, g * hidden:(g + 1) * hidden]
            np.testing.assert_allclose(block.T @ block, eye, atol=1e-5)
    bound = 1 / np.sqrt(hidden)
    for leaf in encoder["pytorch"].values():
        assert np.abs(leaf).max() <= bound and np.abs(leaf).max() > bound / 2
    for init in ("semi_orthogonal", "flax"):
        assert not encoder[init]["input_bias"].any() and not encoder[init]["recurrent_bias"].any()
    with pytest.raises(ValueError, match="--gru-init 'xavier'"):
        init_params(TextClassifier(vocab_size=12, embed_dim=5, gru_init="xavier"),
                    jax.random.key(0))
