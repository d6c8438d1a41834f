"""Non-IID partitioners: a pooled corpus split into N synthetic clients (FedNLP, Lin et al. 2022,
Sec. 3.2 and App. C). Host-side only (numpy), seeded and deterministic.

* ``natural``: one client per domain (the FDU / IYY scenes of Li et al. 2021 as they are).
* ``dirichlet_label`` (label skew): client j's label distribution is ``q_j ~ Dir(alpha * p)``
  with ``p`` the pooled training set's empirical label prior; its examples are drawn without
  replacement from the pool according to ``q_j``. When a label runs out, the vacancy is filled
  with the other labels in proportion to what is left of them ("dynamic re-assigning", App. C),
  so every example is assigned exactly once and no client is dropped. alpha -> infinity: every
  client has the prior; alpha -> 0: every client holds (nearly) one class.
* ``dirichlet_quantity`` (quantity skew): client sizes ``|D_j| = z_j |D|`` with
  ``z ~ Dir_N(beta)``; beta -> infinity gives equal sizes.
* Both combined: give ``beta`` to ``dirichlet_label`` (or ``alpha`` to ``dirichlet_quantity``).
* ``iid`` and ``dirichlet``: flwr-datasets' ``IidPartitioner`` and ``DirichletPartitioner``
  (Beutel et al., Flower Datasets; :mod:`fedjax_sc.data.flwr_partition`), applied as
  ``FederatedDataset`` applies them: the split shuffled with the seed first.

The draws ``q`` and ``z`` form a :class:`PartitionPlan`, drawn once from the training labels and
applied to every split: client j's test set has the same label proportions and the same share
of the test pool as its training set ("the test split partitioned the same way").

Every client gets at least ``min_size`` examples of each split (default 1: a client without
training data has nothing to train or evaluate); the rest is allocated by largest remainders of
``z * (n - N * min_size)``. This floor is this library's choice (FedNLP does not say what a
client with ``z_j |D| < 1`` gets); it changes sizes by at most ``min_size``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from fedjax_sc import streams
from fedjax_sc.data import flwr_partition
from fedjax_sc.data.corpus import Corpus

PARTITIONS = ("natural", "dirichlet_label", "dirichlet_quantity", "iid", "dirichlet")
FEDNLP_PARTITIONS = ("dirichlet_label", "dirichlet_quantity")
"""FedNLP's partitions (:func:`repartition`)."""
FLWR_PARTITIONS = ("iid", "dirichlet")
"""flwr-datasets' partitioners (:mod:`fedjax_sc.data.flwr_partition`)."""


class PartitionPlan(NamedTuple):
    """The random part of a Dirichlet partition, shared by all splits.

    Attributes:
      label_proportions: float64 ``[N, C]``, client j's label distribution ``q_j`` (rows sum
        to 1); every row equals the prior without label skew.
      size_shares: float64 ``[N]``, ``z`` (sums to 1); uniform without quantity skew.
    """

    label_proportions: np.ndarray
    size_shares: np.ndarray


