"""KTEPS*: KTEPS whose clients upload PCA-compressed, noised shared leaves (Li et al. 2021, Sec.
4.2, Alg. 1, Fig. 3 bottom).

KTEPS* is KTEPS (:mod:`fedjax_sc.algorithms.kteps`) with the upload
``chain(pca_compress(d1, d2), gaussian_noise(sigma))``: the round removes the private leaves
(P_p, G_p) first by the leaf rules, then the shared word embeddings are projected on principal
components d1..d2 of the client's local-vocabulary rows (Alg. 1 line 13, Eq. 10-11), N(0,
sigma^2) noise is added to every uploaded leaf (line 14), and the server restores the table
(line 17, Eq. 12) before the usual weighted mean (line 18).

Paper settings (Sec. 5.2): d = 200, d1 = 2, d2 = 150, sigma = 0.01. :func:`default_band` keeps
the proportions for another d (GloVe 6B 50d: d1 = 2, d2 = 38). ``d1 = 1, d2 = d, sigma = 0`` is
KTEPS (Sec. 5.6.3).
"""

from __future__ import annotations

import math

from fedjax_sc.algorithms import hparams
from fedjax_sc.algorithms.base import Algorithm
from fedjax_sc.algorithms.compression import PCA_CENTER, pca_compress
from fedjax_sc.algorithms.kteps import kteps
from fedjax_sc.algorithms.noise import PAPER_SIGMA, gaussian_noise
from fedjax_sc.algorithms.upload import UploadTransform, chain, identity_upload
from fedjax_sc.models.private_shared import PrivateSharedClassifier


def default_band(embed_dim: int) -> tuple[int, int]:
    """The paper's band (2, 150) of d = 200 scaled to ``embed_dim``: d1 = 2 drops the first
    component, d2 = round(0.75 d) drops the smallest quarter (d = 50: (2, 38)).

    Raises:
      ValueError: embed_dim < 2.
    """
    if embed_dim < 2:
        raise ValueError(f"KTEPS* needs d >= 2, got {embed_dim}")
    return 2, max(2, math.floor(0.75 * embed_dim + 0.5))


def kteps_star(model: PrivateSharedClassifier, *, d1: int | None = None, d2: int | None = None,
               sigma: float = PAPER_SIGMA, center: bool = PCA_CENTER,
               **kteps_kwargs) -> Algorithm:
    """Builds KTEPS*.

    Args:
      model: the KTEPS model (``PrivateSharedClassifier(private_from="classifier",
        projection=True)``).
      d1: the band of principal components d1..d2, 1-based inclusive (see
        :func:`~fedjax_sc.algorithms.compression.pca_compress`); None:
        :func:`default_band` of ``model.embed_dim``'s (2, as the paper).
      d2: the band's last component; None: :func:`default_band`'s (round(0.75 d)).
      sigma: upload noise std (:func:`~fedjax_sc.algorithms.noise.gaussian_noise`).
      center: centre the rows before the PCA.
      **kteps_kwargs: learning rates and loss settings of
        :func:`~fedjax_sc.algorithms.kteps.kteps`.

    Raises:
      TypeError: as :func:`~fedjax_sc.algorithms.kteps.kteps` (the model).
      ValueError: an invalid band or sigma; as :func:`~fedjax_sc.algorithms.kteps.kteps` (its
        settings).
    """
    band = (d1, d2)
    if d1 is None or d2 is None:  # the paper's band scaled to d, where one is not given
        default = default_band(model.embed_dim)
        band = (default[0] if d1 is None else d1, default[1] if d2 is None else d2)
    return kteps(model, **kteps_kwargs)._replace(
        name="kteps_star", upload=private_upload(band, sigma, center))


def private_upload(band: tuple[int, int] | None, sigma: float = 0.0,
                   center: bool = PCA_CENTER) -> UploadTransform:
    """KTEPS*'s upload for any algorithm whose shared leaves hold the word embeddings:
    ``chain(pca_compress(*band), gaussian_noise(sigma))``, leaving out the parts that are off
    (``band=None``, ``sigma=0``; both off: the identity).

    Raises:
      ValueError: an invalid band or sigma.
    """
    parts = []
    if band is not None:
        parts.append(pca_compress(*band, center=center))
    if not hparams.is_zero(sigma):
        parts.append(gaussian_noise(sigma))
    return chain(*parts) if parts else identity_upload()
