"""Why FedAvg stalls on the 1,000-client FDU Dirichlet scene, and what a run has learnt.

``auc RUN [RUN ...]``: for each ``fedjax-sc train`` run folder, its last checkpoint's global
model on the 6,400 pooled test reviews: accuracy at the model's own threshold, the ranking
quality (AUC of the logit margin), the accuracy at the best threshold, and the share of reviews
predicted positive. A model that ranks reviews well but predicts one class everywhere has a
miscalibrated output bias, not a lack of learning.

``movement``: the relative change of the global model per parameter group in one FedAvg round,
the natural 16-client scene against the 1,000-client scene with 100 clients per round (same
model and client settings), and the change of the output-bias margin.

    python examples/many_clients_diagnostics.py auc runs/fdu-dirichlet1000-fedadam
    python examples/many_clients_diagnostics.py movement --data-dir ../shared/data/fdu-mtl
"""

import argparse
from pathlib import Path

import jax
import numpy as np
from flax import traverse_util

from fedjax_sc.core import sharding
from fedjax_sc.core.feed import ClientFeed
from fedjax_sc.core.round import ClientStates, build_round
from fedjax_sc.data.client_data import host_client_data
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.loading import load_scene
from fedjax_sc.run.setup import build_setup, restore_run


def auc(run: Path) -> str:
    _, scene, setup, step, state, _ = restore_run(run)
    tokens, labels = scene.test.tokens[scene.test.mask], scene.test.labels[scene.test.mask]
    predict = jax.jit(setup.algorithm.global_predict)
    probs = np.concatenate([np.asarray(predict(state.params, tokens[i:i + 400]))
                            for i in range(0, len(tokens), 400)])
    margin = probs[:, 1] - probs[:, 0]
    ranks = np.empty(len(margin))
    ranks[np.argsort(margin)] = np.arange(len(margin))
    pos = labels == 1
    area = (ranks[pos].sum() - pos.sum() * (pos.sum() - 1) / 2) / (pos.sum() * (~pos).sum())
    best = max(np.mean((margin > t) == pos) for t in np.quantile(margin, np.linspace(.01, .99, 99)))
    return (f"{run.name} (round {step}): accuracy {np.mean((margin > 0) == pos):.3f}, AUC "
            f"{area:.3f}, accuracy at the best threshold {best:.3f}, predicted positive "
            f"{np.mean(margin > 0):.3f}")


def movement(data_dir: str) -> None:
    scenes = (("natural 16 clients", {}),
              ("Dirichlet 1,000 clients, 100 per round",
               dict(partition="dirichlet_label", num_clients=1000, alpha=1.0,
                    clients_per_round=100)))
    for name, kw in scenes:
        c = TrainConfig(scene="fdu", data_dir=data_dir, embeddings="glove-6b-50d",
                        **kw).resolved()
        scene = load_scene(c)
        setup = build_setup(c, scene, log=lambda s: None)
        feed = ClientFeed(host_client_data(scene.train, local_vocab=True),
                                        setup.client_states.private, sharding.client_mesh(),
                                        c.clients_per_round, seed=0)
        idx = feed.sample(1)
        data, private = feed.inputs(idx)
        step = jax.jit(build_round(setup.algorithm, batch_size=c.batch_size,
                                   local_epochs=c.local_epochs))
        new, _, m = step(setup.state, ClientStates(private), data, setup.train_key)
        old = traverse_util.flatten_dict(jax.device_get(setup.state.params))
        now = traverse_util.flatten_dict(jax.device_get(new.params))
        groups: dict[str, list] = {}
        for k in old:
            d = np.asarray(now[k]) - np.asarray(old[k])
            groups.setdefault(k[0], []).append((np.sum(d * d), np.sum(np.asarray(old[k]) ** 2)))
        rel = {g: np.sqrt(sum(a for a, _ in v)) / np.sqrt(sum(b for _, b in v))
               for g, v in groups.items()}
        bias = now[("classifier", "output", "bias")] - old[("classifier", "output", "bias")]
        print(f"{name}: {int(np.asarray(m.steps)[:len(idx)].mean())} local steps per client; "
              "relative change of the global model: " + ", ".join(
                  f"{g} {v:.2e}" for g, v in rel.items())
              + f"; output-bias margin {float(bias[1] - bias[0]):+.4f}", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("auc", "movement"))
    p.add_argument("runs", nargs="*", type=Path)
    p.add_argument("--data-dir", default="../shared/data/fdu-mtl")
    args = p.parse_args()
    if args.what == "auc":
        for run in args.runs:
            print(auc(run), flush=True)
    else:
        movement(args.data_dir)
