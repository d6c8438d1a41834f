"""Readers for the two FedMDSC scenes of Li et al. 2021 (Sec. 5.1, Table 1): FDU and IYY.

Host-side only (numpy). Both readers are strict: every line of a file becomes one example or a
``ValueError`` that names ``path:lineno`` (1-based) and the offending content. Nothing is skipped
silently; empty texts are kept and counted, non-UTF-8 lines are decoded as latin-1 and counted.

Every file read is logged at DEBUG level on the logger ``fedjax_sc.data.corpus`` (``reading
PATH``); ``FEDJAX_SC_LOG_LEVEL=DEBUG`` shows these lines on stderr of ``fedjax-sc``.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path

import numpy as np

_log = logging.getLogger(__name__)

# Paper Table 1 order (Li et al. 2021): 14 Amazon product domains, then IMDB and MR.
FDU_DOMAINS: tuple[str, ...] = (
    "apparel", "baby", "books", "camera_photo", "dvd", "electronics", "health_personal_care",
    "kitchen_housewares", "magazines", "music", "software", "sports_outdoors", "toys_games",
    "video", "imdb", "MR",
)
# Number of trailing ``.task.train`` lines that form the original release's dev split.
FDU_DEV_LINES = 200

# IYY scene (Li et al. 2021, Table 1): the document-level files of Tang et al. 2015.
IYY_FILES: dict[str, tuple[str, str]] = {
    "imdb": ("imdb.train.txt.ss", "imdb.test.txt.ss"),
    "yelp13": ("yelp-2013-seg-20-20.train.ss", "yelp-2013-seg-20-20.test.ss"),
    "yelp14": ("yelp-2014-seg-20-20.train.ss", "yelp-2014-seg-20-20.test.ss"),
}
# Rating levels per IYY client: IMDB has 10, Yelp 5 (Li et al. 2021, Sec. 5.1).
IYY_LEVELS: dict[str, int] = {"imdb": 10, "yelp13": 5, "yelp14": 5}
IYY_SENTENCE_MARK = "<sssss>"

_INT_RE = re.compile(r"[+-]?[0-9]+")


@dataclasses.dataclass(frozen=True, eq=False)
class Corpus:
    """Labelled texts read from one file (or a contiguous slice of one file).

    Attributes:
      texts: the ``n`` texts, in file order; empty texts are kept.
      labels: int32 ``[n]`` class ids.
      source: the file path; a slice is written ``"path[a:b]"`` (Python slice of its lines).
      num_empty: number of texts with no whitespace-separated token.
      num_latin1_lines: number of lines that were not valid UTF-8 and were decoded as latin-1.

    Raises:
      ValueError: ``labels`` not int32 ``[n]`` (names the source).
    """

    texts: tuple[str, ...]
    labels: np.ndarray
    source: str
    num_empty: int
    num_latin1_lines: int

    def __post_init__(self) -> None:
        if self.labels.dtype != np.int32 or self.labels.shape != (len(self.texts),):
            raise ValueError(
                f"labels must be int32 [{len(self.texts)}], got {self.labels.dtype} "
                f"{self.labels.shape} ({self.source})")

    def __len__(self) -> int:
        return len(self.texts)


def _snippet(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _read_lines(path: str | Path) -> Iterator[tuple[int, str, bool]]:
    """Yields ``(lineno, line, was_latin1)`` per line, in file order; raises on blank lines.

    Lines are split on ``b"\\n"`` only (never on other Unicode separators) and a trailing
    ``"\\r"`` is stripped. The empty string after a final newline is not a line. Because the
    lines are yielded one by one, a caller that checks each line reports the first bad line of
    the file, whatever is wrong with it (a binary file fails at its first line, not at its
    first blank one).

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: a blank line that is not the end of the file (``"path:lineno"``).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    _log.debug("reading %s", path)
    data = path.read_bytes()
    raw = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")  # a UTF-8 byte-order mark
    if raw[-1] == b"":
        raw.pop()
    for lineno, line in enumerate(raw, start=1):
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            raise ValueError(f"{path}:{lineno}: blank line")
        try:
            yield lineno, line.decode("utf-8"), False
        except UnicodeDecodeError:
            yield lineno, line.decode("latin-1"), True


def _parse_int(field: str, allowed: Collection[int], where: str, line: str, what: str) -> int:
    if not _INT_RE.fullmatch(field) or int(field) not in allowed:
        raise ValueError(
            f"{where}: {what} {field!r} is not an integer in {sorted(allowed)}: {_snippet(line)}")
    return int(field)


