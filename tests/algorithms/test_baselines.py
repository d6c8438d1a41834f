"""Invariants of the baselines: FedProx, FedMMD, FedFusion, FedKC, Indiv, FS, ASP."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms import fedkc as fedkc_lib
from fedjax_sc.algorithms.asp import orthogonality
from fedjax_sc.algorithms.base import Batch, ClientStart
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.fedfusion import fedfusion
from fedjax_sc.algorithms.fedmmd import fedmmd, mmd_penalty
from fedjax_sc.algorithms.fedprox import fedprox, squared_distance
from fedjax_sc.algorithms.indiv import indiv
from fedjax_sc.algorithms.losses import MULTI_KERNEL_VARIANCES, CrossEntropy, mmd
from fedjax_sc.core import communication
from fedjax_sc.core import round as rnd
from fedjax_sc.core.copies import freeze, make_copies, without_copies
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.asp import gradient_reversal
from fedjax_sc.models.fusion import FusionClassifier
from fedjax_sc.models.text_classifier import TextClassifier, init_params

DIMS = dict(embed_dim=8, hidden=4, mlp_hidden=6)  # conftest's TINY_DIMS: the shared scene's model


@pytest.fixture(scope="module")
def params(model):
    return init_params(model, jax.random.key(0))


@pytest.fixture(scope="module")
def fedavg_round(scene, model, params):
    """One FedAvg round (lr 0.1) from ``params``: the reference of the plug-ins' tests."""
    return _run(fedavg(model, 0.1), scene, params)


