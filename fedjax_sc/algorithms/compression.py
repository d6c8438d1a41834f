"""PCA compression of a client's word embeddings before upload (KTEPS*, Li et al. 2021, Sec. 4.2,
Eq. 10-12, Remark 3, Alg. 1 lines 13 and 17).

On the client, the rows of its word-embedding table that belong to its local vocabulary V^k
(``UploadContext.row_masks``; every row of the dense table when there is no mask) give the
principal components u_1..u_d sorted by decreasing eigenvalue (Eq. 10). The band
U^k = [u_{d1} .. u_{d2}] (1-based, inclusive) is the projection matrix, ``d x (d2 - d1 + 1)``,
and the client sends ``theta_E^k U^k`` and ``U^k`` (Eq. 11). The server restores
``(theta_E^k U^k) U^k^T`` (Eq. 12); rows outside V^k are neither sent nor restored and keep the
server's current value (the round aggregates tables by rows).

Choices the paper leaves open, as implemented:

* **Centring.** The components are those of standard PCA: eigenvectors of the covariance of
  the *centred* V^k rows (as PPA [38], whose dominating directions the paper removes). The
  projection and the restoration follow Eq. 11-12 as printed: no mean is subtracted before
  projecting or added back after, so the mean's component outside the band is lost too.
  ``center=False`` uses the uncentred second-moment matrix (the right singular vectors of
  theta_E^k) instead.
* **Energy kept** (Sec. 4.2.2) is ``sum_{i=d1..d2} lambda_i / sum_i lambda_i`` with lambda_i the
  covariance eigenvalues (squared singular values of the centred rows); the paper's text says
  "singular value", but energy is conventionally the variance, i.e. the eigenvalue.
* With ``d1 = 1, d2 = d`` U^k is a full orthonormal basis and the restoration equals the
  table up to float rounding: KTEPS* degenerates into KTEPS (paper Sec. 5.6.3).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.upload import Params, UploadContext, UploadTransform

EMBEDDING_TABLE = "embedding/embedding"
"""Path of the shared word-embedding table E_s in every model of the library."""


class Compressed(NamedTuple):
    """A compressed table as uploaded (Eq. 11).

    Attributes:
      coefficients: float32 ``[rows, m]``, ``theta_E^k U^k``; rows outside V^k are zero
        (not sent).
      basis: float32 ``[d, m]``, U^k, orthonormal columns, m = d2 - d1 + 1.
    """

    coefficients: jax.Array
    basis: jax.Array

    def wire(self, rows: int | None) -> list[tuple[int, Any]]:
        """What crosses the network, ``[(elements, dtype)]``: ``rows x m`` coefficients (the
        client's rows of V^k; all rows when ``rows`` is None) and the ``d x m`` basis. The
        round's communication figures ask a message leaf for this
        (:func:`fedjax_sc.core.communication.count`)."""
        m = self.basis.shape[1]
        rows = self.coefficients.shape[0] if rows is None else rows
        return [(rows * m, self.coefficients.dtype), (self.basis.size, self.basis.dtype)]


PCA_CENTER = True
"""Centre the rows before the PCA (the covariance of Eq. 10; ``--no-pca-center`` turns it
off)."""


def principal_components(x: jax.Array, mask: jax.Array | None = None,
                         center: bool = PCA_CENTER) -> tuple[jax.Array, jax.Array]:
    """Eigen-decomposition of the covariance of the real rows of ``x`` (Eq. 10).

    Args:
      x: float ``[rows, d]``.
      mask: optional bool ``[rows]``, True on the rows that take part (default: all).
      center: subtract the mean of the real rows first (standard PCA).

    Returns:
      ``(eigenvalues, components)``: float32 ``[d]`` in decreasing order (clipped at 0) and
      ``[d, d]`` whose column i is u_{i+1}.
    """
    mask = jnp.ones(x.shape[:1], bool) if mask is None else mask
    m = mask.astype(x.dtype)[:, None]
    n = jnp.maximum(jnp.sum(m), 1.0)
    mean = jnp.sum(x * m, axis=0) / n if center else jnp.zeros(x.shape[1:], x.dtype)
    xc = (x - mean) * m
    cov = jnp.matmul(xc.T, xc, precision=jax.lax.Precision.HIGHEST) / n
    values, vectors = jnp.linalg.eigh(cov)  # ascending
    return jnp.maximum(values[::-1], 0.0), vectors[:, ::-1]


def energy_kept(eigenvalues: jax.Array, d1: int, d2: int) -> jax.Array:
    """``sum_{i=d1..d2} lambda_i / sum_i lambda_i`` (paper Sec. 4.2.2); 1 for a zero table.

    Args:
      eigenvalues: float ``[d]`` in decreasing order.
      d1: the band's first component, 1-based.
      d2: the band's last component, inclusive.
    """
    total = jnp.sum(eigenvalues)
    kept = jnp.sum(eigenvalues[d1 - 1:d2])
    return jnp.where(total > 0, kept / jnp.where(total > 0, total, 1.0), 1.0)


def pca_compress(d1: int, d2: int, table: str = EMBEDDING_TABLE,
                 center: bool = PCA_CENTER) -> UploadTransform:
    """Upload transform sending ``table`` as its projection on principal components d1..d2.

    Args:
      d1: the band's first component, 1-based, ``1 <= d1 <= d2 <= d`` (paper: d = 200,
        d1 = 2, d2 = 150; with GloVe 50d the same proportions are d1 = 2, d2 = 38).
      d2: the band's last component, inclusive.
      table: ``/``-joined path of the ``[rows, d]`` table in the shared params.
      center: centre the rows before the PCA (see the module docstring).

    Returns:
      An :class:`~fedjax_sc.algorithms.upload.UploadTransform` whose message replaces the table
      by a :class:`Compressed` and reports the diagnostic ``energy_kept`` (float32 scalar per
      client). Stateless.

    Raises:
      ValueError: at construction if ``d1 < 1`` or ``d2 < d1``; at trace time if the upload
        has no leaf ``table`` (e.g. the embedding is private) or ``d2 > d``.
    """
    if d1 < 1 or d2 < d1:
        raise ValueError(f"pca_compress needs 1 <= d1 <= d2, got d1 = {d1}, d2 = {d2}")
    path = tuple(table.split("/"))

    def init(params):
        del params
        return ()

    def encode(params, state, rng, context: UploadContext | None = None):
        del state, rng
        x = _get(params, path, table)
        if x.ndim != 2 or d2 > x.shape[1]:
            raise ValueError(f"pca_compress({d1}, {d2}): {table} has shape {x.shape}; the band "
                             f"must lie in 1..d = {x.shape[-1]}")
        mask = None if context is None else context.row_masks.get(table)
        values, vectors = principal_components(x, mask, center)
        basis = vectors[:, d1 - 1:d2]
        coefficients = jnp.matmul(x, basis, precision=jax.lax.Precision.HIGHEST)
        if mask is not None:
            coefficients = coefficients * mask.astype(x.dtype)[:, None]
        return (_set(params, path, Compressed(coefficients, basis)),
                {"energy_kept": energy_kept(values, d1, d2)})

    def decode(message, state, context=None):
        del state, context
        c = _get(message, path, table)
        if not isinstance(c, Compressed):
            raise ValueError(f"pca_compress.decode: {table} of the message is not Compressed")
        return _set(message, path, jnp.matmul(c.coefficients, c.basis.T,
                                              precision=jax.lax.Precision.HIGHEST))

    return UploadTransform(init, encode, decode)


def _get(tree: Params, path: tuple[str, ...], name: str):
    for p in path:
        if not isinstance(tree, dict) or p not in tree:
            raise ValueError(f"the upload has no leaf {name} (is it private, or is the path "
                             f"wrong?)")
        tree = tree[p]
    return tree


def _set(tree: Params, path: tuple[str, ...], value) -> Params:
    if not path:
        return value
    return {**tree, path[0]: _set(tree[path[0]], path[1:], value)}
