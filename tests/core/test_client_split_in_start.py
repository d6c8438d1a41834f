"""``ClientStart.data``: the loss sees the client's whole training split, in the compiled round
(every local step) and in the Ap phase's fine-tuning, each client its own."""

import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import round as rnd
from fedjax_sc.core.personalize import make_personalize
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import TextClassifier, init_params


def split_reading(base):
    """``base`` with a loss that reports the real rows and positive labels of ``start.data``
    (aux ``rows``, ``positive``) and hands ``(client, rows, positive)`` to ``seen``."""
    seen = []

    def loss(params, batch, rng, start):
        value, aux = base.client_loss(params, batch, rng, start)
        rows = jnp.sum(start.data.mask).astype(jnp.float32)
        positive = jnp.sum(start.data.labels * start.data.mask).astype(jnp.float32)
        jax.debug.callback(lambda *a: seen.append(np.stack([np.asarray(x) for x in a], -1)),
                           start.client, rows, positive)
        return value, {**aux, "rows": rows, "positive": positive}

    return base._replace(client_loss=loss), seen


def test_the_round_and_the_ap_phase_hand_each_client_its_split(scene):
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=4, hidden=3, mlp_hidden=5)
    algorithm, seen = split_reading(fedavg(model, 0.1))
    train = client_data(scene.train, local_vocab=True)
    s = scene.train
    want = {k: (int(s.counts[k]), int(np.sum(s.labels[k] * s.mask[k]))) for k in range(3)}
    assert len(set(want.values())) > 1  # the clients' splits differ

    state, clients = rnd.init_states(algorithm, init_params(model, jax.random.key(0)),
                                     scene.num_clients)
    state, clients, metrics = jax.jit(rnd.build_round(algorithm, batch_size=4,
                                                      local_epochs=1))(
        state, clients, train, jax.random.key(1))
    np.testing.assert_array_equal(metrics.aux["rows"], [want[k][0] for k in range(3)])
    np.testing.assert_array_equal(metrics.aux["positive"], [want[k][1] for k in range(3)])

    seen.clear()
    ap = make_personalize(algorithm, client_sgd(0.01), batch_size=4, num_evals=1,
                          steps_per_eval=2, eval_batch_size=5)
    ap(state, clients, train, client_data(scene.test), jax.random.key(2))
    records = np.concatenate([r.reshape(-1, 3) for r in seen])
    assert {int(c) for c in records[:, 0]} == set(range(3))  # every client fine-tuned
    for client, rows, positive in records:
        assert (rows, positive) == want[int(client)]
