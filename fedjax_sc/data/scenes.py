"""FedMDSC scenes: every client's splits encoded with one federated vocabulary, stacked on a
leading client axis (Li et al. 2021, Sec. 5.1, Table 1). Host-side only (numpy)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fedjax_sc.data import corpus as corpus_lib
from fedjax_sc.data import synthetic
from fedjax_sc.data.corpus import FDU_DOMAINS, Corpus
from fedjax_sc.data.vocab import (
    PAD,
    UNK,
    VOCAB_SIZE,
    Vocabulary,
    count_tokens,
    merge_counts,
    token_lengths,
)

NUM_CLASSES = {"fdu": 2, "iyy": 5, "synthetic": 2}
"""C per built-in scene (binary sentiment; IYY's 1-5 stars; Li et al. 2021, Table 1)."""
MAX_LEN = {"fdu": 200, "iyy": 400, "synthetic": synthetic.MAX_LEN}
"""L, the reviews' length in tokens, per built-in scene (Li et al. 2021, Sec. 5.2: 200 on
FDU, 400 on IYY; short texts on the synthetic scene, so that it trains in seconds)."""


@dataclasses.dataclass(frozen=True, eq=False)
class ClientArrays:
    """One split of every client, stacked on a leading client axis, padded to the largest client.

    Attributes:
      tokens: int32 ``[num_clients, max_examples, max_len]``, ``PAD`` (0) right padding.
      labels: int32 ``[num_clients, max_examples]``, 0 on padded rows.
      mask: bool ``[num_clients, max_examples]``, True for real examples (a prefix per client).
      counts: int32 ``[num_clients]``, N^k: the number of real examples of client k.
    """

    tokens: np.ndarray
    labels: np.ndarray
    mask: np.ndarray
    counts: np.ndarray

    @property
    def num_clients(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def max_examples(self) -> int:
        return int(self.tokens.shape[1])

    def pooled(self) -> ClientArrays:
        """Every client's real examples pooled into one client (client 0's first, in order):
        the FS baseline's training set (Li et al. 2021, Sec. 5.4). Shapes ``[1, sum N^k,
        max_len]``; nothing is dropped or duplicated."""
        ids = [self.tokens[k, :n] for k, n in enumerate(self.counts)]
        labels = [self.labels[k, :n] for k, n in enumerate(self.counts)]
        return ClientArrays.stack([np.concatenate(ids)], [np.concatenate(labels)],
                                  self.tokens.shape[2])

    @classmethod
    def stack(cls, ids: Sequence[np.ndarray], labels: Sequence[np.ndarray],
              max_len: int, max_examples: int | None = None) -> ClientArrays:
        """Stacks per-client ``ids`` int32 ``[n_k, max_len]`` and ``labels`` int ``[n_k]``,
        padded to ``max_examples`` rows (default: the largest ``n_k``).

        Raises:
          ValueError: mismatched shapes, no clients, or a client of more than
            ``max_examples`` examples.
        """
        if not ids or len(ids) != len(labels):
            raise ValueError(f"need >= 1 client and as many labels, got {len(ids)}/{len(labels)}")
        counts = np.asarray([len(x) for x in ids], dtype=np.int32)
        n_max = int(counts.max()) if max_examples is None else int(max_examples)
        if counts.max() > n_max:
            raise ValueError(f"a client of {counts.max()} examples exceeds max_examples {n_max}")
        tokens = np.full((len(ids), n_max, max_len), PAD, dtype=np.int32)
        lab = np.zeros((len(ids), n_max), dtype=np.int32)
        for k, (x, y) in enumerate(zip(ids, labels)):
            if x.shape != (len(y), max_len):
                raise ValueError(f"client {k}: ids {x.shape} vs labels {len(y)}, max_len {max_len}")
            tokens[k, : len(x)] = x
            lab[k, : len(y)] = y
        mask = np.arange(n_max)[None, :] < counts[:, None]
        return cls(tokens=tokens, labels=lab, mask=mask, counts=counts)


@dataclasses.dataclass(frozen=True, eq=False)
class Scene:
    """A federated scene: K clients, their train/test(/dev) arrays and the shared vocabulary.

    Attributes:
      name: ``"fdu"``, ``"iyy"``, ``"synthetic"``, ...
      client_names: the K client names, in client-axis order.
      train, test: ``ClientArrays`` of each split (N^k and M^k in Table 1).
      dev: ``ClientArrays`` of the held-out dev split, or None.
      vocab: the federated global vocabulary (``len(vocab)`` = V).
      num_classes: C.
      max_len: the clip/pad length L of every sequence.
      stats: per client, a dict with ``n_train``, ``n_test``, ``n_dev`` (0 without dev),
        ``n_empty`` and ``n_latin1_lines`` (over all splits), ``avg_len`` and ``n_clipped``
        (tokens before clipping, over the train split), and ``local_vocab_size`` (V^k: distinct
        word ids other than ``<pad>``/``<unk>`` in the client's clipped train sequences) and
        ``train_label_counts`` (``[C]`` examples per class in the train split).
      label_names: the label value of each class as the data wrote it (class c =
        ``label_names[c]``; the table scene), or None (the labels are the class ids).
    """

    name: str
    client_names: tuple[str, ...]
    train: ClientArrays
    test: ClientArrays
    dev: ClientArrays | None
    vocab: Vocabulary
    num_classes: int
    max_len: int
    stats: tuple[dict, ...]
    label_names: tuple | None = None
    share: tuple[int, int] | None = None
    """``(first, stop)`` when ``train``, ``test`` and ``dev`` hold only the clients
    ``first..stop-1`` of ``client_names`` (one process's share of a scene,
    :mod:`fedjax_sc.run.loading`); None: every client. ``client_names``, ``vocab`` and
    ``stats`` are the whole scene's either way."""
    unseen: ClientArrays | None = None
    """The test rows of clients that have no training rows (cross-device table scenes),
    pooled as one client ``[1, n, max_len]``; None when there are none. They are evaluated
    apart (Ag_unseen), never trained on."""
    allow_no_test: bool = False
    """True when clients without test examples train and are left out of Ag (cross-device
    table scenes, :func:`build_scene`'s ``allow_no_test``)."""
    notes: tuple[str, ...] = ()
    """Lines the reader of the data has for the run's log beyond the sizes (the table scene:
    the rows without text it left out)."""

    @property
    def num_clients(self) -> int:
        return len(self.client_names)

    def counts(self, split: str = "train") -> np.ndarray:
        """N^k (``train``), M^k (``test``) or the dev sizes of every client, int32 ``[K]``
        (from :attr:`stats`, so also for a share).

        Raises:
          KeyError: another split.
        """
        key = {"train": "n_train", "test": "n_test", "dev": "n_dev"}[split]
        arrays = getattr(self, split)
        if self.share is None and arrays is not None:
            return np.asarray(arrays.counts, np.int32)
        return np.asarray([st[key] for st in self.stats], np.int32).reshape(len(self.stats))


def local_vocabularies(train: ClientArrays) -> tuple[np.ndarray, np.ndarray]:
    """Per client, the sorted distinct token ids of its real train examples (paper Remark 3: V^k).

    ``PAD`` (0) and ``UNK`` (1) are always included, so each row starts ``0, 1``.

    Args:
      train: the train ``ClientArrays`` (tokens int32 ``[K, N, L]``).

    Returns:
      ids: int32 ``[K, V_loc_max]``, padded with ``PAD`` after each client's ids.
      mask: bool ``[K, V_loc_max]``, True on real entries.
    """
    per_client = []
    for k in range(train.num_clients):
        real = train.tokens[k][train.mask[k]]
        per_client.append(np.union1d(np.asarray([PAD, UNK], np.int32), real).astype(np.int32))
    width = max(len(v) for v in per_client)
    ids = np.full((len(per_client), width), PAD, dtype=np.int32)
    mask = np.zeros((len(per_client), width), dtype=bool)
    for k, v in enumerate(per_client):
        ids[k, : len(v)] = v
        mask[k, : len(v)] = True
    return ids, mask


def build_scene(name: str, client_corpora: Mapping[str, Mapping[str, Corpus]], num_classes: int,
                max_len: int, vocab_size: int, allow_empty: bool = False,
                label_names: Sequence | None = None, allow_no_test: bool = False,
                unseen: Corpus | None = None, notes: Sequence[str] = ()) -> Scene:
    """Builds a scene exactly as Li et al. 2021, Sec. 5.1.

    Each client counts the tokens of its OWN train split (``count_tokens``), the server sums
    the counts (``merge_counts``) and keeps the ``vocab_size`` most frequent words plus
    ``<pad>``/``<unk>``; every split is encoded, clipped/padded to ``max_len`` and stacked.

    Args:
      name: the scene name.
      client_corpora: ``{client: {"train": Corpus, "test": Corpus[, "dev": Corpus]}}``; either
        every client has ``"dev"`` or none does.
      num_classes: C; every label must lie in ``[0, C)``.
      max_len: clip/pad length.
      vocab_size: number of words kept (V = at most ``vocab_size + 2``).
      allow_empty: keep a client whose train or test split has no example (it then trains
        nothing, or has no Ag^k / Ap^k and is left out of the means); False refuses it.
      label_names: the label value of each class (``num_classes`` of them), or None.
      allow_no_test: keep a client without test examples (it trains; no Ag^k), as
        ``allow_empty`` does for the test split only (cross-device scenes).
      notes: lines for the run's log (:attr:`Scene.notes`).
      unseen: test examples of clients that never train (:attr:`Scene.unseen`), or None.

    Raises:
      ValueError: no clients, missing/unknown splits, inconsistent dev splits, a label outside
        ``[0, num_classes)`` (names client and split), a train or test split without examples
        (names its file; unless ``allow_empty``), no training or no test example at all,
        ``max_len < 1``, ``num_classes < 1`` or ``vocab_size < 1``, ``label_names`` not of
        length ``num_classes``.
    """
    if not client_corpora:
        raise ValueError("client_corpora is empty")
    if label_names is not None and len(label_names) != num_classes:
        raise ValueError(f"{len(label_names)} label names for {num_classes} classes")
    names = tuple(client_corpora)
    splits = check_corpora(client_corpora, num_classes, max_len, allow_empty, allow_no_test)
    extra = {"train": 0, "test": 0 if unseen is None else len(unseen)}
    for s in ("train", "test"):
        if not extra[s] and not any(len(client_corpora[c][s]) for c in names):
            raise ValueError(f"no client has any {s} example")
    local_counts = [count_tokens(client_corpora[c]["train"].texts) for c in names]
    vocab = Vocabulary.from_counts(merge_counts(local_counts), max_size=vocab_size)
    arrays = encode_splits(client_corpora, splits, vocab, max_len)
    stats = client_stats(client_corpora, splits, arrays["train"], max_len, num_classes)
    held = None
    if unseen is not None and len(unseen):
        held = ClientArrays.stack([vocab.encode(unseen.texts, max_len)], [unseen.labels],
                                  max_len)
    return Scene(name=name, client_names=names, train=arrays["train"], test=arrays["test"],
                 dev=arrays.get("dev"), vocab=vocab, num_classes=num_classes, max_len=max_len,
                 stats=tuple(stats),
                 label_names=None if label_names is None else tuple(label_names),
                 unseen=held, allow_no_test=allow_no_test, notes=tuple(notes))


def check_corpora(client_corpora: Mapping[str, Mapping[str, Corpus]], num_classes: int,
                  max_len: int, allow_empty: bool = False,
                  allow_no_test: bool = False) -> tuple[str, ...]:
    """The checks of :func:`build_scene` that each client's corpora pass alone (not that
    some client has examples of each split); returns the splits, ``("train", "test")`` or
    ``("train", "test", "dev")``.

    Raises:
      ValueError: as :func:`build_scene` says.
    """
    if max_len < 1 or num_classes < 1:
        raise ValueError(f"need max_len >= 1 and num_classes >= 1, got {max_len}, {num_classes}")
    names = tuple(client_corpora)
    has_dev = {"dev" in client_corpora[c] for c in names}
    if len(has_dev) != 1:
        raise ValueError("either every client has a 'dev' split or none does")
    splits = ("train", "test", "dev") if has_dev.pop() else ("train", "test")
    for c in names:
        if set(client_corpora[c]) != set(splits):
            raise ValueError(f"client {c!r}: splits {sorted(client_corpora[c])}, "
                             f"expected {sorted(splits)}")
        for s in splits:
            labels = client_corpora[c][s].labels
            empty_ok = allow_empty or (s == "test" and allow_no_test)
            if s in ("train", "test") and not len(labels) and not empty_ok:
                raise ValueError(f"{client_corpora[c][s].source}: no examples (client {c!r}, "
                                 f"split {s!r}); every client needs training and test "
                                 f"examples (--allow-empty-clients keeps it: it then trains "
                                 f"nothing or is left out of the averages)")
            bad = labels[(labels < 0) | (labels >= num_classes)]
            if bad.size:
                raise ValueError(f"client {c!r} split {s!r}: labels {np.unique(bad)[:5].tolist()} "
                                 f"outside [0, {num_classes})")
    return splits


def encode_splits(client_corpora: Mapping[str, Mapping[str, Corpus]], splits: Sequence[str],
                  vocab: Vocabulary, max_len: int,
                  max_examples: Mapping[str, int] | None = None) -> dict[str, ClientArrays]:
    """Every split of the clients encoded with ``vocab``, clipped/padded to ``max_len`` and
    stacked (:meth:`ClientArrays.stack`); ``max_examples`` (split -> n) pads the example axis
    to n rows (a process's share padded as the whole scene is; default: its largest client).
    """
    arrays = {}
    for s in splits:
        corpora = [client_corpora[c][s] for c in client_corpora]
        arrays[s] = ClientArrays.stack([vocab.encode(x.texts, max_len) for x in corpora],
                                       [x.labels for x in corpora], max_len,
                                       None if max_examples is None else max_examples[s])
    return arrays


def client_stats(client_corpora: Mapping[str, Mapping[str, Corpus]], splits: Sequence[str],
                 train: ClientArrays, max_len: int, num_classes: int) -> list[dict]:
    """:attr:`Scene.stats` of the clients (``train``: their encoded train split)."""
    loc_ids, loc_mask = local_vocabularies(train)
    stats = []
    for k, c in enumerate(client_corpora):
        parts = client_corpora[c]
        lengths = token_lengths(parts["train"].texts)
        stats.append({
            "client": c,
            "n_train": len(parts["train"]),
            "n_test": len(parts["test"]),
            "n_dev": len(parts["dev"]) if "dev" in parts else 0,
            "n_empty": sum(parts[s].num_empty for s in splits),
            "n_latin1_lines": sum(parts[s].num_latin1_lines for s in splits),
            "avg_len": float(lengths.mean()) if lengths.size else 0.0,
            "n_clipped": int((lengths > max_len).sum()),
            "local_vocab_size": int(np.sum(loc_mask[k] & (loc_ids[k] > UNK))),
            "train_label_counts": np.bincount(parts["train"].labels,
                                              minlength=num_classes).tolist(),
        })
    return stats


def fdu_scene(data_dir: str | Path, max_len: int = MAX_LEN["fdu"],
              vocab_size: int = VOCAB_SIZE,
              dev_holdout: bool = False, domains: Sequence[str] = FDU_DOMAINS) -> Scene:
    """The FDU scene: 16 binary-sentiment clients (Li et al. 2021, Sec. 5.1, Table 1).

    Raises:
      FileNotFoundError, ValueError: see ``corpus.read_fdu`` and ``build_scene``.
    """
    corpora = corpus_lib.read_fdu(data_dir, domains=domains, dev_holdout=dev_holdout)
    return build_scene("fdu", corpora, num_classes=NUM_CLASSES["fdu"], max_len=max_len,
                       vocab_size=vocab_size)


def iyy_scene(data_dir: str | Path, max_len: int = MAX_LEN["iyy"],
              vocab_size: int = VOCAB_SIZE,
              dev_holdout: bool = False) -> Scene:
    """The IYY scene: IMDB, Yelp13, Yelp14 with 5 classes (Li et al. 2021, Sec. 5.1, Table 1).

    Raises:
      FileNotFoundError, ValueError: see ``corpus.read_iyy`` and ``build_scene``.
    """
    corpora = corpus_lib.read_iyy(data_dir, dev_holdout=dev_holdout)
    return build_scene("iyy", corpora, num_classes=NUM_CLASSES["iyy"], max_len=max_len,
                       vocab_size=vocab_size)


def synthetic_scene(num_clients: int = synthetic.NUM_CLIENTS,
                    train_per_client: int = synthetic.TRAIN_PER_CLIENT,
                    test_per_client: int = synthetic.TEST_PER_CLIENT,
                    max_len: int = MAX_LEN["synthetic"], seed: int = 0,
                    label_noise: float = 0.1, dev_per_client: int = 0,
                    vocab_size: int = VOCAB_SIZE, **kwargs) -> Scene:
    """A deterministic multi-domain binary sentiment scene generated as text: the corpora of
    :func:`fedjax_sc.data.synthetic.synthetic_corpora` (same arguments; ``kwargs`` its
    generator settings) through ``build_scene`` with ``vocab_size`` words.

    Returns:
      A ``Scene`` named ``"synthetic"`` with ``num_classes = 2``.
    """
    corpora = synthetic.synthetic_corpora(
        num_clients=num_clients, train_per_client=train_per_client,
        test_per_client=test_per_client, max_len=max_len, seed=seed, label_noise=label_noise,
        dev_per_client=dev_per_client, **kwargs)
    return build_scene("synthetic", corpora, num_classes=NUM_CLASSES["synthetic"],
                       max_len=max_len, vocab_size=vocab_size)