def _make_corpus(rows: Sequence[tuple[str, int, bool]], source: str) -> Corpus:
    texts = tuple(text for text, _, _ in rows)
    return Corpus(
        texts=texts,
        labels=np.asarray([label for _, label, _ in rows], dtype=np.int32).reshape(len(rows)),
        source=source,
        num_empty=sum(1 for t in texts if not t.split()),
        num_latin1_lines=sum(1 for _, _, latin1 in rows if latin1),
    )


def _split_rows(rows: list, n_tail: int, path: Path, what: str) -> tuple[Corpus, Corpus]:
    """Splits parsed rows into (head, last ``n_tail``) corpora; raises if nothing is left."""
    if not 0 < n_tail < len(rows):
        raise ValueError(f"{path}: cannot hold out {n_tail} {what} lines from {len(rows)} lines")
    cut = len(rows) - n_tail
    return (_make_corpus(rows[:cut], f"{path}[:{cut}]"),
            _make_corpus(rows[cut:], f"{path}[{cut}:]"))


def _require_dir(data_dir: str | Path) -> Path:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data directory {data_dir} not found")
    return data_dir


# ----------------------------------------------------------------------------------------- FDU


def _parse_fdu(path: str | Path, labels: Collection[int]) -> list[tuple[str, int, bool]]:
    rows = []
    for lineno, line, latin1 in _read_lines(path):
        where = f"{path}:{lineno}"
        label, tab, text = line.partition("\t")
        if not tab:
            raise ValueError(f"{where}: no tab between label and text: {_snippet(line)}")
        rows.append((text, _parse_int(label, labels, where, line, "label"), latin1))
    return rows


def read_fdu_file(path: str | Path, labels: Collection[int] = (0, 1)) -> Corpus:
    """Reads one FDU-MTL file, one ``label<TAB>text`` review per line (Li et al. 2021, Sec. 5.1).

    The line is split on its first tab; the text may be empty (kept, counted in ``num_empty``).
    A line that is not valid UTF-8 is decoded as latin-1 (counted in ``num_latin1_lines``).

    Args:
      path: a ``<domain>.task.train`` or ``<domain>.task.test`` file.
      labels: the allowed integer labels.

    Returns:
      A ``Corpus`` with one example per line, ``labels`` int32 ``[n]``.

    Raises:
      FileNotFoundError: ``path`` does not exist (message names it).
      ValueError: a blank line before the end of the file, a line without a tab, or a label
        that is not an integer in ``labels``; the message holds ``"path:lineno"`` (1-based) and
        the line, truncated to 60 characters.
    """
    return _make_corpus(_parse_fdu(path, labels), str(path))


def fdu_domains_in(data_dir: str | Path) -> tuple[str, ...]:
    """Sorted domain names ``d`` for which ``data_dir/d.task.train`` exists."""
    return tuple(sorted(p.name[: -len(".task.train")]
                        for p in Path(data_dir).glob("*.task.train")))


def read_fdu(data_dir: str | Path, domains: Sequence[str] = FDU_DOMAINS,
             dev_holdout: bool = False) -> dict[str, dict[str, Corpus]]:
    """Reads the FDU scene: one client per domain (Li et al. 2021, Sec. 5.1, Table 1).

    Paper split: ``train`` is the whole ``<domain>.task.train`` file (it includes the original
    release's 200 dev lines, matching Table 1's N^k = 1600, 1500, 1597, ...) and ``test`` is
    ``<domain>.task.test`` (M^k = 400). With ``dev_holdout=True`` the last 200 lines of
    ``.task.train`` become ``dev`` and ``train`` is the rest (not what the paper does).

    Args:
      data_dir: directory holding ``<domain>.task.{train,test}``.
      domains: the domains (clients) to read, in client order.
      dev_holdout: hold out the last 200 train lines as a ``dev`` split.

    Returns:
      ``{domain: {"train": Corpus, "test": Corpus[, "dev": Corpus]}}`` in ``domains`` order.

    Raises:
      FileNotFoundError: ``data_dir`` is missing, or a domain file is missing (the message
        lists the domains found in ``data_dir``).
      ValueError: a malformed line (see ``read_fdu_file``) or a train file of <= 200 lines
        when ``dev_holdout``.
    """
    data_dir = _require_dir(data_dir)
    for domain in domains:
        for split in ("train", "test"):
            path = data_dir / f"{domain}.task.{split}"
            if not path.is_file():
                found = ", ".join(fdu_domains_in(data_dir)) or "none"
                raise FileNotFoundError(
                    f"{path} not found; domains found in {data_dir}: {found}")
    out: dict[str, dict[str, Corpus]] = {}
    for domain in domains:
        train_path = data_dir / f"{domain}.task.train"
        test = read_fdu_file(data_dir / f"{domain}.task.test")
        rows = _parse_fdu(train_path, (0, 1))
        if dev_holdout:
            train, dev = _split_rows(rows, FDU_DEV_LINES, train_path, "dev")
            out[domain] = {"train": train, "dev": dev, "test": test}
        else:
            out[domain] = {"train": _make_corpus(rows, str(train_path)), "test": test}
    return out


