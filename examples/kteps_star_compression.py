"""What KTEPS*'s iterated PCA compression does to the word embeddings, without training.

KTEPS* (Li et al. 2021, "Preliminary Steps Towards Federated Sentiment Classification",
Sec. 4.2, Eq. 10-12, Alg. 1) projects each client's word embeddings on principal components
d1..d2 before every upload. The projection removes the top d1 - 1 directions, so the next
round's top directions are new ones: the paper notes that the iterated procedure accumulates
error (Sec. 5.6.3) and its Table 7 collapses to chance on FDU for d1 = 6 (and d1 = 3 with
d2 = 150). How fast the table loses its content depends on *which rows* are compressed:

* ``local`` (this library's default, the paper's Remark 3): a client compresses the rows of
  its local vocabulary V^k only; the server's FedAvg mean of the full tables keeps, for the
  other clients, the server's value of a row they do not hold, so a word held by one client
  moves only N^k / N of the way to its projection per round.
* ``dense`` (Eq. 10-12 as printed, ``fedjax-sc train --dense-embedding``): every client
  compresses the whole V x d table; with the same table on every client the components agree,
  and the whole table loses d1 - 1 directions per round.

``iterate`` replays R rounds of upload + aggregation alone (the library's own upload
transform and row aggregation; no local training, which in a real run puts some of the lost
variance back) from the GloVe-initialised FDU table, and prints, every 10 rounds, the share of
the initial variance left in the clients' rows and the number of directions that still carry
variance::

    python examples/kteps_star_compression.py iterate --data-dir ../shared/data/fdu-mtl \\
        --band 2 38 --band 2 50 --band 3 38 --band 6 38

``spectrum RUN [RUN ...]``: the covariance eigenvalues of the rows the clients hold (their
union) in a trained run's initial and last tables::

    python examples/kteps_star_compression.py spectrum ~/runs/fdu/kteps_star/seed-0
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.aggregate import example_weights, weighted_mean_rows
from fedjax_sc.algorithms.base import UploadContext
from fedjax_sc.algorithms.compression import EMBEDDING_TABLE, principal_components
from fedjax_sc.algorithms.kteps_star import PAPER_SIGMA, private_upload
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.loading import load_scene
from fedjax_sc.run.setup import build_setup, restore_run

PATH = tuple(EMBEDDING_TABLE.split("/"))
MIN_SHARE = 0.1
"""A direction 'carries variance' while its eigenvalue is at least this share of the initial
table's mean eigenvalue."""


def _eigenvalues(table: np.ndarray) -> np.ndarray:
    return np.asarray(principal_components(jnp.asarray(table))[0], np.float64)


def _held_rows(data) -> np.ndarray:
    ids, masks = np.asarray(data.vocab_ids), np.asarray(rnd.row_masks(data))
    return np.unique(ids[masks])


def iterate(data_dir: str, bands: list[tuple[int, int]], rounds: int, sigma: float,
            center: bool, seed: int) -> None:
    c = TrainConfig(scene="fdu", data_dir=data_dir, algorithm="kteps_star",
                    embeddings="glove-6b-50d", seed=seed).resolved()
    scene = load_scene(c)
    setup = build_setup(c, scene, log=lambda _: None)
    data = client_data(scene.train, local_vocab=True)
    ids, masks = data.vocab_ids, rnd.row_masks(data)
    weights = example_weights(data.counts)
    held = _held_rows(data)
    table0 = rnd.get_leaf(setup.state.params, PATH)
    ev0 = _eigenvalues(np.asarray(table0)[held])
    floor = MIN_SHARE * ev0.mean()
    every = [r for r in range(10, rounds + 1, 10)] or [rounds]
    print(f"FDU, GloVe 6B 50d, {data.num_clients} clients, {len(held)} rows held; sigma "
          f"{sigma}, PCA {'centred' if center else 'uncentred'}; no training. Per cell: "
          f"variance left (% of the initial) / directions with eigenvalue >= "
          f"{MIN_SHARE:g} x the initial mean (initially {int((ev0 >= floor).sum())} of "
          f"{len(ev0)})")
    print("| band | rows | " + " | ".join(f"round {r}" for r in every) + " |")
    print("|---|---|" + "---:|" * len(every))
    for d1, d2 in bands:
        upload = private_upload((d1, d2), sigma, center)
        state = upload.init({PATH[0]: {PATH[1]: table0}})

        def one_client(table, mask, key):
            params = {PATH[0]: {PATH[1]: table}}
            context = None if mask is None else UploadContext({EMBEDDING_TABLE: mask})
            message, _ = upload.encode(params, state, key, context)
            return upload.decode(message, state, context)[PATH[0]][PATH[1]]

        @jax.jit
        def local_round(table, key):
            keys = jax.random.split(key, ids.shape[0])
            rows = jax.vmap(one_client)(table[ids], masks, keys)
            return weighted_mean_rows(table, ids, rows, masks, weights)

        @jax.jit
        def dense_round(table, key):
            keys = jax.random.split(key, ids.shape[0])
            tables = jax.vmap(lambda k: one_client(table, None, k))(keys)
            return jnp.tensordot(weights, tables, axes=1)

        for name, step in (("local", local_round), ("dense", dense_round)):
            table, key, cells = table0, jax.random.key(seed), []
            for r in range(1, rounds + 1):
                key, sub = jax.random.split(key)
                table = step(table, sub)
                if r in every:
                    ev = _eigenvalues(np.asarray(table)[held])
                    cells.append(f"{100 * ev.sum() / ev0.sum():.0f}% / {int((ev >= floor).sum())}")
            print(f"| ({d1}, {d2}) | {name} | " + " | ".join(cells) + " |")


def spectrum(runs: list[str]) -> None:
    for out in runs:
        c, scene, setup, step, state, _ = restore_run(out)
        held = _held_rows(client_data(scene.train, local_vocab=True))
        print(f"{out} ({c.algorithm}, band {c.pca_band}, PCA "
              f"{'centred' if c.pca_center else 'uncentred'}), {len(held)} rows held")
        for tag, params in (("initial", setup.state.params), (f"round {step}", state.params)):
            ev = _eigenvalues(np.asarray(rnd.get_leaf(params, PATH))[held])
            print(f"  {tag}: total variance {ev.sum():.2f}; eigenvalues "
                  + " ".join(f"{v:.3f}" for v in ev))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    i = sub.add_parser("iterate", help="upload + aggregation alone, R rounds, per band")
    i.add_argument("--data-dir", default="../shared/data/fdu-mtl")
    i.add_argument("--band", type=int, nargs=2, action="append", metavar=("D1", "D2"),
                   help="a band; repeat for several (default: 2 38)")
    i.add_argument("--rounds", type=int, default=50)
    i.add_argument("--sigma", type=float, default=PAPER_SIGMA)
    i.add_argument("--no-center", dest="center", action="store_false")
    i.add_argument("--seed", type=int, default=0)
    s = sub.add_parser("spectrum", help="eigenvalues of a run's initial and last tables")
    s.add_argument("runs", nargs="+")
    args = p.parse_args()
    if args.command == "iterate":
        iterate(args.data_dir, [tuple(b) for b in args.band or [(2, 38)]], args.rounds,
                args.sigma, args.center, args.seed)
    else:
        spectrum(args.runs)


if __name__ == "__main__":
    main()
