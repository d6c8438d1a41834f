"""Tests of fedjax_sc.data.scenes (scene building, synthetic scene, local vocabularies)."""

from __future__ import annotations

import numpy as np
import pytest

from fedjax_sc.data import scenes
from fedjax_sc.data.corpus import Corpus
from fedjax_sc.data.vocab import PAD, UNK


def mk(texts, labels, n_empty=0, n_latin1=0) -> Corpus:
    return Corpus(tuple(texts), np.asarray(labels, np.int32), "mem", n_empty, n_latin1)


def small_corpora(dev=False):
    out = {
        "a": {"train": mk(["good film", "bad bad film", "good good good good"], [1, 0, 1]),
              "test": mk(["good", "awful"], [1, 0])},
        "b": {"train": mk(["bad plot", ""], [0, 1], n_empty=1, n_latin1=2),
              "test": mk(["plot good unseen"], [1])},
    }
    if dev:
        out["a"]["dev"] = mk(["film"], [1])
        out["b"]["dev"] = mk(["bad", "good", "plot"], [0, 1, 0])
    return out


def check_arrays(arr: scenes.ClientArrays, counts, max_len):
    k, n = len(counts), max(counts)
    assert arr.tokens.shape == (k, n, max_len) and arr.tokens.dtype == np.int32
    assert arr.labels.shape == (k, n) and arr.labels.dtype == np.int32
    assert arr.mask.shape == (k, n) and arr.mask.dtype == np.bool_
    assert arr.counts.dtype == np.int32 and arr.counts.tolist() == list(counts)
    np.testing.assert_array_equal(arr.mask.sum(1), arr.counts)
    for c in range(k):
        assert arr.mask[c, : counts[c]].all()
    assert (arr.labels[~arr.mask] == 0).all()
    assert (arr.tokens[~arr.mask] == PAD).all()


