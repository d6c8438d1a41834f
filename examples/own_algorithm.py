"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich and Suresh 2020, "SCAFFOLD: Stochastic
Controlled Averaging for Federated Learning", Algorithm 1 with option II), written outside the
package with only ``import fedjax_sc as fsc``, and run through the whole CLI:

    fedjax-sc train --algorithm examples/own_algorithm.py:scaffold --scene synthetic --seeds 0,1

Client i keeps a control variate c_i, the server keeps c (both zero at first, shaped as the
model). Every local step follows the gradient corrected by c - c_i, here the gradient of the
linear term <c - c_i, w> added to the loss. After K local steps from x to y_i (option II):

    c_i+ = c_i - c + (x - y_i) / (K eta),        c <- c + (1 / N) sum_{i in S} (c_i+ - c_i)

and the new model is the aggregate of the y_i (global step 1). With heavy-ball momentum rho
the K eta of option II becomes eta sum_{t=1..K} (1 - rho^t) / (1 - rho), the distance plain
steps of a constant gradient cover; rho = 0 is the paper's formula. With the run's local
vocabularies, a client corrects only the word-embedding rows of its own words (the paper's
dense model would move every row by c - c_i); train the dense table (--dense-embedding)
for the exact algorithm. y_i - x is the update as the client sent it
(``fsc.sent_update``: upload noise and compression included), so the change of c_i that goes
up reveals nothing the upload does not. docs/own-algorithm.md walks through this file.
"""

import jax
import jax.numpy as jnp

import fedjax_sc as fsc


def momentum_steps(steps, momentum):
    """sum_{t=1..K} (1 - rho^t) / (1 - rho): K for rho = 0 (float32 scalar)."""
    k = steps.astype(jnp.float32)
    rho = jnp.asarray(momentum, jnp.float32)
    return jnp.where(rho > 0, (k - rho * (1 - rho ** k) / (1 - rho + 1e-12)) / (1 - rho + 1e-12), k)


def with_control_variates(algorithm, learning_rate, momentum, num_clients):
    """Any algorithm whose leaves are all shared (FedAvg) made SCAFFOLD."""
    base = algorithm.client_loss

    def loss(params, batch, rng, start):
        value, aux = base(params, batch, rng, start)
        correction = jax.tree.map(jnp.subtract, start.server, start.state)  # c - c_i
        term = sum(jnp.vdot(jax.lax.stop_gradient(d), w) for d, w in
                   zip(jax.tree.leaves(correction), jax.tree.leaves(params)))
        return value + term, aux

    def client_end(end):  # y_i - x as the client sent it (upload noise included)
        scale = 1.0 / (learning_rate * jnp.maximum(momentum_steps(end.steps, momentum), 1.0))
        new = jax.tree.map(lambda ci, c, u: ci - c - u * scale, end.start.state,
                           end.start.server, fsc.sent_update(end, end.start.state))
        return new, jax.tree.map(jnp.subtract, new, end.start.state)  # (c_i+, delta c_i)

    def server_update(s):
        share = s.participating.astype(jnp.float32) / num_clients  # (1 / N) sum over S
        return s.params, jax.tree.map(jnp.add, s.state, s.reduce(s.messages, share))

    def server_metrics(c):  # logged each round: metrics.jsonl "server", trackers, CSV
        return {"c_norm": jnp.sqrt(sum(jnp.vdot(x, x) for x in jax.tree.leaves(c)))}

    zeros = lambda params: jax.tree.map(jnp.zeros_like, params)
    hooks = fsc.Hooks(client_init=zeros, server_init=zeros, client_end=client_end,
                      server_update=server_update, server_state_sent=True,  # c goes down
                      server_metrics=server_metrics)
    return algorithm._replace(name="scaffold", client_loss=loss, hooks=hooks)


def scaffold(context: fsc.BuildContext) -> fsc.Algorithm:
    """What ``--algorithm examples/own_algorithm.py:scaffold`` calls: SCAFFOLD on FedAvg at
    the run's model sizes and client SGD."""
    fedavg = fsc.fedavg(context.text_classifier(), context.learning_rate, context.momentum)
    return with_control_variates(fedavg, context.learning_rate, context.momentum,
                                 context.num_clients)


if __name__ == "__main__":  # the library route: ten rounds on the synthetic scene
    scene = fsc.synthetic_scene(num_clients=4)
    model = fsc.TextClassifier(vocab_size=len(scene.vocab), embed_dim=32, hidden=16)
    algorithm = with_control_variates(fsc.fedavg(model, 0.1, 0.0), 0.1, 0.0, scene.num_clients)
    step = fsc.make_round_step(algorithm, batch_size=8, local_epochs=2)
    state, clients = fsc.init_states(algorithm, fsc.init_params(model, jax.random.key(0)),
                                     scene.num_clients)
    train, test = fsc.client_data(scene.train, local_vocab=True), fsc.client_data(scene.test)
    ag = fsc.make_evaluate(algorithm.global_predict)
    for r in range(10):
        state, clients, metrics = step(state, clients, train, jax.random.key(1))
        print(r + 1, float(metrics.train_loss.mean()),
              float(fsc.mean_accuracy(ag(state.params, test))))
