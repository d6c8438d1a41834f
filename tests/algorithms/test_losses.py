import jax
import jax.numpy as jnp
import numpy as np

from fedjax_sc.algorithms.base import Batch
from fedjax_sc.algorithms.losses import cross_entropy, masked_mean
from fedjax_sc.models.text_classifier import TextClassifier, init_params


def test_masked_mean_ignores_masked_rows_and_is_zero_when_all_masked():
    v = jnp.array([1.0, 2.0, 100.0])
    assert float(masked_mean(v, jnp.array([True, True, False]))) == 1.5
    assert float(masked_mean(v, jnp.zeros(3, bool))) == 0.0


def test_cross_entropy_matches_numpy_and_padded_rows_get_no_gradient():
    model = TextClassifier(vocab_size=12, embed_dim=4, hidden=2, mlp_hidden=3)
    params = init_params(model, jax.random.key(0))
    tokens = jnp.array([[2, 3, 0], [4, 5, 6], [7, 0, 0]], jnp.int32)
    labels = jnp.array([0, 1, 1])
    mask = jnp.array([True, True, False])
    loss = cross_entropy(model)
    value, aux = loss(params, Batch(tokens, labels, mask), jax.random.key(0))
    logits = np.asarray(model.apply({"params": params}, tokens), np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(value, -(logp[0, 0] + logp[1, 1]) / 2, rtol=1e-5)
    assert 0.0 <= float(aux["accuracy"]) <= 1.0
    grads = jax.grad(lambda p: loss(p, Batch(tokens, labels, mask), None)[0])(params)
    emb_grad = np.asarray(grads["embedding"]["embedding"])
    assert not emb_grad[7].any()  # token 7 occurs only in the masked row