# ----------------------------------------------------------------------------------------- IYY


def _parse_iyy(path: str | Path, client: str) -> list[tuple[str, int, bool]]:
    if client not in IYY_LEVELS:
        raise ValueError(f"unknown IYY client {client!r}; expected one of {sorted(IYY_LEVELS)}")
    levels = IYY_LEVELS[client]
    rows = []
    for lineno, line, latin1 in _read_lines(path):
        where = f"{path}:{lineno}"
        fields = line.split("\t\t")
        if len(fields) != 4:
            raise ValueError(f"{where}: expected 4 fields (user, product, rating, text) "
                             f"separated by two tabs, got {len(fields)}: {_snippet(line)}")
        rating = _parse_int(fields[2], range(1, levels + 1), where, line, "rating")
        text = " ".join(t for t in fields[3].split() if t != IYY_SENTENCE_MARK)
        # IMDB: 10 levels merged pairwise into 5 (Sec. 5.1); Yelp: 1..5 -> 0..4.
        label = (rating - 1) // 2 if levels == 10 else rating - 1
        rows.append((text, label, latin1))
    return rows


def read_iyy_file(path: str | Path, client: str) -> Corpus:
    """Reads one IYY file of Tang et al. 2015 (Li et al. 2021, Sec. 5.1, Table 1).

    Format: one document per line, ``user\\t\\tproduct\\t\\trating\\t\\ttext``. The text's
    sentences are joined by ``" <sssss> "``; these ``<sssss>`` tokens are sentence-boundary
    markers, not words, so they are removed and whitespace is normalised to single spaces
    (the paper splits reviews on spaces only and does not say it keeps them).

    Labels (5 classes): IMDB ratings 1..10 are merged pairwise, ``label = (rating - 1) // 2``
    (Sec. 5.1: "merging two successive levels"); Yelp ratings 1..5 give ``label = rating - 1``.

    Args:
      path: the file.
      client: ``"imdb"``, ``"yelp13"`` or ``"yelp14"`` (selects the rating range).

    Returns:
      A ``Corpus``; ``labels`` int32 ``[n]`` in ``[0, 5)``.

    Raises:
      FileNotFoundError: ``path`` does not exist.
      ValueError: unknown ``client``; or, with ``"path:lineno"`` and the line, a blank line
        before the end, a field count other than 4, or a rating that is not an integer in
        ``1..10`` (IMDB) / ``1..5`` (Yelp).
    """
    return _make_corpus(_parse_iyy(path, client), str(path))


def read_iyy(data_dir: str | Path, clients: Sequence[str] = ("imdb", "yelp13", "yelp14"),
             dev_holdout: bool = False) -> dict[str, dict[str, Corpus]]:
    """Reads the IYY scene, one client per corpus (Li et al. 2021, Sec. 5.1, Table 1).

    ``train``/``test`` are the files of ``IYY_FILES``. With ``dev_holdout=True`` the last
    ``len(train) // 10`` train lines (10%, rounded down) become ``dev`` and ``train`` is the
    rest; the paper uses no validation set.

    Returns:
      ``{client: {"train": Corpus, "test": Corpus[, "dev": Corpus]}}`` in ``clients`` order.

    Raises:
      FileNotFoundError: ``data_dir`` or a client file is missing (the message lists the
        ``*.ss`` files found in ``data_dir``).
      ValueError: unknown client, malformed line (see ``read_iyy_file``), or a train file of
        fewer than 10 lines when ``dev_holdout``.
    """
    data_dir = _require_dir(data_dir)
    for client in clients:
        if client not in IYY_FILES:
            raise ValueError(f"unknown IYY client {client!r}; expected one of {sorted(IYY_FILES)}")
        for name in IYY_FILES[client]:
            if not (data_dir / name).is_file():
                found = ", ".join(sorted(p.name for p in data_dir.glob("*.ss"))) or "none"
                raise FileNotFoundError(
                    f"{data_dir / name} not found; .ss files found in {data_dir}: {found}")
    out: dict[str, dict[str, Corpus]] = {}
    for client in clients:
        train_path, test_path = (data_dir / name for name in IYY_FILES[client])
        test = read_iyy_file(test_path, client)
        rows = _parse_iyy(train_path, client)
        if dev_holdout:
            train, dev = _split_rows(rows, len(rows) // 10, train_path, "dev")
            out[client] = {"train": train, "dev": dev, "test": test}
        else:
            out[client] = {"train": _make_corpus(rows, str(train_path)), "test": test}
    return out
