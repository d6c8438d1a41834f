"""Tests of fedjax_sc.data.vocab (federated vocabulary, encoding)."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.data import vocab as vocab_lib
from fedjax_sc.data.vocab import PAD, PAD_TOKEN, UNK, UNK_TOKEN, Vocabulary

CLIENT_TEXTS = [
    ["a b c", "a a", ""],
    ["b  c\td", "a"],
    ["e"],
]


def test_specials():
    assert (PAD, UNK, PAD_TOKEN, UNK_TOKEN) == (0, 1, "<pad>", "<unk>")


def test_a_literal_pad_in_the_text_is_unknown_not_padding():
    v = Vocabulary((PAD_TOKEN, UNK_TOKEN, "good"))
    assert v.encode(["good <pad> good"], 4).tolist() == [[2, UNK, 2, PAD]]


def test_tokenize_splits_on_whitespace():
    assert vocab_lib.tokenize("  it 's\tgood ,\nreally  ") == ["it", "'s", "good", ",", "really"]
    assert vocab_lib.tokenize("") == []


def test_merge_of_client_counts_equals_pooled_count():
    local = [vocab_lib.count_tokens(texts) for texts in CLIENT_TEXTS]
    merged = vocab_lib.merge_counts(local)
    pooled = vocab_lib.count_tokens([t for texts in CLIENT_TEXTS for t in texts])
    assert merged == pooled == collections.Counter(a=4, b=2, c=2, d=1, e=1)
    assert local[0] == collections.Counter(a=3, b=1, c=1)  # a client sees only its own texts


def test_from_counts_most_frequent_and_tie_break():
    counts = collections.Counter({"z": 5, "b": 3, "a": 3, "c": 3, "y": 1, "q": 0, "<unk>": 9})
    v = Vocabulary.from_counts(counts, max_size=3)
    assert v.words == ("<pad>", "<unk>", "z", "a", "b")
    assert len(v) == 5
    full = Vocabulary.from_counts(counts, max_size=100)
    assert full.words == ("<pad>", "<unk>", "z", "a", "b", "c", "y")  # q (count 0) dropped
    # Insertion order of the counter does not matter.
    assert Vocabulary.from_counts(collections.Counter(dict(reversed(counts.items()))), 3) == v


def test_from_counts_rejects_bad_size():
    with pytest.raises(ValueError, match="max_size"):
        Vocabulary.from_counts(collections.Counter(a=1), max_size=0)


def test_vocabulary_validation():
    with pytest.raises(ValueError, match="must start"):
        Vocabulary(("a", "<pad>", "<unk>"))
    with pytest.raises(ValueError, match="duplicate"):
        Vocabulary(("<pad>", "<unk>", "a", "a"))


def test_index_and_encode_clip_pad_unk():
    v = Vocabulary(("<pad>", "<unk>", "good", "bad"))
    assert v.index == {"<pad>": 0, "<unk>": 1, "good": 2, "bad": 3}
    ids = v.encode(["good bad good", "bad", "", "good unknown bad bad bad"], max_len=3)
    assert ids.dtype == np.int32 and ids.shape == (4, 3)
    np.testing.assert_array_equal(ids, [[2, 3, 2], [3, 0, 0], [0, 0, 0], [2, 1, 3]])
    assert v.encode([], 5).shape == (0, 5)
    with pytest.raises(ValueError, match="max_len"):
        v.encode(["good"], 0)


def test_token_lengths():
    lengths = vocab_lib.token_lengths(["a b c", "", " x "])
    assert lengths.dtype == np.int32 and lengths.tolist() == [3, 0, 1]


def test_decode():
    v = Vocabulary(("<pad>", "<unk>", "good"))
    assert v.decode(np.array([2, 1, 0, 0])) == ["good", "<unk>"]
    with pytest.raises(IndexError):
        v.decode([3])


def test_json_round_trip():
    v = Vocabulary(("<pad>", "<unk>", "caf\u00e9", "\"q\"", "a b"))
    assert Vocabulary.from_json(v.to_json()) == v
    with pytest.raises(ValueError, match="array of strings"):
        Vocabulary.from_json('{"a": 1}')


WORDS = st.sampled_from(["good", "bad", "movie", "the", "plot", "x1", "y2", "z3"])


@settings(max_examples=60, deadline=None)
@given(docs=st.lists(st.lists(WORDS, max_size=30), min_size=1, max_size=8),
       max_size=st.integers(1, 10), max_len=st.integers(1, 20))
def test_encode_properties(docs, max_size, max_len):
    texts = [" ".join(d) for d in docs]
    v = Vocabulary.from_counts(vocab_lib.count_tokens(texts), max_size=max_size)
    assert len(v) <= max_size + 2
    ids = v.encode(texts, max_len)
    assert ids.shape == (len(texts), max_len) and ids.dtype == np.int32
    assert ids.min() >= 0 and ids.max() < len(v)
    for doc, row in zip(docs, ids):
        kept = doc[:max_len]
        n = len(kept)
        assert (row[n:] == PAD).all() and (row[:n] != PAD).all()
        expected = [w if w in v.index else UNK_TOKEN for w in kept]
        assert v.decode(row) == expected  # round trip of in-vocab tokens, UNK otherwise