def test_build_scene_federated_vocab_and_shapes():
    sc = scenes.build_scene("toy", small_corpora(), num_classes=2, max_len=3, vocab_size=3)
    # Pooled train counts: good 5, bad 3, film 2, plot 1 -> top 3 = good, bad, film.
    assert sc.vocab.words == ("<pad>", "<unk>", "good", "bad", "film")
    assert sc.client_names == ("a", "b") and sc.num_clients == 2 and sc.dev is None
    check_arrays(sc.train, [3, 2], 3)
    check_arrays(sc.test, [2, 1], 3)
    np.testing.assert_array_equal(sc.train.tokens[0], [[2, 4, 0], [3, 3, 4], [2, 2, 2]])
    np.testing.assert_array_equal(sc.train.tokens[1], [[3, 1, 0], [0, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(sc.test.tokens[1, 0], [1, 2, 1])
    np.testing.assert_array_equal(sc.train.labels, [[1, 0, 1], [0, 1, 0]])
    sa, sb = sc.stats
    assert (sa["n_train"], sa["n_test"], sa["n_dev"]) == (3, 2, 0)
    assert sa["avg_len"] == pytest.approx(3.0) and sa["n_clipped"] == 1
    assert sa["local_vocab_size"] == 3 and sb["local_vocab_size"] == 1
    assert (sb["n_empty"], sb["n_latin1_lines"], sb["avg_len"]) == (1, 2, 1.0)


def test_build_scene_with_dev():
    sc = scenes.build_scene("toy", small_corpora(dev=True), 2, max_len=4, vocab_size=10)
    check_arrays(sc.dev, [1, 3], 4)
    assert [s["n_dev"] for s in sc.stats] == [1, 3]
    # Dev and test never feed the vocabulary: "awful"/"unseen" are absent.
    assert "awful" not in sc.vocab.index and "unseen" not in sc.vocab.index


def test_build_scene_label_out_of_range_names_client_split():
    corp = small_corpora()
    corp["b"]["test"] = mk(["x"], [2])
    with pytest.raises(ValueError, match="client 'b' split 'test'"):
        scenes.build_scene("toy", corp, num_classes=2, max_len=3, vocab_size=5)


@pytest.mark.parametrize("split", ["train", "test"])
def test_build_scene_refuses_an_empty_split_naming_its_file_unless_allowed(split):
    corp = small_corpora()
    corp["b"][split] = Corpus((), np.zeros(0, np.int32), f"data/b.task.{split}", 0, 0)
    with pytest.raises(ValueError, match=f"data/b.task.{split}: no examples .client 'b'"):
        scenes.build_scene("toy", corp, num_classes=2, max_len=3, vocab_size=5)
    sc = scenes.build_scene("toy", corp, num_classes=2, max_len=3, vocab_size=5,
                            allow_empty=True)
    assert getattr(sc, split).counts.tolist()[1] == 0
    corp["a"][split] = Corpus((), np.zeros(0, np.int32), f"data/a.task.{split}", 0, 0)
    with pytest.raises(ValueError, match=f"no client has any {split} example"):
        scenes.build_scene("toy", corp, 2, 3, 5, allow_empty=True)


def test_build_scene_inconsistent_dev():
    corp = small_corpora()
    corp["a"]["dev"] = mk(["x"], [0])
    with pytest.raises(ValueError, match="dev"):
        scenes.build_scene("toy", corp, 2, 3, 5)


def brute_force_local_vocab(tokens, mask):
    return sorted({PAD, UNK} | set(np.unique(tokens[mask]).tolist()))


def test_local_vocabularies_vs_brute_force():
    sc = scenes.synthetic_scene(num_clients=3, train_per_client=40, test_per_client=5, seed=3)
    ids, mask = scenes.local_vocabularies(sc.train)
    assert ids.dtype == np.int32 and mask.dtype == np.bool_ and ids.shape == mask.shape
    assert ids.shape[0] == 3 and ids.shape[1] == mask.sum(1).max()
    for k in range(3):
        expected = brute_force_local_vocab(sc.train.tokens[k], sc.train.mask[k])
        assert ids[k][mask[k]].tolist() == expected
        assert ids[k, :2].tolist() == [PAD, UNK]
        assert (ids[k][~mask[k]] == PAD).all()
        assert sc.stats[k]["local_vocab_size"] == len(expected) - 2


def test_local_vocabularies_ignores_padded_rows():
    arr = scenes.ClientArrays.stack(
        [np.array([[5, 3, 0]], np.int32), np.zeros((0, 3), np.int32)],
        [np.array([1]), np.zeros(0)], max_len=3)
    ids, mask = scenes.local_vocabularies(arr)
    np.testing.assert_array_equal(ids, [[0, 1, 3, 5], [0, 1, 0, 0]])
    np.testing.assert_array_equal(mask, [[1, 1, 1, 1], [1, 1, 0, 0]])


def test_synthetic_scene_shapes_and_sizes():
    sc = scenes.synthetic_scene()
    assert sc.name == "synthetic" and sc.num_classes == 2 and sc.max_len == 48
    assert sc.client_names == ("d0", "d1", "d2", "d3")
    check_arrays(sc.train, [160, 139, 117, 96], 48)
    check_arrays(sc.test, [200] * 4, 48)
    assert sc.dev is None
    assert sum(s["n_clipped"] for s in sc.stats) > 0  # some documents are clipped
    assert (sc.train.tokens[sc.train.mask][:, -1] == PAD).any()  # and some are padded
    assert len({s["local_vocab_size"] for s in sc.stats}) > 1
    labels = sc.train.labels[sc.train.mask]
    assert 0.35 < labels.mean() < 0.65
    words = sc.vocab.words
    assert any(w.startswith("d2_w") for w in words) and any(w.startswith("d1_pos_") for w in words)
    assert any(w.startswith("pos_") for w in words) and any(w.startswith("the_") for w in words)


def test_synthetic_scene_dev():
    sc = scenes.synthetic_scene(num_clients=2, train_per_client=20, test_per_client=7,
                                dev_per_client=5)
    check_arrays(sc.dev, [5, 5], 48)


def test_synthetic_scene_determinism():
    a, b = scenes.synthetic_scene(seed=7), scenes.synthetic_scene(seed=7)
    c = scenes.synthetic_scene(seed=8)
    assert a.vocab == b.vocab and a.stats == b.stats
    for split in ("train", "test"):
        for field in ("tokens", "labels", "mask", "counts"):
            np.testing.assert_array_equal(getattr(getattr(a, split), field),
                                          getattr(getattr(b, split), field))
    assert not np.array_equal(a.train.tokens, c.train.tokens) or a.vocab != c.vocab


def test_synthetic_scene_rejects_bad_args():
    with pytest.raises(ValueError):
        scenes.synthetic_scene(num_clients=0)
    with pytest.raises(ValueError, match="label_noise"):
        scenes.synthetic_scene(label_noise=0.7)


def _nb_fit(tokens, labels, vocab_size):
    counts = np.ones((2, vocab_size))
    for y in (0, 1):
        ids = tokens[labels == y]
        np.add.at(counts[y], ids[ids > UNK], 1)
    return np.log(counts / counts.sum(1, keepdims=True))


def _nb_acc(log_probs, tokens, labels):
    scores = np.where(tokens[..., None] > UNK, log_probs.T[tokens], 0.0).sum(1)
    return float((scores.argmax(1) == labels).mean())


def test_synthetic_scene_pooled_beats_local():
    """The design goal: a model on all clients' data beats each client alone, on average.

    Checked with a bag-of-words naive Bayes (numpy), pooled vs. per-client training.
    """
    for seed in (0, 1):
        sc = scenes.synthetic_scene(seed=seed)
        tr, te, v = sc.train, sc.test, len(sc.vocab)
        pooled = _nb_fit(tr.tokens[tr.mask], tr.labels[tr.mask], v)
        local_acc, pooled_acc = [], []
        for k in range(sc.num_clients):
            x, y = te.tokens[k][te.mask[k]], te.labels[k][te.mask[k]]
            own = _nb_fit(tr.tokens[k][tr.mask[k]], tr.labels[k][tr.mask[k]], v)
            local_acc.append(_nb_acc(own, x, y))
            pooled_acc.append(_nb_acc(pooled, x, y))
        assert np.mean(pooled_acc) > np.mean(local_acc) + 0.03, (seed, local_acc, pooled_acc)
        assert np.mean(local_acc) > 0.6  # each client alone still learns something


@pytest.mark.real_data
def test_real_fdu_scene_two_domains(fdu_dir):
    sc = scenes.fdu_scene(fdu_dir, max_len=50, vocab_size=5000, domains=("MR", "baby"))
    assert sc.name == "fdu" and sc.num_classes == 2 and sc.client_names == ("MR", "baby")
    assert len(sc.vocab) == 5002
    check_arrays(sc.train, [1600, 1500], 50)
    check_arrays(sc.test, [400, 400], 50)
    assert sc.stats[0]["n_latin1_lines"] > 0 and sc.stats[1]["n_clipped"] > 0
    assert sc.stats[0]["avg_len"] < sc.stats[1]["avg_len"]
    assert sc.train.tokens.max() < 5002
    ids, mask = scenes.local_vocabularies(sc.train)
    assert (mask.sum(1) - 2).tolist() == [s["local_vocab_size"] for s in sc.stats]


@pytest.mark.real_data
def test_real_fdu_scene_dev_holdout(fdu_dir):
    sc = scenes.fdu_scene(fdu_dir, max_len=20, vocab_size=100, dev_holdout=True,
                          domains=("apparel",))
    check_arrays(sc.train, [1400], 20)
    check_arrays(sc.dev, [200], 20)
