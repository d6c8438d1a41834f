"""How the table scene's texts become words (``--tokenizer``), with Hugging Face ``tokenizers``
(extra ``fedjax_sc[table]``). Host-side only.

* ``whitespace``: the text split on whitespace, as the FDU-MTL and IYY files are read (they are
  tokenised already); nothing is imported.
* ``basic`` (:func:`basic`): what the GloVe 6B vectors' words look like. GloVe 6B was trained
  on Wikipedia and Gigaword run through the Stanford (Penn Treebank) tokeniser and lower-cased,
  so its 400,000 words hold ``n't``, ``'s``, ``'re``, ``!``, ``(``, hyphenated words
  (``well-made``, ``e-mail``), abbreviations and numbers (``u.s.``, ``3.5``, ``1,000``) and
  accented words beside their plain spelling (``café`` and ``cafe``), but no upper-case letter
  and no ``don't`` or ``great!``. The normaliser is NFKC (``ﬁne`` -> ``fine``, full-width
  forms to ASCII), the typographic apostrophe to ``'`` and lower-case; accents are kept, as
  GloVe keeps them. The pre-tokeniser splits on whitespace, then splits each piece into words
  as that tokeniser does: ``don't`` -> ``do n't``, ``can't`` -> ``ca n't``, ``it's`` ->
  ``it 's``, ``great!`` -> ``great !``, ``(x)`` -> ``( x )``, ``...`` and ``--`` whole, every
  other punctuation mark or symbol a word of its own; letters and digits joined by ``-`` or
  ``&`` stay one word, as do numbers (``3.5``, ``1,000``) and abbreviations of single letters
  (``u.s.``, ``e.g.``). On FDU-MTL reviews written as raw text it finds GloVe's words as
  often as on the tokenised files (docs/data.md).
* a ``tokenizer.json`` (``tokenizers.Tokenizer.from_file``), e.g. a subword tokeniser of one's
  own: its tokens, without special tokens, are the words (a token holding whitespace has it
  replaced by ``▁``).

Each text becomes its words joined by single spaces, so the federated vocabulary
(:mod:`fedjax_sc.data.vocab`) counts them as it counts FDU's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from pathlib import Path

TOKENIZERS = ("basic", "whitespace")
"""The built-in tokenisers; any other ``--tokenizer`` value is a ``tokenizer.json`` file."""
DEFAULT = "basic"
"""``--scene table``'s tokeniser (a run's ``config.json`` without ``tokenizer`` means
``whitespace``: the only one before the option existed)."""

_WORD = r"[^\W_]"  # a letter or a digit
BASIC_PATTERN = (rf"{_WORD}+(?=n't(?!{_WORD}))|n't(?!{_WORD})"
                 rf"|'(?:s|re|ll|m|ve|d)(?!{_WORD})"
                 rf"|(?:{_WORD}\.){{2,}}(?!{_WORD})|[0-9]+(?:[.,][0-9]+)+"
                 rf"|{_WORD}+(?:[-&]{_WORD}+)*|\.\.\.|--|.")
"""The words of :func:`basic`'s pre-tokeniser, first alternative first: a word before ``n't``
and ``n't``; the clitics ``'s 're 'll 'm 've 'd``; an abbreviation (``u.s.``, ``e.g.``); a
number (``3.5``, ``1,000``); letters and digits joined by ``-`` or ``&`` (``well-made``);
``...``, ``--``; any other character alone."""


class MissingTokenizersError(ImportError, RuntimeError):
    """``--tokenizer basic`` or a ``tokenizer.json`` without the ``tokenizers`` package."""


def _tokenizers():
    try:
        import tokenizers
    except ImportError as e:
        raise MissingTokenizersError("--tokenizer basic or a tokenizer.json needs the "
                                     "tokenizers package: pip install 'fedjax_sc[table]'") from e
    return tokenizers


@functools.cache
def basic():
    """``(normalizer, splitter)`` of ``--tokenizer basic`` (see the module docstring): a
    ``tokenizers`` normaliser, and a ``tokenizers.Tokenizer`` of its pre-tokeniser alone
    (its model is a stub; :func:`tokenizer` reads the words from the offsets, in batches)."""
    tk = _tokenizers()
    norm = tk.normalizers.Sequence([tk.normalizers.NFKC(),
                                    tk.normalizers.Replace("\u2019", "'"),
                                    tk.normalizers.Lowercase()])
    splitter = tk.Tokenizer(tk.models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    splitter.pre_tokenizer = tk.pre_tokenizers.Sequence([
        tk.pre_tokenizers.WhitespaceSplit(),
        tk.pre_tokenizers.Split(tk.Regex(BASIC_PATTERN), behavior="isolated")])
    return norm, splitter


def _basic(texts: Sequence[str]) -> list[str]:
    norm, splitter = basic()
    texts = [norm.normalize_str(t) for t in texts]
    return [" ".join(t[a:b] for a, b in e.offsets)
            for t, e in zip(texts, splitter.encode_batch(texts, add_special_tokens=False))]


def load_file(path: str):
    """The ``tokenizers.Tokenizer`` of a ``tokenizer.json``.

    Raises:
      FileNotFoundError / ValueError: one line naming ``--tokenizer`` and the file: it does
        not exist, or ``tokenizers`` cannot read it.
    """
    tk = _tokenizers()
    if not Path(path).expanduser().is_file():
        raise FileNotFoundError(f"--tokenizer {path}: no such file (give basic, whitespace "
                                f"or a tokenizer.json)")
    try:
        return tk.Tokenizer.from_file(str(Path(path).expanduser()))
    except Exception as e:  # tokenizers raises a bare Exception on a bad file
        raise ValueError(f"--tokenizer {path}: not a tokenizers tokenizer.json "
                         f"({' '.join(str(e).split())})") from None


def _words(tokens: Sequence[str]) -> str:
    return " ".join("\u2581".join(t.split()) or "\u2581" for t in tokens)


def tokenizer(spec: str) -> Callable[[Sequence[str]], list[str]]:
    """``texts -> texts``: each text as its words joined by single spaces (``spec``: ``basic``,
    ``whitespace`` or a ``tokenizer.json``).

    Raises:
      MissingTokenizersError, FileNotFoundError, ValueError: see :func:`load_file`.
    """
    if spec == "whitespace":
        return list
    if spec == "basic":
        basic()  # tokenizers imported now: a missing package before any text is read
        return _basic
    tok = load_file(spec)
    return lambda texts: [_words(e.tokens) for e in
                          tok.encode_batch(list(texts), add_special_tokens=False)]
