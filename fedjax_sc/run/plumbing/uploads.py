"""The run's upload flags as one upload transform: ``--upload-compression``, ``--pca-band`` and
``--upload-noise`` (chained in that order after an algorithm's own upload), and their checks.

``--upload-compression`` sends the model change compressed (:mod:`fedjax_sc.algorithms.
model_change`): ``none`` (the default: the params as they are), ``topk:FRACTION`` (each
leaf's entries of largest magnitude, Aji and Heafield 2017), ``bits:BITS`` (probabilistic
quantization, Konecny et al. 2016) or ``sign`` (each entry's sign and the leaf's mean
magnitude, Karimireddy et al. 2019); ``topk:FRACTION+ef`` and ``sign+ef`` add error feedback
(every client carries what was dropped into its next upload; Stich, Cordonnier and Jaggi
2018), which quantization does not get (``error_feedback``'s docstring: its memory needs a
contractive compressor, and the quantizer's noise can exceed the change it rounds). It
compresses the change of every shared leaf, so it does not go with ``--pca-band``, which
compresses the word table's values (KTEPS*): one or the other.
"""

from __future__ import annotations

import inspect
from typing import Any

from fedjax_sc.algorithms.hparams import is_traced, is_zero
from fedjax_sc.algorithms.kteps_star import default_band, kteps_star, private_upload
from fedjax_sc.algorithms.model_change import (
    error_feedback,
    model_change,
    probabilistic_quantization,
    scaled_sign,
    top_k,
)
from fedjax_sc.algorithms.upload import UploadTransform, chain

NO_COMPRESSION = "none"
"""``--upload-compression``'s default: the model change goes up as it is."""
COMPRESSIONS = (NO_COMPRESSION, "topk:FRACTION[+ef]", "bits:BITS", "sign[+ef]")
"""The spellings of ``--upload-compression``."""


def upload_settings(name: str, embed_dim: int, pca_band: tuple[int, int] | None,
                    upload_noise: float | None) -> tuple[tuple[int, int] | None, float]:
    """The PCA band and noise sigma an algorithm uploads with, each None replaced by its default.

    Noise: the builder's default, written once in the builder: kteps_star's ``sigma``
    (:data:`~fedjax_sc.algorithms.noise.PAPER_SIGMA`, Alg. 1 line 14), none for every other
    algorithm, as ``fsc.fedavg(model)`` uploads. The paper's scenes preset the paper's sigma
    for every federated method (``TrainConfig.resolved``, Li et al. 2021, Sec. 5.2). Band:
    kteps_star's is the paper's band scaled to d
    (:func:`~fedjax_sc.algorithms.kteps_star.default_band`), the others' no compression.
    """
    if name == "kteps_star":
        pca_band = pca_band or default_band(embed_dim)
    if upload_noise is None:
        upload_noise = (inspect.signature(kteps_star).parameters["sigma"].default
                        if name == "kteps_star" else 0.0)
    return pca_band, upload_noise if is_traced(upload_noise) else float(upload_noise)


def compression(spec: str) -> UploadTransform | None:
    """The upload transform ``--upload-compression spec`` names (None for ``none``).

    Raises:
      ValueError: a spelling outside :data:`COMPRESSIONS` or a value out of range (the flag
        and the reason in one line).
    """
    name, plus, suffix = str(spec).partition("+")
    kind, _, value = name.partition(":")
    if kind == NO_COMPRESSION and not value and not plus:
        return None
    try:
        if (plus and suffix != "ef") or (kind == "sign") != (not value):  # sign: no value
            raise ValueError
        number = {"topk": float, "bits": int, "sign": str}[kind](value)
    except (KeyError, ValueError):
        raise ValueError(f"--upload-compression {spec!r}: write one of "
                         f"{', '.join(COMPRESSIONS)}") from None
    if plus and kind == "bits":
        raise ValueError(f"--upload-compression {spec}: error feedback goes with topk and sign "
                         f"(probabilistic quantization's noise can exceed the change it "
                         f"rounds, and the memory that carries it grows)")
    try:
        compressor = {"topk": lambda: top_k(number), "sign": scaled_sign,
                      "bits": lambda: probabilistic_quantization(number)}[kind]()
    except ValueError as e:
        raise ValueError(f"--upload-compression {spec}: {e}") from None
    return chain(model_change(), error_feedback(compressor) if plus else compressor)


def check(c: Any) -> None:
    """Raises ``ValueError`` for a config's upload settings that no upload can follow: a PCA
    band outside ``1 <= d1 <= d2 <= d`` (it is made a tuple of ints), a negative noise, a
    compression that :func:`compression` refuses, or a compression beside a PCA band."""
    if c.pca_band is not None:
        c.pca_band = tuple(int(x) for x in c.pca_band)
        if len(c.pca_band) != 2 or not 1 <= c.pca_band[0] <= c.pca_band[1] <= c.embed_dim:
            raise ValueError(f"--pca-band D1 D2 needs 1 <= D1 <= D2 <= d = {c.embed_dim}, got "
                             f"{' '.join(map(str, c.pca_band))}")
    if c.upload_noise < 0 or c.dp_noise < 0:
        raise ValueError("upload_noise and dp_noise must be >= 0")
    if compression(c.upload_compression) is not None and c.pca_band is not None:
        raise ValueError(f"--upload-compression {c.upload_compression} compresses the model "
                         f"change and --pca-band {c.pca_band[0]} {c.pca_band[1]} the word "
                         f"table ({c.algorithm}): choose one")


def run_upload(pca_band: tuple[int, int] | None, sigma: Any, center: bool,
               spec: str = NO_COMPRESSION) -> UploadTransform:
    """``chain(compression(spec), pca_compress(*pca_band), gaussian_noise(sigma))`` without
    the parts that are off; the identity when all are.

    Raises:
      ValueError: as :func:`compression`.
    """
    compressed = compression(spec)
    rest = private_upload(pca_band, sigma, center)
    if compressed is None:
        return rest
    if pca_band is None and is_zero(sigma):
        return compressed
    return chain(compressed, rest)
