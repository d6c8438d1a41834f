import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_sc.core.evaluate import make_evaluate, mean_accuracy
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import synthetic_scene
from fedjax_sc.models.text_classifier import TextClassifier, init_params


def test_accuracy_per_client_matches_numpy_for_global_and_stacked_params():
    scene = synthetic_scene(num_clients=3, train_per_client=8, test_per_client=7, max_len=9)
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=6, hidden=3, mlp_hidden=4)
    params = init_params(model, jax.random.key(0))
    test = client_data(scene.test)
    acc = np.asarray(make_evaluate(model, batch_size=4)(params, test))
    logits = jax.jit(model.apply)  # one compiled program per client's size
    for k in range(3):
        n = int(scene.test.counts[k])
        pred = np.argmax(logits({"params": params}, scene.test.tokens[k, :n]), -1)
        np.testing.assert_allclose(acc[k], np.mean(pred == scene.test.labels[k, :n]), rtol=1e-6)
    assert mean_accuracy(jnp.asarray(acc)) == pytest.approx(acc.mean())
    stacked = jax.tree.map(lambda x: jnp.stack([x] * 3), params)
    acc2 = make_evaluate(model, batch_size=5, stacked_params=True)(stacked, test)
    np.testing.assert_allclose(acc2, acc, rtol=1e-6)
    with pytest.raises(ValueError, match="global vocabulary"):
        make_evaluate(model)(params, client_data(scene.train, local_vocab=True))
