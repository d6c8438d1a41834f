"""FedKC: federated knowledge composition (Wang et al. 2022, "FedKC: Federated Knowledge
Composition for Multilingual Natural Language Understanding", Sec. 4.2-4.3, Eq. 8), the
"last layer" variant, as a plug-in on any single-branch algorithm (FedAvg, FedProx).

At the start of every round each client embeds its whole training set with the model it
downloaded (e = the pooled BiGRU features entering the classifier), runs K-Means with q
clusters on them and shares, per cluster, the centroid ``mean_{k in C_i} e_k`` and the mean
predicted class distribution ``mean_{k in C_i} softmax(f(e_k))``. During local training client
i adds the cluster-aware consistency loss (Eq. 8) over the other clients' clusters::

    L_i = CE(local batch) + alpha * mean_{m != i, clusters c of m} CE(y_mc, f(e_mc; w_i))

(soft-label cross-entropy of the classifier head on the shared centroids). All clients are
active every round (the FDU scene's 16 clients). K-Means is jittable: q centres drawn from
the client's real examples, a fixed number of Lloyd iterations, an empty cluster keeps its
centre and is left out of the loss.

Settings the paper leaves to the task: q = 10 (FedKC's setting for PAWS-X and QAM), 10 Lloyd
iterations, alpha = 0.1 (not stated in the paper). Each round a client uploads and downloads
``q (2h + C)`` floats per client besides the model (Sec. 4.4.2).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from fedjax_sc.algorithms.base import Algorithm, Batch, ClientStart, Params

DEFAULT_CLUSTERS = 10
"""q, the K-Means clusters per client."""
DEFAULT_ITERATIONS = 10
"""Lloyd iterations of the K-Means."""
DEFAULT_WEIGHT = 0.1
"""alpha, the weight of the consistency loss (Eq. 8)."""
FEATURE_CHUNK = 200
"""Examples embedded per forward pass when extracting the knowledge."""


def kmeans(x: jax.Array, mask: jax.Array, num_clusters: int, iterations: int,
           key: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Lloyd's K-Means on the real rows, jittable (fixed sizes and iterations).

    Args:
      x: float ``[N, f]`` points.
      mask: bool ``[N]``, True on real points.
      num_clusters: q (>= 1).
      iterations: Lloyd iterations (>= 0).
      key: PRNG key of the initial centres (q distinct real points, or repeats of them when
        fewer than q points are real).

    Returns:
      ``(centres float [q, f], assignment int32 [N])``; padding rows are assigned too (to
      their nearest centre) and must be masked by the caller.
    """
    n = x.shape[0]
    order = jnp.argsort(jnp.where(mask, jax.random.uniform(key, (n,)), 2.0))
    count = jnp.maximum(jnp.sum(mask), 1)
    centres = x[order[jnp.arange(num_clusters) % count]]
    weights = mask.astype(x.dtype)

    def assign(centres):
        d = (jnp.sum(x * x, -1)[:, None] - 2 * x @ centres.T
             + jnp.sum(centres * centres, -1)[None, :])
        return jnp.argmin(d, axis=-1).astype(jnp.int32)

    def step(centres, _):
        onehot = jax.nn.one_hot(assign(centres), num_clusters, dtype=x.dtype) * weights[:, None]
        size = jnp.sum(onehot, axis=0)
        new = (onehot.T @ x) / jnp.maximum(size, 1.0)[:, None]
        return jnp.where(size[:, None] > 0, new, centres), None

    centres, _ = jax.lax.scan(step, centres, None, length=iterations)
    return centres, assign(centres)


def fedkc(algorithm: Algorithm, num_clusters: int = DEFAULT_CLUSTERS,
          iterations: int = DEFAULT_ITERATIONS, weight: float = DEFAULT_WEIGHT) -> Algorithm:
    """``algorithm`` with FedKC's knowledge exchange and consistency loss.

    Args:
      algorithm: a single-branch algorithm whose model has ``features(tokens)`` and
        ``head(features)`` (``TextClassifier``: FedAvg, FedProx, FedMMD).
      num_clusters: q.
      iterations: Lloyd iterations of K-Means.
      weight: alpha, the consistency loss's weight (>= 0).

    Returns:
      The :class:`Algorithm` named ``<name>+fedkc`` with ``knowledge`` set; the loss's
      aux dict gains ``consistency`` (float32). In the Ap phase there is no exchange and the
      loss is the base loss.

    Raises:
      ValueError: q < 1, iterations < 0, weight < 0, or a model without ``features``/``head``.
    """
    if num_clusters < 1 or iterations < 0 or weight < 0:
        raise ValueError(f"FedKC needs q >= 1, iterations >= 0, weight >= 0; got "
                         f"{num_clusters}, {iterations}, {weight}")
    model = algorithm.model
    if not (hasattr(model, "features") and hasattr(model, "head")):
        raise ValueError(f"FedKC needs a model with features() and head(), got "
                         f"{type(model).__name__}")
    base = algorithm.client_loss

    def extract(params: Params, tokens, labels, mask, rng):
        del labels  # FedKC shares predictions, not labels
        n, length = tokens.shape
        pad = (-n) % FEATURE_CHUNK
        chunks = jnp.pad(tokens, ((0, pad), (0, 0))).reshape(-1, FEATURE_CHUNK, length)
        features = jax.lax.map(
            lambda t: model.apply({"params": params}, t, method=model.features), chunks)
        features = features.reshape(-1, features.shape[-1])[:n]
        probs = jax.nn.softmax(model.apply({"params": params}, features, method=model.head))
        _, assignment = kmeans(features, mask, num_clusters, iterations, rng)
        onehot = (jax.nn.one_hot(assignment, num_clusters, dtype=features.dtype)
                  * mask[:, None].astype(features.dtype))
        size = jnp.sum(onehot, axis=0)
        mean = lambda v: (onehot.T @ v) / jnp.maximum(size, 1.0)[:, None]
        return {"centroids": mean(features), "probs": mean(probs), "sizes": size}

    def loss(params: Params, batch: Batch, rng: jax.Array, start: ClientStart):
        value, aux = base(params, batch, rng, start)
        if not start.knowledge:  # the Ap phase: no exchange
            return value, aux
        k = start.knowledge
        num_clients = k["sizes"].shape[0]
        logits = model.apply({"params": params}, k["centroids"].reshape(
            -1, k["centroids"].shape[-1]), method=model.head)
        ce = -jnp.sum(k["probs"].reshape(logits.shape) * jax.nn.log_softmax(logits), -1)
        others = jnp.arange(num_clients) != start.client
        use = ((k["sizes"] > 0) & others[:, None]).reshape(-1).astype(ce.dtype)
        term = jnp.sum(ce * use) / jnp.maximum(jnp.sum(use), 1.0)
        return value + weight * term, {**aux, "consistency": term}

    return algorithm._replace(name=f"{algorithm.name}+fedkc", client_loss=loss,
                              knowledge=extract)
