"""KTEPS*'s upload transforms: PCA compression (Eq. 10-12), Gaussian noise (Alg. 1 line 14)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms.base import UploadContext, chain
from fedjax_sc.algorithms.compression import (
    Compressed,
    energy_kept,
    pca_compress,
    principal_components,
)
from fedjax_sc.algorithms.noise import gaussian_noise

KEY = jax.random.key(0)


def _table(rows, d, seed=0):
    rng = np.random.default_rng(seed)
    # anisotropic rows with a non-zero mean, as word embeddings have
    return (rng.normal(size=(rows, d)) * np.linspace(3, 0.2, d) + 0.5).astype(np.float32)


@settings(max_examples=5, deadline=None)
@given(rows=st.integers(3, 30), d=st.integers(2, 8), center=st.booleans(),
       seed=st.integers(0, 1000))
def test_components_are_orthonormal_and_sorted(rows, d, center, seed):
    # one compiled program per example, not one per operation
    values, vectors = jax.jit(principal_components, static_argnames="center")(
        jnp.asarray(_table(rows, d, seed)), center=center)
    np.testing.assert_allclose(vectors.T @ vectors, np.eye(d), atol=1e-4)
    assert np.all(np.diff(np.asarray(values)) <= 1e-5) and np.all(np.asarray(values) >= 0)
    x = _table(rows, d, seed).astype(np.float64)
    x = x - x.mean(0) if center else x
    reference = np.sort(np.linalg.eigvalsh(x.T @ x / rows))[::-1]
    np.testing.assert_allclose(values, np.maximum(reference, 0), rtol=1e-3, atol=1e-4)


def test_band_and_energy_kept_formula():
    x = jnp.asarray(_table(40, 6))
    values, vectors = principal_components(x)
    assert float(energy_kept(values, 1, 6)) == pytest.approx(1.0)
    expected = float(np.sum(values[1:4]) / np.sum(values))
    message, diag = pca_compress(2, 4).encode({"embedding": {"embedding": x}}, (), KEY)
    c = message["embedding"]["embedding"]
    assert isinstance(c, Compressed) and c.coefficients.shape == (40, 3)
    assert c.basis.shape == (6, 3)
    np.testing.assert_allclose(c.basis.T @ c.basis, np.eye(3), atol=1e-5)
    np.testing.assert_allclose(c.coefficients, x @ vectors[:, 1:4], rtol=1e-4, atol=1e-4)
    assert float(diag["energy_kept"]) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("center", [True, False])
def test_full_band_restores_the_rows(center):
    x = jnp.asarray(_table(25, 5))
    params = {"embedding": {"embedding": x}, "encoder": {"w": jnp.ones(3)}}
    t = pca_compress(1, 5, center=center)
    message, _ = t.encode(params, (), KEY)
    chex.assert_trees_all_close(t.decode(message, ()), params, atol=1e-5)


def test_band_projects_without_recentring_as_eq_12():
    x = jnp.asarray(_table(30, 6))
    t = pca_compress(2, 5)
    restored = t.decode(t.encode({"embedding": {"embedding": x}}, (), KEY)[0], ())
    _, vectors = principal_components(x)
    u = vectors[:, 1:5]
    np.testing.assert_allclose(restored["embedding"]["embedding"], x @ u @ u.T, atol=1e-5)


def test_rows_outside_the_local_vocabulary_are_neither_fitted_nor_sent():
    x = _table(20, 4)
    mask = np.arange(20) < 12
    x_outside = x.copy()
    x_outside[~mask] = 1000.0  # must not influence the components
    t = pca_compress(1, 2)
    ctx = UploadContext({"embedding/embedding": jnp.asarray(mask)})
    m1, d1 = t.encode({"embedding": {"embedding": jnp.asarray(x)}}, (), KEY, ctx)
    m2, d2 = t.encode({"embedding": {"embedding": jnp.asarray(x_outside)}}, (), KEY, ctx)
    c1, c2 = m1["embedding"]["embedding"], m2["embedding"]["embedding"]
    np.testing.assert_allclose(np.abs(c1.basis), np.abs(c2.basis), atol=1e-5)
    assert np.all(np.asarray(c2.coefficients)[~mask] == 0)
    assert float(d1["energy_kept"]) == pytest.approx(float(d2["energy_kept"]), rel=1e-5)


def test_compression_refuses_a_missing_table_or_an_empty_band():
    with pytest.raises(ValueError, match="d1 <= d2"):
        pca_compress(3, 2)
    with pytest.raises(ValueError, match="no leaf embedding/embedding"):
        pca_compress(1, 2).encode({"encoder": {"w": jnp.ones(2)}}, (), KEY)
    with pytest.raises(ValueError, match="band must lie"):
        pca_compress(1, 9).encode({"embedding": {"embedding": jnp.ones((4, 3))}}, (), KEY)


def test_noise_has_the_requested_std_on_every_leaf_and_zero_is_exact():
    params = {"a": jnp.zeros((200, 250)), "b": Compressed(jnp.zeros((300, 100)),
                                                          jnp.zeros((100, 300)))}
    message, _ = gaussian_noise(0.01).encode(params, (), KEY)
    for leaf in jax.tree.leaves(message):
        assert np.std(np.asarray(leaf)) == pytest.approx(0.01, rel=0.02)
        assert abs(float(np.mean(np.asarray(leaf)))) < 5e-4
    a, b = jax.tree.leaves(message)[:2]
    a, b = np.asarray(a).ravel()[:10000], np.asarray(b).ravel()[:10000]
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.05
    same, _ = gaussian_noise(0.0).encode(params, (), KEY)
    chex.assert_trees_all_equal(same, params)
    with pytest.raises(ValueError):
        gaussian_noise(-1.0)


def test_noise_comes_after_compression_in_the_chain():
    x = jnp.asarray(_table(30, 4))
    t = chain(pca_compress(1, 4), gaussian_noise(0.5))
    message, diag = t.encode({"embedding": {"embedding": x}}, t.init({"embedding": {
        "embedding": x}}), KEY)
    c = message["embedding"]["embedding"]
    assert isinstance(c, Compressed)  # the noise saw the compressed message
    assert "energy_kept" in diag
    # the basis sent is noised, so it is no longer orthonormal
    assert np.abs(np.asarray(c.basis.T @ c.basis) - np.eye(4)).max() > 0.1


@settings(max_examples=5, deadline=None)
@given(d=st.integers(5, 9), d1=st.integers(2, 3), seed=st.integers(0, 1000))
def test_iterating_the_band_on_one_table_loses_d1_minus_1_directions_a_round(d, d1, seed):
    # the paper's "error accumulation" (Sec. 5.6.3) when every client compresses the same full
    # table (Eq. 10 as printed): the directions a round removes carry no variance in the next
    # round's table, so that round's top components are new ones (uncentred: exact ranks)
    d2 = d - 1
    step_t = pca_compress(d1, d2, table="e/e", center=False)
    step = jax.jit(lambda x: step_t.decode(step_t.encode({"e": {"e": x}}, (), KEY)[0],
                                           ())["e"]["e"])
    x = jnp.asarray(_table(60, d, seed))
    for r in range(1, 4):
        x = step(x)
        rank = int(np.sum(np.linalg.svd(np.asarray(x), compute_uv=False) > 1e-3))
        assert rank == max(0, (d2 - d1 + 1) - (d1 - 1) * (r - 1))
