"""Federated vocabulary: clients count their own tokens, the server merges and keeps the top words.

Li et al. 2021, Sec. 5.1: "We count the word occurrences for each client individually and then
aggregate them on the parameter server. We select the most 50000 frequent ones as the global
vocab ... we add "<unk>" ... and "<pad>"". Host-side only (numpy).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
from collections.abc import Iterable, Sequence

import numpy as np

VOCAB_SIZE = 50_000
"""Words kept by the federated vocabulary (Li et al. 2021, Sec. 5.1: the 50,000 most frequent;
``<pad>`` and ``<unk>`` come on top)."""
PAD = 0
UNK = 1
PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"


def tokenize(text: str) -> list[str]:
    """Splits on whitespace; the corpora are pre-tokenised (Li et al. 2021, Sec. 5.1)."""
    return text.split()


def count_tokens(texts: Iterable[str]) -> collections.Counter:
    """Token counts of one client's texts: the part each client computes locally (Sec. 5.1)."""
    counts: collections.Counter = collections.Counter()
    for text in texts:
        counts.update(tokenize(text))
    return counts


def merge_counts(counts: Sequence[collections.Counter]) -> collections.Counter:
    """Sums per-client token counts: the part the server computes (Li et al. 2021, Sec. 5.1)."""
    total: collections.Counter = collections.Counter()
    for c in counts:
        total.update(c)
    return total


def token_lengths(texts: Sequence[str]) -> np.ndarray:
    """Number of tokens of each text before clipping; int32 ``[n]``."""
    return np.asarray([len(tokenize(t)) for t in texts], dtype=np.int32).reshape(len(texts))


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """A word list; id ``i`` is ``words[i]``, ``words[0] == "<pad>"``, ``words[1] == "<unk>"``.

    Raises:
      ValueError: (on construction) the first two words are not ``<pad>``, ``<unk>``, or a
        word occurs twice.
    """

    words: tuple[str, ...]

    def __post_init__(self) -> None:
        if tuple(self.words[:2]) != (PAD_TOKEN, UNK_TOKEN):
            raise ValueError(f"words must start with {PAD_TOKEN!r}, {UNK_TOKEN!r}; "
                             f"got {tuple(self.words[:2])}")
        if len(set(self.words)) != len(self.words):
            dup = [w for w, c in collections.Counter(self.words).items() if c > 1][:5]
            raise ValueError(f"duplicate words in vocabulary: {dup}")

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """word -> id (cached)."""
        return {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    @classmethod
    def from_counts(cls, counts: collections.Counter, max_size: int = VOCAB_SIZE) -> Vocabulary:
        """Keeps the ``max_size`` most frequent words (Li et al. 2021, Sec. 5.1: 50000).

        Ties are broken by the word string (ascending), so the result is deterministic. Words
        with a count <= 0 and the special tokens themselves are never selected. The result has
        at most ``max_size + 2`` words (``<pad>``, ``<unk>`` first).

        Raises:
          ValueError: ``max_size < 1``.
        """
        if max_size < 1:
            raise ValueError(f"max_size must be >= 1, got {max_size}")
        candidates = [(w, c) for w, c in counts.items()
                      if c > 0 and w not in (PAD_TOKEN, UNK_TOKEN)]
        candidates.sort(key=lambda wc: (-wc[1], wc[0]))
        return cls((PAD_TOKEN, UNK_TOKEN) + tuple(w for w, _ in candidates[:max_size]))

    def encode(self, texts: Sequence[str], max_len: int) -> np.ndarray:
        """Token ids, clipped to the first ``max_len`` tokens and right-padded with ``PAD``.

        Unknown words map to ``UNK`` (Li et al. 2021, Sec. 5.1), and so does the text
        ``"<pad>"``: only the padding after the text is ``PAD``.

        Args:
          texts: ``n`` texts.
          max_len: the fixed length (200 for FDU, 400 for IYY in the paper).

        Returns:
          ids: int32 ``[n, max_len]``.

        Raises:
          ValueError: ``max_len < 1``.
        """
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        ids = np.full((len(texts), max_len), PAD, dtype=np.int32)
        index = self.index
        for row, text in enumerate(texts):
            toks = tokenize(text)[:max_len]
            # a literal "<pad>" in the text is a word, not padding: UNK, as any unknown word
            ids[row, : len(toks)] = [index.get(t, UNK) or UNK for t in toks]
        return ids

    def decode(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Words of ``ids`` (int ``[L]``), dropping ``PAD``.

        Raises:
          IndexError: an id outside ``[0, len(self))``.
        """
        out = []
        for i in np.asarray(ids).reshape(-1).tolist():
            if not 0 <= i < len(self.words):
                raise IndexError(f"id {i} outside vocabulary of size {len(self.words)}")
            if i != PAD:
                out.append(self.words[i])
        return out

    def to_json(self) -> str:
        """The word list as a JSON array (id order), for saving next to a run."""
        return json.dumps(list(self.words), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Vocabulary:
        """Inverse of ``to_json``.

        Raises:
          ValueError: not a JSON array of strings, or invalid as a vocabulary.
        """
        words = json.loads(text)
        if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
            raise ValueError("vocabulary JSON must be an array of strings")
        return cls(tuple(words))