def _run(algorithm, scene, params, rounds=1, data=None, builder=rnd.build_round):
    data = data or client_data(scene.train, local_vocab=True)
    state, clients = rnd.init_states(algorithm, params, data.num_clients)
    step = jax.jit(builder(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, metrics = step(state, clients, data, jax.random.key(3))
    return state, clients, metrics


def test_fedmmd_reads_the_features_of_its_cross_entropy_as_the_generic_plug_in_recomputes_them(
        model, params):
    fused = fedmmd(model, 0.1, weight=0.5)
    assert isinstance(fused.client_loss, CrossEntropy)  # the BiGRU runs once per step
    plain = fedavg(model, 0.1)
    generic = mmd_penalty(plain._replace(client_loss=lambda *a: plain.client_loss(*a)), 0.5)
    assert not isinstance(generic.client_loss, CrossEntropy)
    tokens = jax.random.randint(jax.random.key(1), (5, 7), 2, model.vocab_size)
    batch = Batch(tokens, jnp.array([0, 1, 1, 0, 1]), jnp.array([True] * 4 + [False]))
    start = ClientStart(jax.tree.map(lambda x: x * 0.9, params))
    grad = lambda a: jax.jit(jax.value_and_grad(  # one program each, not op by op
        lambda p: a.client_loss(p, batch, jax.random.key(0), start), has_aux=True))(params)
    (v1, aux1), g1 = grad(fused)
    (v2, aux2), g2 = grad(generic)
    assert aux1["mmd"] > 0 and set(aux1) == set(aux2)
    chex.assert_trees_all_close((v1, aux1, g1), (v2, aux2, g2), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("build", [lambda m: fedprox(m, 0.1, mu=0.0),
                                   lambda m: fedmmd(m, 0.1, weight=0.0)],
                         ids=["fedprox", "fedmmd"])
def test_zero_weight_plug_in_equals_fedavg(scene, model, params, fedavg_round, build):
    ours, _, metrics = _run(build(model), scene, params)
    reference, _, _ = fedavg_round
    chex.assert_trees_all_close(ours.params, reference.params, atol=1e-6)
    assert set(metrics.aux) & {"proximal", "mmd"}


def test_proximal_term_pulls_towards_the_start(scene, model, params, fedavg_round):
    free, _, _ = fedavg_round
    held, _, metrics = _run(fedprox(model, 0.1, mu=3.0), scene, params)
    assert squared_distance(held.params, params) < 0.5 * squared_distance(free.params, params)
    assert float(metrics.aux["proximal"].min()) > 0
    with pytest.raises(ValueError, match="mu"):
        fedprox(model, mu=-1.0)


@pytest.mark.parametrize("kernel", ["multi", "median"])
@settings(max_examples=4, deadline=None)
@given(b=st.integers(2, 6), f=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_mmd_of_identical_features_is_zero_and_positive_otherwise(kernel, b, f, seed):
    same, apart, padded_apart = _mmds(b, f, jax.random.key(seed), kernel)
    assert float(same) == pytest.approx(0.0, abs=1e-6)
    assert float(apart) > 1e-3
    # padding rows are left out of both samples
    assert float(padded_apart) == pytest.approx(float(apart), rel=1e-5)


@functools.partial(jax.jit, static_argnums=(0, 1, 3))  # one program per shape and kernel
def _mmds(b, f, key, kernel):
    x = jax.random.normal(key, (b, f))
    mask = jnp.arange(b + 2) < b
    padded = lambda a, v: jnp.concatenate([a, jnp.full((2, f), v)])
    one = functools.partial(mmd, kernel=kernel)
    return one(x, x), one(x, x + 3.0), one(padded(x, 9.0), padded(x + 3.0, -9.0), mask)


def test_multi_kernel_mmd_is_the_two_stream_codes_estimate():
    """The released FedMMD code's MMD: beta = 1 / (2 s) per variance s, the kernels summed,
    mean K(x, x) + mean K(y, y) - 2 mean K(x, y), floored at 0 (recomputed in numpy)."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(6, 4)), 0.3 * rng.normal(size=(6, 4)) + 0.5
    variances = np.array(MULTI_KERNEL_VARIANCES)

    def kern(a, b):
        d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        return np.exp(-d2[None] / (2 * variances[:, None, None])).sum(0)

    want = max(kern(x, x).mean() + kern(y, y).mean() - 2 * kern(x, y).mean(), 0.0)
    got = float(mmd(jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.float32)))
    assert got == pytest.approx(want, rel=1e-4)
    with pytest.raises(ValueError, match="kernel"):
        mmd(jnp.asarray(x), jnp.asarray(y), kernel="linear")
    with pytest.raises(ValueError, match="bandwidth"):
        mmd(jnp.asarray(x), jnp.asarray(y), bandwidth=1.0)


def test_gradient_reversal_flips_the_sign():
    f = lambda x, s: jnp.sum(jnp.sin(gradient_reversal(x, s)))
    x = jnp.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(gradient_reversal(x, 0.5), x)
    np.testing.assert_allclose(jax.grad(f)(x, 1.0), -jnp.cos(x), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(f)(x, 0.5), -0.5 * jnp.cos(x), rtol=1e-6)


def test_orthogonality_is_zero_for_orthogonal_features():
    s = jnp.array([[1.0, 0.0], [0.0, 0.0]])
    p = jnp.array([[0.0, 0.0], [0.0, 2.0]])
    assert float(orthogonality(s, p, jnp.array([True, True]))) == 0.0
    assert float(orthogonality(s, s + p, jnp.array([True, True]))) == 1.0
    assert float(orthogonality(s, s + p, jnp.array([False, True]))) == 0.0
    # a padding row has all-zero features: the gradient must stay finite there
    grads = jax.grad(lambda a: orthogonality(a, s + p, jnp.array([True, False])))(s)
    assert bool(jnp.all(jnp.isfinite(grads)))


def test_fusion_conv_starts_at_pytorchs_default_init_not_the_plain_model(scene):
    fused = FusionClassifier(vocab_size=len(scene.vocab), fusion="conv", **DIMS)
    conv = init_params(fused, jax.random.key(1))["fuse"]["conv"]
    two_f, f = conv["kernel"].shape
    bound = two_f ** -0.5  # nn.Conv2d / nn.Linear: U(+-1/sqrt(fan_in)) for weight and bias
    for leaf in (conv["kernel"], conv["bias"]):
        assert float(jnp.abs(leaf).max()) <= bound
        assert float(jnp.abs(leaf).max()) > 0.5 * bound  # spread over the range, not zeros
    assert two_f == 2 * f
    np.testing.assert_allclose(float(conv["kernel"].std()), bound / np.sqrt(3), rtol=0.2)
    with pytest.raises(ValueError, match="fusion_init"):
        init_params(FusionClassifier(vocab_size=len(scene.vocab), fusion_init="eye", **DIMS),
                    jax.random.key(1))


@pytest.mark.parametrize("kind", ["multi", "single"])
def test_fusion_mix_starts_on_the_local_features_and_learns_the_global_share(scene, kind):
    """Yao et al.'s ``FeatureFuse``: ``gamma * global + (1 - gamma) * local``, gamma at 0."""
    fused = FusionClassifier(vocab_size=len(scene.vocab), fusion=kind, **DIMS)
    plain = TextClassifier(vocab_size=len(scene.vocab), **DIMS)
    params = make_copies(init_params(fused, jax.random.key(1)), fedfusion(fused).local_copies)
    gamma = params["fuse"]["gamma"]
    assert gamma.shape == ((2 * DIMS["hidden"],) if kind == "multi" else (1,))
    assert float(jnp.abs(gamma).max()) == 0.0
    other = init_params(fused, jax.random.key(2))
    params = {**params, "reference_encoder": other["encoder"]}  # global features now differ
    tokens = jnp.asarray(scene.test.tokens[0, :4])
    without = {k: params[k] for k in ("embedding", "encoder", "classifier")}
    apply = jax.jit(fused.apply)
    np.testing.assert_allclose(apply({"params": params}, tokens),
                               jax.jit(plain.apply)({"params": without}, tokens), atol=1e-6)
    # gamma = 1 reads the global (reference) features only
    on_global = {**params, "fuse": {"gamma": jnp.ones_like(gamma)},
                 "encoder": other["encoder"]}
    np.testing.assert_allclose(apply({"params": on_global}, tokens),
                               apply({"params": {**on_global, "encoder": params["encoder"]}},
                                     tokens), atol=1e-6)


def test_fusion_starts_as_the_plain_model_and_uses_the_frozen_reference(scene):
    fused = FusionClassifier(vocab_size=len(scene.vocab), fusion="conv",
                             fusion_init="half_identity", **DIMS)
    plain = TextClassifier(vocab_size=len(scene.vocab), **DIMS)
    alg = fedfusion(fused)
    params = make_copies(init_params(fused, jax.random.key(1)), alg.local_copies)
    tokens = jnp.asarray(scene.test.tokens[0, :4])
    without = {k: params[k] for k in ("embedding", "encoder", "classifier")}
    np.testing.assert_allclose(jax.jit(fused.apply)({"params": params}, tokens),
                               jax.jit(plain.apply)({"params": without}, tokens), atol=1e-6)
    other = init_params(fused, jax.random.key(2))
    moved = {**params, "reference_encoder": other["encoder"]}
    batch = Batch(tokens, jnp.asarray(scene.test.labels[0, :4]), jnp.ones(4, bool))
    # compiled once each (op by op, this test compiled some 120 small programs)
    loss_at = jax.jit(lambda p: alg.client_loss(p, batch, None, ClientStart(p))[0])
    assert float(loss_at(params)) != float(loss_at(moved))  # the reference enters the loss
    grads = jax.jit(jax.grad(loss_at))(moved)
    for name, tree in grads.items():
        top = max(float(jnp.abs(g).max()) for g in jax.tree.leaves(tree))
        assert (top == 0.0) == name.startswith("reference_"), (name, top)
    # whatever reaches the reference (DP-SGD's noise), local training does not move it
    noisy = jax.tree.map(jnp.ones_like, params)
    frozen = freeze(alg.client_optimizer, alg.local_copies)
    updates, _ = frozen.update(noisy, frozen.init(params), params)
    for name, tree in updates.items():
        moves = any(bool(jnp.any(u != 0)) for u in jax.tree.leaves(tree))
        assert moves != name.startswith("reference_"), name
    # and keeps no optimizer state for it: the momentum of the trained leaves only
    size = lambda tree: sum(x.size for x in jax.tree.leaves(tree))  # noqa: E731
    trained = without_copies(params, alg.local_copies)
    assert size(frozen.init(params)) == size(alg.client_optimizer.init(trained)) > 0
    probs = jax.jit(alg.predict)(params, tokens)["full"]
    np.testing.assert_allclose(probs.sum(-1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("private_embedding", [True, False], ids=["private", "shared"])
def test_fusion_global_model_keeps_the_extractor_its_clients_trained_against(
        scene, private_embedding):
    """Yao et al.'s FedFusion: after round r the global model's reference extractor is the
    extractor of round r - 1 (the averaged frozen copies), the one the clients fused with."""
    fused = FusionClassifier(vocab_size=len(scene.vocab), **DIMS)
    alg = fedfusion(fused, 0.1, private_embedding=private_embedding)
    data = client_data(scene.train, local_vocab=True)
    state, clients = rnd.init_states(alg, init_params(fused, jax.random.key(1)),
                                     data.num_clients)
    chex.assert_trees_all_equal(state.params["reference_encoder"], state.params["encoder"])
    step = jax.jit(rnd.build_round(alg, batch_size=4, local_epochs=1))
    for r in range(2):
        before_state, before_clients = state, clients
        state, clients, _ = step(state, clients, data, jax.random.key(r))
        chex.assert_trees_all_close(state.params["reference_encoder"],
                                    before_state.params["encoder"], atol=1e-6)
        assert not np.allclose(state.params["encoder"]["recurrent_kernel"],
                               before_state.params["encoder"]["recurrent_kernel"])
        where = clients.private if private_embedding else state.params
        before = before_clients.private if private_embedding else before_state.params
        assert ("embedding" in clients.private) == private_embedding
        # every client's reference table is its own table at the start of the round
        chex.assert_trees_all_close(where["reference_embedding"], before["embedding"],
                                    atol=1e-6)
    # local-vocabulary rows train exactly what the dense tables train, the copy included
    dense = rnd.init_states(alg, init_params(fused, jax.random.key(1)), data.num_clients)
    for r in range(2):
        dense = step(*dense, client_data(scene.train, local_vocab=False), jax.random.key(r))[:2]
    chex.assert_trees_all_close((state, clients), dense, atol=2e-6)


def test_fusion_weight_follows_yao_et_als_server_momentum(scene):
    """``multi``: the global gamma is ``0.9 * gamma_old + 0.1 * mean`` (Yao et al.'s
    ``update_shadow``), every other leaf the plain mean; ``conv`` has no server rule, and FedOpt
    refuses to replace the rule."""
    from fedjax_sc.algorithms.fedopt import fedopt
    fused = FusionClassifier(vocab_size=len(scene.vocab), fusion="multi", **DIMS)
    data = client_data(scene.train)
    start = init_params(fused, jax.random.key(1))
    start = {**start, "fuse": {"gamma": jnp.full_like(start["fuse"]["gamma"], 0.5)}}
    out = {}
    for mu in (0.9, 0.0):
        alg = fedfusion(fused, 0.1, private_embedding=False, gamma_momentum=mu)
        state, clients = rnd.init_states(alg, start, data.num_clients)
        step = jax.jit(rnd.build_round(alg, batch_size=4, local_epochs=1))
        out[mu] = step(state, clients, data, jax.random.key(0))[0].params
    mean = out[0.0]["fuse"]["gamma"]
    assert float(jnp.abs(mean - 0.5).max()) > 5e-5  # the clients moved it, by far over atol
    np.testing.assert_allclose(out[0.9]["fuse"]["gamma"], 0.9 * 0.5 + 0.1 * mean, atol=2e-7)
    chex.assert_trees_all_close({k: v for k, v in out[0.9].items() if k != "fuse"},
                                {k: v for k, v in out[0.0].items() if k != "fuse"}, atol=1e-6)
    conv = FusionClassifier(vocab_size=8, fusion="conv", **DIMS)
    assert fedfusion(conv).server_optimizer is None
    with pytest.raises(ValueError, match="already has its own server update"):
        fedopt(fedfusion(fused), "adam")
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        fedfusion(fused, gamma_momentum=1.0)


def test_fusion_reference_is_never_sent_and_survives_noise_and_a_server_optimizer(scene):
    """The reference is a local copy: not uploaded (so neither noised nor counted) and remade
    by the server, exactly, even under FedOpt's Adam, which would turn the rounding of a mean
    of identical copies into a full step."""
    import optax

    from fedjax_sc.algorithms.noise import gaussian_noise
    fused = FusionClassifier(vocab_size=len(scene.vocab), **DIMS)
    alg = fedfusion(fused, 0.1)._replace(server_optimizer=optax.adam(0.05),
                                         upload=gaussian_noise(0.01))
    before, _, _ = _run(alg, scene, init_params(fused, jax.random.key(1)), rounds=1)
    after, _, _ = _run(alg, scene, init_params(fused, jax.random.key(1)), rounds=2)
    chex.assert_trees_all_equal(after.params["reference_encoder"], before.params["encoder"])
    data = client_data(scene.train, local_vocab=True)
    figures = communication.account(alg, after, data)
    sent = {k: v for k, v in after.params.items() if not k.startswith("reference_")}
    plain = communication.account(alg._replace(local_copies={}),
                                  after._replace(params=sent), data)
    np.testing.assert_array_equal(figures.upload_sent_floats, plain.upload_sent_floats)
    np.testing.assert_array_equal(figures.download_floats, plain.download_floats)


def test_kmeans_assigns_points_to_their_nearest_centre_and_ignores_padding():
    x = jnp.array([[0.0, 0.0], [0.1, 0.0], [5.0, 5.0], [5.1, 5.0], [100.0, 100.0]])
    mask = jnp.array([True, True, True, True, False])
    centres, assign = fedkc_lib.kmeans(x, mask, 2, 5, jax.random.key(0))
    got = sorted(np.asarray(centres).tolist())
    np.testing.assert_allclose(got, [[0.05, 0.0], [5.05, 5.0]], rtol=1e-5)
    assert assign[0] == assign[1] != assign[2] == assign[3]


def test_fedkc_consistency_uses_the_other_clients_only(scene, model, params):
    alg = fedkc_lib.fedkc(fedavg(model), num_clusters=2, iterations=3)
    data = client_data(scene.train)
    knowledge = jax.jit(jax.vmap(lambda t, y, m, k: alg.knowledge(params, t, y, m, k)))(
        data.tokens, data.labels, data.mask, jax.random.split(jax.random.key(0), 3))
    chex.assert_shape(knowledge["centroids"], (3, 2, 2 * DIMS["hidden"]))
    np.testing.assert_allclose(knowledge["probs"].sum(-1)[knowledge["sizes"] > 0], 1.0,
                               rtol=1e-5)
    np.testing.assert_array_equal(knowledge["sizes"].sum(-1), scene.train.counts)
    batch = Batch(data.tokens[0, :4], data.labels[0, :4], data.mask[0, :4])
    only_own = jax.tree.map(lambda a: a[:1], knowledge)
    loss = jax.jit(lambda k: alg.client_loss(params, batch, None, ClientStart(params, k, 0)))
    _, aux = loss(only_own)
    assert float(aux["consistency"]) == 0.0
    _, aux = loss(knowledge)
    assert float(aux["consistency"]) > 0.0
    state, _, metrics = _run(alg, scene, params)  # runs inside the compiled round
    chex.assert_tree_all_finite(state.params)
    assert float(metrics.aux["consistency"].min()) > 0.0


def test_a_client_that_does_not_train_sends_no_knowledge(scene, model, params):
    # every client sends 1 a round; the loss records how many senders it hears from: with
    # dropout, the clients that train hear only each other (a dropped one sends zeros)
    from fedjax_sc.core.heterogeneity import LocalWork
    base = fedavg(model, 0.1)

    def loss(p, batch, rng, start):
        value, aux = base.client_loss(p, batch, rng, start)
        return value, {**aux, "senders": jnp.sum(start.knowledge)}

    alg = base._replace(client_loss=loss, knowledge=lambda *_: jnp.float32(1.0))
    data = client_data(scene.train, local_vocab=True)
    step = jax.jit(rnd.build_round(alg, batch_size=4, local_epochs=1,
                                   work=LocalWork(dropout=0.5)))
    state, clients = rnd.init_states(alg, params, data.num_clients)
    for seed in range(20):  # a round in which some clients train and some do not
        _, _, metrics = step(state, clients, data, jax.random.key(seed))
        trained = np.asarray(metrics.steps) > 0
        if 0 < trained.sum() < len(trained):
            break
    else:
        pytest.fail("no round with dropped and training clients in 20 seeds")
    np.testing.assert_allclose(np.asarray(metrics.aux["senders"])[trained], trained.sum())


def test_indiv_never_communicates_and_trains_each_client_alone(scene, model, params):
    alg = indiv(model, 0.1)
    state, clients, _ = _run(alg, scene, params, rounds=2)
    assert state.params == {}
    comm = communication.account(alg, state, client_data(scene.train, local_vocab=True))
    assert comm.upload_sent_bytes.sum() == comm.download_bytes.sum() == 0
    # client 0 trained with the others equals client 0 trained on its own
    alone = client_data(type(scene.train)(*(np.asarray(getattr(scene.train, f))[:1] for f in
                                                ("tokens", "labels", "mask", "counts"))),
                            local_vocab=True)
    _, solo, _ = _run(alg, scene, params, rounds=2, data=alone)
    chex.assert_trees_all_close(jax.tree.map(lambda a: a[0], clients.private),
                                jax.tree.map(lambda a: a[0], solo.private), atol=1e-6)


def test_fedkc_exchange_never_sees_a_private_leaf(scene, params):
    # the exchange reaches every client: with a FURL private vector it would carry what the
    # vector learnt, so the combination is refused; without private leaves it is computed from
    # the downloaded shared params (the server's model)
    from fedjax_sc.run.registry import build_algorithm
    alg = build_algorithm("fedavg_kc", vocab_size=len(scene.vocab), num_classes=2, furl_dim=2,
                          learning_rate=0.1, **DIMS)
    model_params = init_params(alg.model, jax.random.key(0))
    with pytest.raises(ValueError, match="shared leaves only.*user/vector"):
        _run(alg, scene, model_params)
    seen = []
    plain = fedkc_lib.fedkc(fedavg(TextClassifier(vocab_size=len(scene.vocab), **DIMS)), 2, 1)
    spy = plain._replace(knowledge=lambda p, *a: (seen.append(p), plain.knowledge(p, *a))[1])
    jax.eval_shape(rnd.build_round(spy, batch_size=4, local_epochs=1),
                   *rnd.init_states(spy, params, 3), client_data(scene.train),
                   jax.random.key(0))
    # one client's downloaded model: the params' leaves, shapes and all (no client axis)
    assert seen and jax.tree.structure(seen[0]) == jax.tree.structure(params)
    chex.assert_trees_all_equal_shapes(seen[0], params)
