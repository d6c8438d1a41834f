"""The model change sent compressed: exact without loss, k entries of largest magnitude,
unbiased quantization, the round's context and the communication figures."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms.base import UploadContext, chain
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.model_change import (
    Quantized,
    Sparse,
    model_change,
    probabilistic_quantization,
    top_k,
)
from fedjax_sc.core import communication
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params

KEY = jax.random.key(0)


def _tree(seed, shape=(5, 3)):
    a, b = jax.random.split(jax.random.key(seed))
    return {"embedding": {"embedding": jax.random.normal(a, shape)},
            "out": {"bias": jax.random.normal(b, (4,)), "count": jnp.arange(3)}}


def _roundtrip(t, params, start):
    """(message, diagnostics, decoded) of ``t``: one compiled program, not op by op."""
    def run(params, start):
        context = UploadContext({}, start)
        state = t.init(start)
        message, diagnostics = t.encode(params, state, KEY, context)
        return message, diagnostics, t.decode(message, state, context)

    return jax.jit(run)(params, start)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 6), st.integers(1, 4))
def test_the_change_alone_and_every_entry_restore_the_params(seed, rows, width):
    params, start = _tree(seed, (rows, width)), _tree(seed + 1, (rows, width))
    for t in (model_change(), chain(model_change(), top_k(1.0))):
        _, _, restored = _roundtrip(t, params, start)
        chex.assert_trees_all_close(restored, params, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1000), st.floats(0.01, 1.0))
def test_top_k_sends_the_k_largest_entries_and_zeros_elsewhere(seed, fraction):
    x = jax.random.normal(jax.random.key(seed), (6, 7))
    message, diagnostics, restored = _roundtrip(top_k(fraction), {"w": x}, None)
    sent = message["w"]
    k = max(1, math.ceil(fraction * x.size))
    assert isinstance(sent, Sparse) and sent.values.shape == (k,) and sent.shape == (6, 7)
    magnitude = np.sort(np.abs(np.asarray(x)).ravel())[::-1]
    np.testing.assert_allclose(np.sort(np.abs(np.asarray(sent.values)))[::-1], magnitude[:k])
    kept = np.asarray(restored["w"]) != 0
    assert kept.sum() == k
    np.testing.assert_array_equal(np.asarray(restored["w"])[kept], np.asarray(x)[kept])
    np.testing.assert_allclose(diagnostics["topk_kept"],
                               (magnitude[:k] ** 2).sum() / (magnitude ** 2).sum(), rtol=1e-5)


def test_top_k_of_a_table_counts_and_sends_the_clients_own_rows_only():
    x = jnp.array([[1.0, -2.0], [0.5, 3.0], [0.1, 0.2], [9.0, 9.0], [8.0, 8.0], [7.0, 7.0]])
    mask = jnp.array([True, True, True, False, False, False])  # rows 3-5: padding
    t = top_k(0.5)
    message, diagnostics = t.encode({"embedding": {"embedding": x}}, (), KEY,
                                    UploadContext({"embedding/embedding": mask}))
    sent = message["embedding"]["embedding"]
    assert sent.values.shape == (6,)  # k of the padded table: every client's shape
    assert sent.wire(3) == [(3, jnp.float32), (3, jnp.int32)]  # k of its own 6 entries
    restored = t.decode(message, ())["embedding"]["embedding"]
    np.testing.assert_array_equal(restored, [[1, -2], [0, 3], [0, 0], [0, 0], [0, 0], [0, 0]])
    np.testing.assert_allclose(diagnostics["topk_kept"], 14.0 / 14.3, rtol=1e-5)


def test_quantization_is_unbiased_within_its_levels_and_exact_on_a_constant():
    x = jax.random.normal(KEY, (40,))
    q = probabilistic_quantization(2)
    keys = jax.random.split(jax.random.key(3), 4000)
    decoded = jax.vmap(lambda k: q.decode(q.encode({"x": x}, (), k)[0], ())["x"])(keys)
    step = (x.max() - x.min()) / 3
    assert float(jnp.max(jnp.abs(decoded - x[None]))) <= float(step) + 1e-5
    # the mean of 4,000 draws: sd at most step / 2 / sqrt(4000)
    np.testing.assert_allclose(decoded.mean(0), x, atol=5 * float(step) / 2 / math.sqrt(4000))
    message, _ = q.encode({"c": jnp.full((3,), 0.7)}, (), KEY)
    assert isinstance(message["c"], Quantized) and message["c"].codes.dtype == jnp.uint8
    np.testing.assert_allclose(q.decode(message, ())["c"], 0.7)


def test_settings_out_of_range_and_a_change_without_a_start_raise():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="fraction must be in"):
            top_k(bad)
    for bad in (0, 9, 2.0):
        with pytest.raises(ValueError, match="bits must be an int in 1..8"):
            probabilistic_quantization(bad)
    with pytest.raises(ValueError, match="UploadContext.start"):
        model_change().encode(_tree(0), (), KEY, None)


def test_the_round_restores_fedavg_and_counts_what_the_compressors_send(scene, model):
    data = client_data(scene.train, local_vocab=True)
    params = init_params(model, jax.random.key(0))
    new = {}
    for name, upload in (("plain", None), ("change", chain(model_change(), top_k(1.0))),
                         ("sparse", chain(model_change(), top_k(0.1))),
                         ("bits", chain(model_change(), probabilistic_quantization(4)))):
        alg = fedavg(model, 0.1) if upload is None else fedavg(model, 0.1)._replace(
            upload=upload)
        state, clients = rnd.init_states(alg, params, scene.num_clients)
        step = rnd.make_round_step(alg, batch_size=4, local_epochs=1)
        new[name] = step(state, clients, data, jax.random.key(1))[0].params
        sent = communication.account(alg, state, data)
        if name == "plain":
            dense = sent.upload_sent_bytes
            np.testing.assert_array_equal(dense, sent.upload_dense_bytes)
        elif name == "sparse":  # a tenth of its entries, as float32 values and int32 indices
            assert np.all(sent.upload_sent_bytes < 0.25 * dense)
        elif name == "bits":  # 4 bits an entry: an eighth of float32, plus the bounds
            assert np.all(sent.upload_sent_bytes < 0.15 * dense)
    chex.assert_trees_all_close(new["change"], new["plain"], atol=1e-6)
    moved = lambda p: float(jnp.max(jnp.abs(p["embedding"]["embedding"]
                                           - params["embedding"]["embedding"])))
    assert 0 < moved(new["sparse"]) and 0 < moved(new["bits"])
    chex.assert_tree_all_finite(new)