def label_prior(labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Empirical label distribution ``p``: float64 ``[num_classes]`` summing to 1.

    Raises:
      ValueError: no labels, or a label outside ``[0, num_classes)``.
    """
    labels = np.asarray(labels)
    if labels.size == 0:
        raise ValueError("cannot take the label prior of an empty split")
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"labels must lie in [0, {num_classes}), got "
                         f"[{labels.min()}, {labels.max()}]")
    return np.bincount(labels, minlength=num_classes) / labels.size


def make_plan(num_clients: int, prior: np.ndarray, *, alpha: float | None = None,
              beta: float | None = None, seed: int = 0) -> PartitionPlan:
    """Draws ``q_j ~ Dir(alpha * p)`` for each client and ``z ~ Dir_N(beta)``.

    Args:
      num_clients: N >= 1.
      prior: float ``[C]``, the label prior p (classes with p = 0 get q = 0).
      alpha: label concentration (> 0); None: no label skew (q_j = p).
      beta: quantity concentration (> 0); None: equal shares.
      seed: the partition seed.

    Raises:
      ValueError: N < 1, alpha or beta <= 0, or a prior that does not sum to 1.
    """
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    for name, value in (("alpha", alpha), ("beta", beta)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    prior = np.asarray(prior, np.float64)
    if prior.ndim != 1 or np.any(prior < 0) or not np.isclose(prior.sum(), 1.0):
        raise ValueError(f"prior must be a distribution over classes, got {prior}")
    rng = np.random.default_rng([seed, 0])
    q = np.tile(prior, (num_clients, 1))
    if alpha is not None:
        present = prior > 0
        q[:, present] = rng.dirichlet(alpha * prior[present], size=num_clients)
        q[:, ~present] = 0.0
    z = (np.full(num_clients, 1.0 / num_clients) if beta is None
         else rng.dirichlet(np.full(num_clients, float(beta))))
    return PartitionPlan(q, z)


def allocate(total: int, shares: np.ndarray, min_size: int = 1) -> np.ndarray:
    """Integer sizes summing to ``total``: ``min_size`` each, the rest by largest remainders
    of ``shares * (total - N * min_size)``.

    Returns:
      int64 ``[N]``.

    Raises:
      ValueError: ``total < N * min_size``.
    """
    n = len(shares)
    rest = total - n * min_size
    if rest < 0:
        raise ValueError(f"{total} examples cannot give {n} clients {min_size} each")
    exact = np.asarray(shares, np.float64) * rest
    sizes = np.floor(exact).astype(np.int64)
    left = rest - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:left]] += 1
    return sizes + min_size


def assign(plan: PartitionPlan, labels: np.ndarray, seed: int = 0,
           min_size: int = 1) -> list[np.ndarray]:
    """Assigns every example of one split to a client as the plan says.

    Client j, in order, takes ``allocate(n, z)[j]`` examples, ``size * q_j`` of each label
    rounded by largest remainders (the expected counts of FedNLP's categorical draw, without
    its sampling noise, which would pile up on the last clients), clipped to what is left of
    each label; a shortfall is drawn from the other labels in proportion to their remaining
    examples (FedNLP App. C). Within a label the examples are taken in a seeded random order.

    Args:
      plan: the :class:`PartitionPlan`.
      labels: int ``[n]`` the split's labels (C = the plan's number of classes).
      seed: seed of this split's draws.
      min_size: examples every client gets at least.

    Returns:
      N sorted int64 index arrays; together they hold each of ``0..n-1`` exactly once.

    Raises:
      ValueError: a label outside the plan's classes, or too few examples for N clients.
    """
    labels = np.asarray(labels)
    num_classes = plan.label_proportions.shape[1]
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes})")
    rng = np.random.default_rng(seed)
    pools = [rng.permutation(np.flatnonzero(labels == c)) for c in range(num_classes)]
    used = np.zeros(num_classes, np.int64)
    left = np.asarray([len(p) for p in pools], np.int64)
    out = []
    for size, q in zip(allocate(len(labels), plan.size_shares, min_size),
                       plan.label_proportions):
        take = np.minimum(allocate(int(size), q / q.sum(), min_size=0), left)
        while (short := size - int(take.sum())) > 0:  # re-assign a label that ran out
            avail = left - take
            take += np.minimum(rng.multinomial(short, avail / avail.sum()), avail)
        out.append(np.sort(np.concatenate(
            [pools[c][used[c]:used[c] + take[c]] for c in range(num_classes)])))
        used += take
        left -= take
    return out


def repartition(client_corpora: Mapping[str, Mapping[str, Corpus]], partition: str,
                num_clients: int, num_classes: int, *, alpha: float | None = None,
                beta: float | None = None, seed: int = 0,
                min_size: int = 1) -> dict[str, dict[str, Corpus]]:
    """Pools every domain's splits and partitions them into ``num_clients`` clients.

    Args:
      client_corpora: ``{domain: {split: Corpus}}`` as ``corpus.read_fdu`` returns.
      partition: ``dirichlet_label`` (needs ``alpha``) or ``dirichlet_quantity`` (needs
        ``beta``); the other parameter, if given, combines both skews.
      num_clients: N.
      num_classes: C.
      alpha, beta: the Dirichlet concentrations.
      seed: the partition seed (plan and every split's draws).
      min_size: examples every client gets at least, in every split.

    Returns:
      ``{"client0000": {split: Corpus}, ...}``; each client's ``Corpus.source`` names the
      partition and the client, its texts keep the pooled order (domains in the given order).
      ``num_empty`` is recounted per client; ``num_latin1_lines`` is 0 (a property of file
      lines the pooled examples no longer carry: the domain scene's stats have it).

    Raises:
      ValueError: an unknown partition or ``natural`` (nothing to re-partition), a missing
        concentration, or a split too small for N clients.
    """
    if partition not in FEDNLP_PARTITIONS:
        raise ValueError(f"repartition: partition must be one of {FEDNLP_PARTITIONS}, got "
                         f"{partition!r}")
    needed = "alpha" if partition == "dirichlet_label" else "beta"
    if (alpha if needed == "alpha" else beta) is None:
        raise ValueError(f"--partition {partition} needs --{needed}")
    splits = list(next(iter(client_corpora.values())))
    pooled = {s: pool([client_corpora[d][s] for d in client_corpora]) for s in splits}
    plan = make_plan(num_clients, label_prior(pooled["train"].labels, num_classes),
                     alpha=alpha, beta=beta, seed=seed)
    width = max(4, len(str(num_clients - 1)))
    names = [f"client{j:0{width}d}" for j in range(num_clients)]
    out: dict[str, dict[str, Corpus]] = {n: {} for n in names}
    for s in splits:
        corpus = pooled[s]
        parts = assign(plan, corpus.labels, seed=hash_seed(seed, s), min_size=min_size)
        for name, idx in zip(names, parts):
            texts = tuple(corpus.texts[i] for i in idx)
            out[name][s] = Corpus(
                texts=texts, labels=corpus.labels[idx].astype(np.int32),
                source=f"{corpus.source} -> {partition} {name}",
                num_empty=sum(not t.split() for t in texts), num_latin1_lines=0)
    return out


def pool(corpora: Sequence[Corpus]) -> Corpus:
    """The concatenation of several corpora (in order); counts are summed."""
    return Corpus(texts=tuple(t for c in corpora for t in c.texts),
                  labels=np.concatenate([c.labels for c in corpora]).astype(np.int32),
                  source=corpora[0].source if len(corpora) == 1 else
                  f"pooled({len(corpora)} files)",
                  num_empty=sum(c.num_empty for c in corpora),
                  num_latin1_lines=sum(c.num_latin1_lines for c in corpora))


def hash_seed(seed: int, split: str) -> list[int]:
    """The numpy seed sequence of one split's example draws."""
    return [seed, streams.PARTITION_SPLITS.get(split, streams.PARTITION_OTHER)]


# ------------------------------------------------------------- flwr-datasets' partitioners


def client_names(num_clients: int) -> list[str]:
    """``client0000``, ``client0001``, ... (at least four digits)."""
    width = max(4, len(str(num_clients - 1)))
    return [f"client{j:0{width}d}" for j in range(num_clients)]


def _subset(corpus: Corpus, idx: np.ndarray, source: str) -> Corpus:
    texts = tuple(corpus.texts[i] for i in idx)
    return Corpus(texts=texts, labels=corpus.labels[idx].astype(np.int32), source=source,
                  num_empty=sum(not t.split() for t in texts), num_latin1_lines=0)


def check_flwr(partition: str, alpha: float | None, beta: float | None,
               min_partition_size: int, self_balancing: bool) -> None:
    """Checks the settings of the flwr-datasets partitions.

    Raises:
      ValueError: ``iid`` with ``alpha`` or ``beta``; ``dirichlet`` without ``alpha`` or with
        ``beta``; ``min_partition_size`` other than flwr-datasets' default, or
        ``self_balancing``, with a partition other than ``dirichlet``.
    """
    if partition == "iid" and (alpha is not None or beta is not None):
        raise ValueError("--partition iid takes no --alpha or --beta")
    if partition == "dirichlet" and (alpha is None or beta is not None):
        raise ValueError("--partition dirichlet takes --alpha (missing here)" if alpha is None
                         else "--partition dirichlet takes --alpha and no --beta")
    if partition != "dirichlet" and (
            self_balancing or min_partition_size != flwr_partition.MIN_PARTITION_SIZE):
        raise ValueError("--min-partition-size and --self-balancing apply to --partition "
                         "dirichlet")


def partition_clients(client_corpora: Mapping[str, Mapping[str, Corpus]], partition: str,
                      num_clients: int, num_classes: int, *, alpha: float | None = None,
                      beta: float | None = None, seed: int = 0,
                      min_partition_size: int = flwr_partition.MIN_PARTITION_SIZE,
                      self_balancing: bool = False) -> dict[str, dict[str, Corpus]]:
    """Pools every domain's splits and partitions them into ``num_clients`` clients: FedNLP's
    partitions go to :func:`repartition` (unchanged); ``iid`` splits every split with
    flwr-datasets' ``IidPartitioner``; ``dirichlet`` draws its ``DirichletPartitioner`` on the
    training split and cuts the others with that draw's proportions
    (:mod:`fedjax_sc.data.flwr_partition`).

    Args:
      client_corpora: ``{domain: {split: Corpus}}`` (every domain the same splits).
      partition: a name of :data:`PARTITIONS` other than ``natural``.
      num_clients, num_classes: N and C.
      alpha: dirichlet_label's or dirichlet's concentration (needed by both).
      beta: dirichlet_quantity's concentration.
      seed: the partition seed.
      min_partition_size, self_balancing: DirichletPartitioner's settings (dirichlet only).

    Returns:
      ``{"client0000": {split: Corpus}, ...}``; each ``Corpus.source`` names the partition
      and the client; for iid and dirichlet the texts come in flwr-datasets' order (shuffled).

    Raises:
      ValueError: an unknown partition or ``natural``, a missing concentration, too few
        examples for N clients, or (dirichlet) no draw meeting ``min_partition_size``.
    """
    if partition in FEDNLP_PARTITIONS:
        return repartition(client_corpora, partition, num_clients, num_classes, alpha=alpha,
                           beta=beta, seed=seed)
    if partition not in FLWR_PARTITIONS:
        raise ValueError(f"partition must be one of {PARTITIONS[1:]}, got {partition!r}")
    if partition == "dirichlet" and alpha is None:
        raise ValueError("--partition dirichlet needs --alpha")
    splits = list(next(iter(client_corpora.values())))
    pooled = {s: pool([client_corpora[d][s] for d in client_corpora]) for s in splits}
    if partition == "iid":
        parts = {}
        for s in splits:
            try:
                parts[s] = flwr_partition.iid_partition(len(pooled[s]), num_clients, seed)
            except ValueError as e:  # which split of which file
                raise ValueError(f"{pooled[s].source} ({s} split): {e}") from None
    else:
        draw = flwr_partition.dirichlet_partition(pooled["train"].labels, num_clients, alpha,
                                                  seed, min_partition_size, self_balancing)
        parts = {s: draw.parts if s == "train" else
                 flwr_partition.split_like(pooled[s].labels, draw, seed) for s in splits}
    names = client_names(num_clients)
    return {name: {s: _subset(pooled[s], parts[s][j],
                              f"{pooled[s].source} -> {partition} {name}") for s in splits}
            for j, name in enumerate(names)}


def zipf_sizes(num_clients: int, exponent: float = 1.5, seed: int = 0,
               largest: int = 1000) -> np.ndarray:
    """Cross-device client sizes: ``numpy``'s Zipf draws ``P(n) ~ n^-exponent`` (most clients
    hold one or two examples, a few hundreds), clipped to ``largest``; the shape of LEAF's
    Sent140 or StackOverflow users
    (:func:`fedjax_sc.data.synthetic.synthetic_corpora`'s ``train_sizes``).

    Returns:
      int64 ``[num_clients]``, each in ``[1, largest]``.

    Raises:
      ValueError: ``exponent`` <= 1, ``num_clients`` or ``largest`` < 1.
    """
    if exponent <= 1 or num_clients < 1 or largest < 1:
        raise ValueError(f"zipf sizes need exponent > 1 and num_clients, largest >= 1, got "
                         f"{exponent}, {num_clients}, {largest}")
    rng = np.random.default_rng([seed, 0x5A1F])
    return np.minimum(rng.zipf(exponent, size=num_clients), largest).astype(np.int64)
