import jax
import jax.numpy as jnp
import optax
import pytest
from flax import traverse_util

from fedjax_sc.algorithms.masking import (
    PRIVATE,
    SHARED,
    label_leaves,
    leaf_paths,
    matching,
    merge,
    select,
)
from fedjax_sc.models.text_classifier import TextClassifier, init_params

FEDPER = {PRIVATE: r"^classifier/", SHARED: [r"^embedding/", r"^encoder/"]}


@pytest.fixture(scope="module")
def params():
    return init_params(TextClassifier(vocab_size=9, embed_dim=4, hidden=2, mlp_hidden=3),
                       jax.random.key(0))


def test_labels_split_and_merge_round_trip(params):
    labels = label_leaves(params, FEDPER)
    private, shared = select(params, labels, PRIVATE), select(params, labels, SHARED)
    assert set(private) == {"classifier"} and set(shared) == {"embedding", "encoder"}
    assert all(p.startswith("classifier/") for p in leaf_paths(private))
    restored = merge(shared, private)
    assert jax.tree.structure(restored) == jax.tree.structure(params)
    jax.tree.map(lambda a, b: None if (a == b).all() else pytest.fail("changed"), restored,
                 params)
    with pytest.raises(ValueError, match="more than one part"):
        merge(shared, shared)


def test_coverage_check_lists_the_offending_paths(params):
    with pytest.raises(ValueError, match=r"matched by no rule: \['classifier/"):
        label_leaves(params, {SHARED: [r"^embedding/", r"^encoder/"]})
    with pytest.raises(ValueError, match="matched by several rules"):
        label_leaves(params, {PRIVATE: r"^classifier/", SHARED: r"."})
    with pytest.raises(ValueError, match=r"rules matching no leaf: \['\^clasifier/'\]"):
        label_leaves(params, {PRIVATE: [r"^classifier/", r"^clasifier/"],
                              SHARED: [r"^embedding/", r"^encoder/"]})


def test_labels_drive_optax_multi_transform(params):
    labels = label_leaves(params, {"embedding": r"^embedding/", "rest": r"^(encoder|classifier)/"})
    opt = optax.multi_transform({"embedding": optax.sgd(0.01), "rest": optax.sgd(0.1)}, labels)
    grads = jax.tree.map(jnp.ones_like, params)
    updates, _ = opt.update(grads, opt.init(params), params)
    assert float(updates["embedding"]["embedding"][0, 0]) == pytest.approx(-0.01)
    assert float(updates["classifier"]["output"]["bias"][0]) == pytest.approx(-0.1)


def test_matching_marks_exactly_the_leaves_the_rule_finds(params):
    mask = matching(params, r"^classifier/output/")
    assert jax.tree.structure(mask) == jax.tree.structure(params)
    marked = {"/".join(p) for p, m in traverse_util.flatten_dict(mask).items() if m}
    assert marked == {"classifier/output/bias", "classifier/output/kernel"}
    with pytest.raises(ValueError, match=r"rule '\^head/' matches no leaf of \['embedding/"):
        matching(params, r"^head/")
