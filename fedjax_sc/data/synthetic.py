"""The built-in synthetic corpus: generated multi-domain binary sentiment texts, one client per
domain, that the synthetic scene (:func:`fedjax_sc.data.scenes.synthetic_scene`) encodes as it
encodes a real corpus, so the whole pipeline runs in seconds without data. Host-side (numpy)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fedjax_sc.data.corpus import Corpus

NUM_CLIENTS, TRAIN_PER_CLIENT, TEST_PER_CLIENT = 4, 160, 200
"""The synthetic scene's clients and documents per client (train, test)."""
MAX_LEN = 48
"""L of the synthetic scene: short texts, so that it trains in seconds."""


def synthetic_corpora(num_clients: int = NUM_CLIENTS,
                      train_per_client: int = TRAIN_PER_CLIENT,
                      test_per_client: int = TEST_PER_CLIENT,
                      max_len: int = MAX_LEN, seed: int = 0,
                      label_noise: float = 0.1, dev_per_client: int = 0,
                      num_shared_neutral: int = 300, num_shared_sentiment: int = 120,
                      num_domain_sentiment: int = 12, domain_vocab_size: int = 120,
                      sentiment_rate: float = 0.15, agree_prob: float = 0.85,
                      train_sizes: Sequence[int] | None = None
                      ) -> dict[str, dict[str, Corpus]]:
    """The texts of a deterministic multi-domain binary sentiment scene, one client per domain.

    The texts go through :func:`fedjax_sc.data.scenes.build_scene` (federated counting,
    vocabulary, encoding), so the real pipeline is exercised. Generative process, from
    ``np.random.default_rng(seed)``:

    * Domain ``k`` (client ``"d{k}"``) has its own neutral words ``d{k}_w{j}``; their number is
      ``domain_vocab_size`` times a factor in ``[0.5, 1.5]`` (differs across clients); its own
      sentiment words ``d{k}_pos_{j}`` / ``d{k}_neg_{j}``, ``num_domain_sentiment`` each.
    * Shared by all domains: ``num_shared_neutral`` neutral words ``the_{i}`` drawn Zipf-like,
      and ``num_shared_sentiment`` positive ``pos_{i}`` and negative ``neg_{i}`` words (uniform).
    * A document: true label ``y`` uniform in {0, 1}; length ~ round(LogNormal(log m_k, 0.6))
      clipped to ``[3, 3 * max_len]`` with ``m_k = max_len * u_k``, ``u_k`` in
      ``[0.35, 0.7]``, so some documents are clipped; each token is a domain neutral word with
      probability 0.4, else a shared neutral word; then ``1 + Poisson(sentiment_rate * length)``
      random positions get a sentiment word, of polarity ``y`` with probability
      ``agree_prob`` (else the opposite), domain-specific with probability 0.3, else shared.
      The observed label is ``y`` flipped with probability ``label_noise`` (all splits).
    * Client ``k`` has ``round(train_per_client * f_k)`` train documents,
      ``f_k = linspace(1.0, 0.6, K)[k]`` (unequal sizes exercise padding/masking),
      ``test_per_client`` test and ``dev_per_client`` dev documents (no dev split when 0).
      ``train_sizes`` (int ``[num_clients]``, each >= 1, e.g.
      :func:`fedjax_sc.data.partition.zipf_sizes`) gives the
      train sizes instead (``train_per_client`` is then unused); None keeps the draws above
      as they were.

    Each client sees only a few occurrences of each of the ``2 * num_shared_sentiment`` shared
    sentiment words, so a model trained on all clients' data beats each client alone.

    Returns:
      ``{"d{k}": {"train": Corpus, "test": Corpus[, "dev": Corpus]}}``, labels in {0, 1}.

    Raises:
      ValueError: ``num_clients < 1``, a per-client size < 1 (dev < 0), ``train_sizes``
        not ``num_clients`` sizes >= 1, or ``label_noise`` outside ``[0, 0.5]``.
    """
    if num_clients < 1 or train_per_client < 1 or test_per_client < 1 or dev_per_client < 0:
        raise ValueError("need num_clients, train_per_client, test_per_client >= 1 and "
                         "dev_per_client >= 0")
    if not 0.0 <= label_noise <= 0.5:
        raise ValueError(f"label_noise must be in [0, 0.5], got {label_noise}")
    if train_sizes is not None and (len(train_sizes) != num_clients
                                    or min(train_sizes) < 1):
        raise ValueError(f"train_sizes must be {num_clients} sizes >= 1, got "
                         f"{len(train_sizes)} with minimum {min(train_sizes, default=None)}")
    rng = np.random.default_rng(seed)
    vocab_factor = rng.uniform(0.5, 1.5, size=num_clients)
    len_factor = rng.uniform(0.35, 0.7, size=num_clients)
    size_factor = np.linspace(1.0, 0.6, num_clients)
    corpora: dict[str, dict[str, Corpus]] = {}
    for k in range(num_clients):
        sizes = {"train": (max(1, round(train_per_client * size_factor[k]))
                           if train_sizes is None else int(train_sizes[k])),
                 "test": test_per_client}
        if dev_per_client:
            sizes["dev"] = dev_per_client
        corpora[f"d{k}"] = {s: _synthetic_split(
            rng, k, n, max_len, max_len * len_factor[k],
            max(1, round(domain_vocab_size * vocab_factor[k])), num_shared_neutral,
            num_shared_sentiment, num_domain_sentiment, sentiment_rate, agree_prob, label_noise)
            for s, n in sizes.items()}
    return corpora


def _synthetic_split(rng: np.random.Generator, k: int, n: int, max_len: int, mean_len: float,
                     domain_vocab: int, num_shared_neutral: int, num_shared_sentiment: int,
                     num_domain_sentiment: int, sentiment_rate: float, agree_prob: float,
                     label_noise: float) -> Corpus:
    """``n`` generated documents of domain ``k`` (see :func:`synthetic_corpora`)."""
    texts, labels = [], []
    zipf = 1.0 / np.arange(1, num_shared_neutral + 1)
    zipf /= zipf.sum()
    for _ in range(n):
        y = int(rng.integers(2))
        length = int(np.clip(round(rng.lognormal(np.log(mean_len), 0.6)), 3, 3 * max_len))
        is_domain = rng.random(length) < 0.4
        shared = rng.choice(num_shared_neutral, size=length, p=zipf)
        local = rng.integers(domain_vocab, size=length)
        words = [f"d{k}_w{j}" if d else f"the_{i}" for d, i, j in zip(is_domain, shared, local)]
        num_sent = min(length, 1 + int(rng.poisson(sentiment_rate * length)))
        for pos in rng.choice(length, size=num_sent, replace=False):
            polarity = ("neg", "pos")[y if rng.random() < agree_prob else 1 - y]
            if rng.random() < 0.3:
                words[pos] = f"d{k}_{polarity}_{rng.integers(num_domain_sentiment)}"
            else:
                words[pos] = f"{polarity}_{rng.integers(num_shared_sentiment)}"
        texts.append(" ".join(words))
        labels.append(1 - y if rng.random() < label_noise else y)
    return Corpus(texts=tuple(texts), labels=np.asarray(labels, np.int32).reshape(n),
                  source=f"synthetic:d{k}", num_empty=0, num_latin1_lines=0)
