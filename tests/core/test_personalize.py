"""The Ap phase (Eq. 16): zero steps equal the personalised accuracy; rows training is exact."""

import jax
import numpy as np
import pytest

from fedjax_sc.algorithms.optimizers import client_sgd
from fedjax_sc.core import round as rnd
from fedjax_sc.core.evaluate import make_personal_evaluate
from fedjax_sc.core.personalize import Personalization, make_personalize
from fedjax_sc.data.client_data import client_data
from fedjax_sc.data.scenes import synthetic_scene
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run.registry import build_algorithm


@pytest.fixture(scope="module")
def setting():
    scene = synthetic_scene(num_clients=3, train_per_client=12, test_per_client=9, max_len=8,
                            seed=5)
    alg = build_algorithm("kteps", vocab_size=len(scene.vocab), num_classes=2, embed_dim=4,
                          hidden=3, mlp_hidden=4, learning_rate=0.2)
    state, clients = rnd.init_states(alg, init_params(alg.model, jax.random.key(1)), 3)
    state, clients, _ = rnd.make_round_step(alg, batch_size=4, local_epochs=1)(
        state, clients, client_data(scene.train, local_vocab=True), jax.random.key(2))
    return scene, alg, state, clients


def test_zero_fine_tuning_steps_give_the_personalised_accuracy(setting):
    scene, alg, state, clients = setting
    test = client_data(scene.test)
    before = make_personal_evaluate(alg.predict, batch_size=4)((state.params, clients.private),
                                                               test)
    run = make_personalize(alg, client_sgd(0.01), batch_size=4, num_evals=3, steps_per_eval=0,
                           eval_batch_size=5)
    result = run(state, clients, client_data(scene.train, local_vocab=True), test,
                 jax.random.key(0))
    assert set(result.curve) == {"s", "p", "sp"}
    for mode, acc in before.items():
        assert result.curve[mode].shape == (3, 4)
        for t in range(4):
            np.testing.assert_allclose(result.curve[mode][:, t], acc, rtol=1e-6)
        np.testing.assert_allclose(result.ap_per_client(mode), acc, rtol=1e-6)


def test_fine_tuning_on_local_rows_equals_dense_and_moves_the_accuracy(setting):
    scene, alg, state, clients = setting
    run = make_personalize(alg, client_sgd(0.5), batch_size=4, num_evals=2, steps_per_eval=3)
    test = client_data(scene.test)
    curves = [run(state, clients, client_data(scene.train, local_vocab=local), test,
                  jax.random.key(0)).curve for local in (False, True)]
    for mode in curves[0]:
        np.testing.assert_allclose(curves[0][mode], curves[1][mode], atol=1e-6)
    # the fine-tuning moves some client's accuracy between its first and last evaluation
    assert any(not np.allclose(c[:, 0], c[:, -1]) for c in curves[1].values())
    with pytest.raises(ValueError, match="global vocabulary"):
        run(state, clients, client_data(scene.train), client_data(scene.test, True),
            jax.random.key(0))


def test_per_example_record_of_the_fine_tuned_models_averages_to_ap(setting):
    scene, alg, state, clients = setting
    test = client_data(scene.test)
    mask = np.asarray(test.mask)
    for num_evals in (3, 0):
        run = make_personalize(alg, client_sgd(0.5), batch_size=4, num_evals=num_evals,
                               steps_per_eval=2)
        result = run(state, clients, client_data(scene.train, local_vocab=True), test,
                     jax.random.key(0))
        for mode, correct in result.correct.items():
            assert correct.shape == mask.shape and correct.dtype == np.int32
            assert correct.min() >= 0 and correct.max() <= max(num_evals, 1)
            assert not correct[~mask].any()  # padding is never right
            share = correct.sum(1) / (max(num_evals, 1) * mask.sum(1))
            np.testing.assert_allclose(share, result.ap_per_client(mode), rtol=1e-6)


def test_ap_is_the_mean_of_the_curve_after_fine_tuning():
    curve = np.array([[0.5, 0.6, 0.8], [0.2, 0.4, 0.4]])
    result = Personalization({"full": curve}, steps_per_eval=5)
    np.testing.assert_allclose(result.ap_per_client("full"), [0.7, 0.4])
    assert result.ap("full") == pytest.approx(0.55)
    np.testing.assert_allclose(result.ap_t("full"), [0.35, 0.5, 0.6])


