"""flwr-datasets' partitioners on a label array: ``IidPartitioner`` and
``DirichletPartitioner`` (Beutel et al., Flower Datasets, ``flwr_datasets/partitioner/``),
as ``FederatedDataset(shuffle=True, seed=seed)`` applies them: the split is shuffled with the
seed, then partitioned. Host-side only (numpy), seeded and deterministic; the generator calls
are flwr-datasets', so the same labels and seed give its partitions (checked against
flwr-datasets 0.6.1 on random label arrays, sizes and settings: the same index lists, and the
same draws that raise).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

MIN_PARTITION_SIZE = 10
"""``DirichletPartitioner``'s default ``min_partition_size``."""
SELF_BALANCING = False
"""``DirichletPartitioner``'s default ``self_balancing``."""
MAX_RETRIES = 10
"""``DirichletPartitioner`` redraws at most this many times (11 draws in all), then raises."""


def _check_sizes(n: int, num_partitions: int) -> None:
    if num_partitions < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_partitions}")
    if num_partitions > n:
        raise ValueError(f"{n} examples cannot be split into {num_partitions} clients "
                         f"(flwr-datasets: the number of partitions needs to be smaller than "
                         f"the number of samples)")


def iid_partition(n: int, num_partitions: int, seed: int = 0) -> list[np.ndarray]:
    """flwr-datasets' ``IidPartitioner`` behind ``FederatedDataset(shuffle=True, seed=seed)``.

    As flwr-datasets does: the split is shuffled (``datasets.Dataset.shuffle(seed)``, i.e.
    ``np.random.default_rng(seed).permutation(n)``), then partition j is its j-th contiguous
    shard (``Dataset.shard(N, j, contiguous=True)``): sizes ``n // N + 1`` for the first
    ``n % N`` partitions and ``n // N`` for the rest, as :func:`numpy.array_split` gives.

    Returns:
      N int64 index arrays (in the shuffled order); together they hold each of ``0..n-1``
      exactly once.

    Raises:
      ValueError: ``num_partitions < 1`` or more partitions than examples (flwr-datasets
        leaves such partitions empty; a client without examples cannot train here).
    """
    _check_sizes(n, num_partitions)
    return np.array_split(np.random.default_rng(seed).permutation(n), num_partitions)


class DirichletDraw(NamedTuple):
    """A :func:`dirichlet_partition`: the partitions and the shares that made them.

    Attributes:
      parts: N int64 index arrays into the split (each example exactly once).
      classes: int ``[C']`` the classes present, sorted.
      proportions: float64 ``[C', N]``: row i splits class ``classes[i]`` over the N
        partitions (the accepted draw, after self-balancing; rows sum to 1).
    """

    parts: list[np.ndarray]
    classes: np.ndarray
    proportions: np.ndarray


def _split_classes(targets: np.ndarray, classes: np.ndarray, proportions: np.ndarray
                   ) -> list[list[int]]:
    """Per class in turn, its examples' indices cut at ``cumsum(share) * count`` (floored),
    piece j appended to partition j: DirichletPartitioner's split of one draw."""
    parts: list[list[int]] = [[] for _ in range(proportions.shape[1])]
    for k, share in zip(classes, proportions):
        idx = np.nonzero(targets == k)[0]
        cuts = (np.cumsum(share) * len(idx)).astype(int)[:-1]
        for part, piece in zip(parts, np.split(idx, cuts)):
            part.extend(piece.tolist())
    return parts


