"""PFL-DA's gated-mixture likelihood (Peterson et al. 2019): the log of the mixture
probabilities, computed in log space so that badly wrong examples keep their gradient."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms.pfl_da import mixture_log_likelihood
from fedjax_sc.models.private_shared import TwoBranchOutput, mode_probabilities


def _out(shared, private, gate_logit):
    f = jnp.zeros((len(gate_logit), 2))
    return TwoBranchOutput(jnp.asarray(shared, jnp.float32), jnp.asarray(private, jnp.float32),
                           f, f, jnp.asarray(gate_logit, jnp.float32))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_it_is_the_log_of_the_mixture_probability(seed):
    r = np.random.default_rng(seed)
    out = _out(r.normal(0, 3, (4, 3)), r.normal(0, 3, (4, 3)), r.normal(0, 3, 4))
    labels = jnp.asarray(r.integers(0, 3, 4))
    picked = mode_probabilities(out)["sp"][jnp.arange(4), labels]
    np.testing.assert_allclose(mixture_log_likelihood(out, labels), jnp.log(picked),
                               rtol=1e-5, atol=1e-6)


def test_a_badly_wrong_example_keeps_its_loss_and_gradient():
    """Both experts wrong by a logit gap of 100 (a probability of e^-100, below float32):
    the loss is ~100, not a clipped log(1e-12) = 27.6, and the gradient is not zero."""
    labels = jnp.asarray([0])

    def nll(gap, z):
        logits = jnp.stack([jnp.zeros(1), gap * jnp.ones(1)], -1)
        return -mixture_log_likelihood(_out(logits, logits, z), labels)[0]

    loss, (d_gap, d_z) = jax.value_and_grad(nll, argnums=(0, 1))(100.0, jnp.asarray([40.0]))
    assert abs(float(loss) - 100.0) < 1e-3 and abs(float(d_gap) - 1.0) < 1e-3
    assert np.isfinite(float(d_z[0]))  # a saturated gate (sigmoid(40) == 1.0 in float32)