@pytest.mark.parametrize("member_axis", ["vmap", "map"])
def test_a_population_of_ap_phases_is_each_member_alone(setting, member_axis):
    """Members with their own states, keys and traced fine-tuning LR in one program: each
    member's curves and per-example record are its own :func:`make_personalize` result."""
    from fedjax_sc.core import population
    from fedjax_sc.core.personalize import make_population_personalize
    scene, alg, state, clients = setting
    train, test = client_data(scene.train, local_vocab=True), client_data(scene.test)
    lrs, keys = [0.5, 0.05], [jax.random.key(0), jax.random.key(3)]
    other = jax.tree.map(lambda x: x * 0.9, state)  # a second member's own model
    run = make_population_personalize(lambda v: (alg, client_sgd(v["lr"])), batch_size=4,
                                      num_evals=2, steps_per_eval=3, member_axis=member_axis)
    got = run(population.stack([state, other]), population.stack([clients, clients]), train,
              test, jax.numpy.stack(keys), {"lr": np.asarray(lrs, np.float32)})
    for result, s, lr, key in zip(got, [state, other], lrs, keys):
        alone = make_personalize(alg, client_sgd(lr), batch_size=4, num_evals=2,
                                 steps_per_eval=3)(s, clients, train, test, key)
        for mode in alone.curve:
            np.testing.assert_allclose(result.curve[mode], alone.curve[mode], atol=1e-6)
            np.testing.assert_array_equal(result.correct[mode], alone.correct[mode])
    with pytest.raises(ValueError, match="member_axis"):
        make_population_personalize(lambda v: (alg, client_sgd(0.1)), batch_size=4,
                                    member_axis="pmap")


@pytest.mark.parametrize("block", [1, 2])
def test_clients_in_blocks_fine_tune_as_all_at_once(setting, block):
    """``clients_per_call``: the clients in blocks of 1 or 2 (3 clients: the last block of 2
    padded) give every client's curve and per-example record as one call of all does."""
    scene, alg, state, clients = setting
    args = (state, clients, client_data(scene.train, local_vocab=True),
            client_data(scene.test), jax.random.key(4))
    kw = dict(batch_size=4, num_evals=2, steps_per_eval=3, eval_batch_size=5)
    whole = make_personalize(alg, client_sgd(0.5), **kw)(*args)
    blocks = make_personalize(alg, client_sgd(0.5), clients_per_call=block, **kw)(*args)
    for mode in whole.curve:
        assert blocks.curve[mode].shape == whole.curve[mode].shape == (3, 3)
        np.testing.assert_allclose(blocks.curve[mode], whole.curve[mode], atol=1e-6)
        np.testing.assert_array_equal(blocks.correct[mode], whole.correct[mode])
    with pytest.raises(ValueError, match="clients_per_call must be >= 1"):
        make_personalize(alg, client_sgd(0.5), clients_per_call=0, **kw)


def test_a_fine_tuning_gone_non_finite_scores_zero_not_class_zeros_share(setting):
    scene, alg, state, clients = setting
    import optax
    blow_up = optax.scale(jax.numpy.float32(np.inf))  # the first step makes every param inf
    run = make_personalize(alg, blow_up, batch_size=4, num_evals=2, steps_per_eval=1)
    result = run(state, clients, client_data(scene.train, local_vocab=True),
                 client_data(scene.test), jax.random.key(0))
    for mode, curve in result.curve.items():
        assert (curve[:, 0] > 0).all(), mode  # the model before fine-tuning answers
        np.testing.assert_array_equal(curve[:, 1:], 0.0)
        assert result.ap(mode) == 0.0
    # and the result says which clients went non-finite, from which evaluation on
    k = result.curve[next(iter(result.curve))].shape[0]
    np.testing.assert_array_equal(result.finite[:, 0], True)
    np.testing.assert_array_equal(result.nonfinite_from(), np.ones(k))
    from fedjax_sc.run.finish import diverged_clients
    assert diverged_clients(result, scene.client_names)[0] == f"{scene.client_names[0]} from t = 1"
    # a fine-tuning that stays finite names no client
    calm = make_personalize(alg, client_sgd(0.01), batch_size=4, num_evals=2, steps_per_eval=1)
    ok = calm(state, clients, client_data(scene.train, local_vocab=True),
              client_data(scene.test), jax.random.key(0))
    np.testing.assert_array_equal(ok.nonfinite_from(), -np.ones(k))
    assert diverged_clients(ok) == []


def test_the_ap_phase_fine_tunes_with_the_algorithms_personal_loss_where_it_has_one(setting):
    """Algorithm.personal_loss replaces client_loss in the Ap phase only: a training loss
    that would leave the model where it is (scaled by 0) fine-tunes as the base loss there."""
    scene, alg, state, clients = setting
    frozen = lambda *a: jax.tree.map(lambda x: 0.0 * x, alg.client_loss(*a))  # noqa: E731
    curves = {}
    for name, variant in (("base", alg), ("frozen", alg._replace(client_loss=frozen)),
                          ("own", alg._replace(client_loss=frozen,
                                               personal_loss=alg.client_loss))):
        run = make_personalize(variant, client_sgd(0.5), batch_size=4, num_evals=2,
                               steps_per_eval=3)
        curves[name] = run(state, clients, client_data(scene.train, local_vocab=True),
                           client_data(scene.test), jax.random.key(0)).curve
    for mode in curves["base"]:
        np.testing.assert_array_equal(curves["own"][mode], curves["base"][mode])
        np.testing.assert_array_equal(curves["frozen"][mode][:, 0], curves["frozen"][mode][:, -1])
    assert any(not np.array_equal(c[:, 0], c[:, -1]) for c in curves["base"].values())