def dirichlet_partition(labels: np.ndarray, num_partitions: int, alpha: float, seed: int = 0,
                        min_partition_size: int = MIN_PARTITION_SIZE,
                        self_balancing: bool = SELF_BALANCING) -> DirichletDraw:
    """flwr-datasets' ``DirichletPartitioner(num_partitions, partition_by, alpha,
    min_partition_size, self_balancing, shuffle=True, seed)`` behind ``FederatedDataset(
    shuffle=True, seed=seed)`` (Yurochkin et al. 2019's label split, as flwr-datasets codes it).

    Follows flwr-datasets step by step, with the same generator calls, so the partitions are
    the ones it gives for the same labels and seed:

    1. the split is shuffled, ``np.random.default_rng(seed).permutation(n)``
       (``FederatedDataset``'s ``Dataset.shuffle(seed)``);
    2. the partitioner's own ``np.random.default_rng(seed)``: for every class present, in
       sorted order, proportions ``p ~ Dir(alpha * 1_N)`` over the N partitions; with
       ``self_balancing`` a partition already holding more than ``n / N`` examples gets
       ``p_j = 0`` and ``p`` is renormalised; the class's examples are cut at
       ``floor(cumsum(p) * count)``;
    3. if a partition holds fewer than ``min_partition_size`` examples, the whole draw is
       repeated (flwr-datasets warns each time; here the retries are silent) and after
       ``1 + MAX_RETRIES`` failed draws it raises;
    4. every partition is shuffled in place by the same generator (``shuffle=True``).

    Defaults are flwr-datasets': ``min_partition_size=10``, ``self_balancing=False`` (its
    docstring: True in the original code of Yurochkin et al., not in their paper).

    Args:
      labels: int ``[n]`` class ids of the split.
      num_partitions: N.
      alpha: the concentration (> 0), the same for every partition.
      seed: both seeds above (flwr-datasets' two ``seed`` arguments, set equal).
      min_partition_size: the smallest partition a draw may give.
      self_balancing: stop filling partitions past the average size.

    Returns:
      A :class:`DirichletDraw`; ``parts`` index the split as given (not the shuffled copy).

    Raises:
      ValueError: N < 1, more partitions than examples, alpha <= 0, or no draw of
        ``1 + MAX_RETRIES`` meets ``min_partition_size``.
    """
    labels = np.asarray(labels)
    n = labels.size
    _check_sizes(n, num_partitions)
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    order = np.random.default_rng(seed).permutation(n)
    targets = labels[order]
    rng = np.random.default_rng(seed)
    alphas = np.full(num_partitions, float(alpha))
    average = n / num_partitions
    classes = np.unique(targets)
    for _ in range(1 + MAX_RETRIES):
        parts: list[list[int]] = [[] for _ in range(num_partitions)]
        proportions = np.zeros((len(classes), num_partitions))
        for i, k in enumerate(classes):
            share = rng.dirichlet(alphas)
            if self_balancing:
                share = np.where([len(p) > average for p in parts], 0.0, share)
                share = share / sum(share.tolist())  # flwr-datasets sums in Python
            proportions[i] = share
            idx = np.nonzero(targets == k)[0]
            cuts = (np.cumsum(share) * len(idx)).astype(int)[:-1]
            for part, piece in zip(parts, np.split(idx, cuts)):
                part.extend(piece.tolist())
        smallest = min(len(p) for p in parts)
        if smallest >= min_partition_size:
            break
    else:
        raise ValueError(f"--partition dirichlet: none of {1 + MAX_RETRIES} draws gave "
                         f"every one of {num_partitions} clients {min_partition_size} "
                         f"examples (the last: {smallest}); raise --alpha, lower "
                         f"--num-clients or --min-partition-size")
    for part in parts:
        rng.shuffle(part)
    return DirichletDraw([order[np.asarray(p, np.int64)] for p in parts], classes, proportions)


def split_like(labels: np.ndarray, draw: DirichletDraw, seed: int = 0) -> list[np.ndarray]:
    """Another split (the test split) cut with a draw's per-class proportions: shuffled with
    ``seed`` as in :func:`dirichlet_partition`, then each class's examples cut at
    ``floor(cumsum(p) * count)``, so client j's test set follows the label mix of its training
    set (flwr-datasets partitions one split at a time; this extension is this library's).
    A class the draw did not see is spread evenly.

    Returns:
      N int64 index arrays; each of ``0..len(labels)-1`` exactly once.
    """
    labels = np.asarray(labels)
    order = np.random.default_rng(seed).permutation(labels.size)
    targets = labels[order]
    num_partitions = draw.proportions.shape[1]
    unseen = np.setdiff1d(np.unique(targets), draw.classes)
    classes = np.concatenate([draw.classes, unseen])
    proportions = np.concatenate(
        [draw.proportions, np.full((len(unseen), num_partitions), 1.0 / num_partitions)])
    return [order[np.asarray(p, np.int64)]
            for p in _split_classes(targets, classes, proportions)]
