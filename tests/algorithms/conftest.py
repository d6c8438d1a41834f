"""Shared by the tests of the algorithms that own state."""

import jax
import pytest

from fedjax_sc.core import round as rnd
from fedjax_sc.models.text_classifier import init_params


def run_rounds(algorithm, model, data, rounds, num_clients):
    """``rounds`` compiled rounds (batch 4, one local epoch) from the model's seed-0 params;
    returns ``(server state, client states, the last round's metrics)``."""
    state, clients = rnd.init_states(algorithm, init_params(model, jax.random.key(0)),
                                     num_clients)
    step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, metrics = step(state, clients, data, jax.random.key(1))
    return state, clients, metrics


@pytest.fixture(scope="session")
def rounds():
    return run_rounds
