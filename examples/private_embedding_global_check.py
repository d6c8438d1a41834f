"""Which word embedding should the global model of a method with a private embedding read?

A method that keeps the word embedding private (FedFusion as Li et al. 2021, "Preliminary
Steps Towards Federated Sentiment Classification", ran it; PFL-DA's and LG-FedAvg's local
parts) has a global model whose embedding no client uploads: fedjax_sc evaluates it (Ag, the
paper's Eq. 14-15) with the server's own table, the round-0 one. This restores a run's
checkpoint and prints Ag^k and Ag of its global model with three embeddings:

  * ``server``: the round-0 table (what the run's metrics report);
  * ``mean``: each row the mean over the clients whose local vocabulary holds the word (the
    round-0 row for a word no client holds), what averaging the embedding would give;
  * ``own``: each client's test set read with its own private table (the rest of the model
    global): the encoder and classifier the clients trained against their own tables.

    python examples/private_embedding_global_check.py RUN_DIR [--round R]

Needs the run's corpus (its config names it) and a saved checkpoint.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from fedjax_sc.core.evaluate import accuracy_list, make_evaluate, mean_accuracy
from fedjax_sc.data.client_data import client_data, host_client_data
from fedjax_sc.run.setup import global_params, restore_run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a run folder with config.json and checkpoints/")
    ap.add_argument("--round", type=int, default=None, help="default: the last checkpoint")
    a = ap.parse_args()
    c, scene, setup, step, state, clients = restore_run(a.run, a.round)
    if setup.algorithm.global_predict is None:
        raise SystemExit(f"{a.run}: {c.algorithm} has no global model")
    private = traverse_util.flatten_dict(clients.private)
    tables = {k: v for k, v in private.items() if k[-1] == "embedding"}
    if not tables:
        raise SystemExit(f"{a.run}: {c.algorithm} keeps no private word embedding")
    base = traverse_util.flatten_dict(global_params(setup, state.params))
    train = host_client_data(scene.train, local_vocab=True)
    ids, real = np.asarray(train.vocab_ids), np.asarray(train.vocab_mask)  # [N, R]
    held = np.zeros((scene.num_clients, len(scene.vocab)), np.float32)  # [N, V]
    for n in range(scene.num_clients):
        held[n, ids[n][real[n]]] = 1.0  # the words of client n's local vocabulary
    test = client_data(scene.test)
    evaluate = make_evaluate(setup.algorithm.global_predict)

    def with_tables(choose):
        flat = dict(base)
        for k, v in tables.items():
            flat[k] = choose(k, np.asarray(v))
        return traverse_util.unflatten_dict(flat)

    def mean_rows(k, v):  # v: [N, V, d]
        n = held.sum(0)[:, None]
        mean = np.einsum("nv,nvd->vd", held, v) / np.maximum(n, 1)
        return jnp.asarray(np.where(n > 0, mean, np.asarray(base[k])))

    results = {"server": np.asarray(evaluate(with_tables(lambda k, v: base[k]), test)),
               "mean": np.asarray(evaluate(with_tables(mean_rows), test))}
    own = []
    for i in range(scene.num_clients):
        one = jax.tree.map(lambda x, i=i: x[i : i + 1], test)
        own.append(float(np.asarray(evaluate(with_tables(lambda k, v, i=i: v[i]), one))[0]))
    results["own"] = np.asarray(own)
    print(f"{a.run}: {c.algorithm}, round {step}, {scene.num_clients} clients")
    print("| client | " + " | ".join(results) + " |")
    print("|---|" + "---:|" * len(results))
    rows = {name: accuracy_list(r) for name, r in results.items()}
    for i, client in enumerate(scene.client_names):
        print(f"| {client} | " + " | ".join(f"{100 * rows[n][i]:.1f}" for n in rows) + " |")
    print("| **Ag** | " + " | ".join(f"{100 * mean_accuracy(r):.1f}" for r in results.values())
          + " |")


if __name__ == "__main__":
    main()
