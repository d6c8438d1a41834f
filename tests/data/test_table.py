"""The table scene's reader (fedjax_sc.data.table), flwr-datasets' partitioners
(fedjax_sc.data.flwr_partition) and the table fields of TrainConfig, on files the tests
write."""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import sys

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.data import flwr_partition, partition, table
from fedjax_sc.data.scenes import build_scene
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.loading import corpus_files

WORDS = {"pos": "good great fine", "neg": "bad awful dull", "mixed": "okay so so"}


def rows(n=24, labels=("pos", "neg"), clients=("b", "a")):
    """``n`` rows: text, label, domain (clients cycle), in a fixed order."""
    return [{"text": f"review {i} {WORDS.get(str(labels[i % len(labels)]), 'x')}",
             "label": labels[i % len(labels)], "domain": clients[(i // 2) % len(clients)]}
            for i in range(n)]


def write(path, data):
    """``data`` (a list of dicts) as CSV / JSON lines / Parquet, by ``path``'s extension."""
    tab = pa.Table.from_pylist(data)
    name = str(path)
    if name.endswith(".parquet"):
        pq.write_table(tab, path)
    elif name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in data))
    elif name.endswith(".csv.gz"):
        with gzip.open(path, "wb") as f:
            pa_csv.write_csv(tab, f)
    else:
        pa_csv.write_csv(tab, path)
    return path


def read(path, **kw):
    kw = {"text_column": "text", "label_column": "label", "client_column": "domain", **kw}
    return table.read_table(str(path), **kw)


def summary(got):
    return ({c: {s: (x.texts, x.labels.tolist()) for s, x in parts.items()}
             for c, parts in got.corpora.items()}, got.label_names)


# -------------------------------------------------------------------------------- formats


def test_csv_jsonl_parquet_give_identical_scenes(tmp_path):
    data, test = rows(24), rows(8)
    scenes = []
    for ext in ("csv", "jsonl", "parquet", "csv.gz"):
        got = read(write(tmp_path / f"d.{ext}", data),
                   test_data=str(write(tmp_path / f"t.{ext}", test)))
        scenes.append((summary(got), build_scene("table", got.corpora, 2, max_len=6,
                                                 vocab_size=50)))
    first, scene0 = scenes[0]
    assert first[1] == ("neg", "pos") and list(first[0]) == ["a", "b"]
    for s, scene in scenes[1:]:
        assert s == first
        assert scene.vocab.to_json() == scene0.vocab.to_json()
        np.testing.assert_array_equal(scene.train.tokens, scene0.train.tokens)
        np.testing.assert_array_equal(scene.test.labels, scene0.test.labels)


def test_string_labels_sorted_and_three_classes(tmp_path):
    got = read(write(tmp_path / "d.csv", rows(30, labels=("pos", "neg", "mixed"))),
               test_fraction=0.25)
    assert got.label_names == ("mixed", "neg", "pos")
    for parts in got.corpora.values():
        for c in parts.values():
            for text, y in zip(c.texts, c.labels):
                assert WORDS[got.label_names[y]] in text
    scene = build_scene("table", got.corpora, 3, max_len=6, vocab_size=50,
                        label_names=got.label_names)
    assert scene.num_classes == 3 and scene.label_names == ("mixed", "neg", "pos")


def test_integer_labels_kept_and_others_numbered_in_order(tmp_path):
    for labels, names in (((2, 0, 1), (0, 1, 2)), ((5, 1, 10), (1, 5, 10))):
        got = read(write(tmp_path / "d.jsonl", rows(12, labels=labels)), test_fraction=0.3)
        assert got.label_names == names  # numbers in numeric order, not "1" < "10" < "5"
        for parts in got.corpora.values():
            for c in parts.values():
                for text, y in zip(c.texts, c.labels):
                    i = int(text.split()[1])
                    assert names[y] == labels[i % 3]


def test_natural_partition_keeps_file_order(tmp_path):
    data = rows(16, clients=("z", "m", "a"))
    got = read(write(tmp_path / "d.csv", data), split_column=None,
               test_data=str(write(tmp_path / "t.csv", rows(9, clients=("a", "m", "z")))))
    assert list(got.corpora) == ["a", "m", "z"]
    for name, parts in got.corpora.items():
        assert parts["train"].texts == tuple(r["text"] for r in data if r["domain"] == name)


def test_split_column(tmp_path):
    data = [dict(r, split="test" if i % 3 == 2 else "train") for i, r in enumerate(rows(24))]
    got = read(write(tmp_path / "d.parquet", data), split_column="split")
    for name, parts in got.corpora.items():
        for s in ("train", "test"):
            assert parts[s].texts == tuple(r["text"] for r in data
                                           if r["domain"] == name and r["split"] == s)


def test_held_out_fraction_per_client(tmp_path):
    got = read(write(tmp_path / "d.csv", rows(22)), test_fraction=0.2)
    sizes = {c: (len(p["train"]), len(p["test"])) for c, p in got.corpora.items()}
    assert sizes == {"a": (8, 2), "b": (9, 3)}  # ceil(0.2 * 10), ceil(0.2 * 12) held out
    again = read(write(tmp_path / "d.csv", rows(22)), test_fraction=0.2)
    assert summary(again) == summary(got)


def test_held_out_as_datasets_train_test_split(tmp_path, datasets):
    got = read(write(tmp_path / "d.csv", rows(22)), test_fraction=0.3, seed=7)
    a = [r for r in rows(22) if r["domain"] == "a"]
    ref = datasets.Dataset.from_list(a).train_test_split(test_size=0.3, seed=7)
    for s in ("train", "test"):
        assert got.corpora["a"][s].texts == tuple(ref[s]["text"])


# ----------------------------------------------------------------------------- partitions


def test_iid_and_dirichlet_partitions_without_client_column(tmp_path):
    path = write(tmp_path / "d.csv", rows(60, labels=("pos", "neg", "mixed")))
    for kw in (dict(partition="iid", num_clients=4),
               dict(partition="dirichlet", num_clients=3, alpha=1.0, min_partition_size=2),
               dict(partition="dirichlet_label", num_clients=3, alpha=1.0),
               dict(partition="dirichlet_quantity", num_clients=3, beta=5.0)):
        got = read(path, client_column=None, **kw)
        assert list(got.corpora) == partition.client_names(kw["num_clients"])
        texts = [t for parts in got.corpora.values() for c in parts.values() for t in c.texts]
        assert sorted(texts) == sorted(r["text"] for r in rows(60, ("pos", "neg", "mixed")))


def test_dirichlet_test_file_follows_the_training_mix(tmp_path):
    train = write(tmp_path / "d.csv", rows(300, labels=("pos", "neg", "mixed")))
    test = write(tmp_path / "t.csv", rows(300, labels=("pos", "neg", "mixed")))
    got = read(train, client_column=None, test_data=str(test), partition="dirichlet",
               num_clients=3, alpha=0.3, min_partition_size=1)
    for parts in got.corpora.values():
        mix = [np.bincount(parts[s].labels, minlength=3) for s in ("train", "test")]
        np.testing.assert_array_equal(mix[0], mix[1])  # same labels: the same cuts


def test_a_split_too_small_for_the_partition_names_its_file(tmp_path):
    train = write(tmp_path / "d.csv", rows(12))
    test = write(tmp_path / "t.csv", rows(2))
    with pytest.raises(ValueError, match=r"t\.csv \(test split\): 2 examples cannot be split "
                       r"into 3 clients"):
        read(train, client_column=None, partition="iid", num_clients=3, test_data=str(test))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 80), clients=st.integers(1, 9), seed=st.integers(0, 5))
def test_iid_partition_property(n, clients, seed):
    if clients > n:
        with pytest.raises(ValueError, match="cannot be split"):
            flwr_partition.iid_partition(n, clients, seed)
        return
    parts = flwr_partition.iid_partition(n, clients, seed)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(n))
    sizes = [len(p) for p in parts]
    assert sum(sizes) == n and max(sizes) - min(sizes) <= 1
    assert all(np.array_equal(a, b) for a, b in
               zip(parts, flwr_partition.iid_partition(n, clients, seed)))


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 80), classes=st.integers(1, 4), clients=st.integers(1, 6),
       alpha=st.sampled_from([0.05, 0.5, 5.0]), min_size=st.integers(0, 3),
       balance=st.booleans(), seed=st.integers(0, 5))
def test_dirichlet_partition_property(n, classes, clients, alpha, min_size, balance, seed):
    labels = np.random.default_rng(seed).integers(0, classes, n)
    run = lambda: flwr_partition.dirichlet_partition(labels, clients, alpha, seed, min_size,
                                                      balance)
    try:
        draw = run()
    except ValueError as e:
        assert "cannot be split" in str(e) or "draws gave" in str(e)
        return
    assert np.array_equal(np.sort(np.concatenate(draw.parts)), np.arange(n))
    assert sum(len(p) for p in draw.parts) == n and min(len(p) for p in draw.parts) >= min_size
    np.testing.assert_allclose(draw.proportions.sum(1), 1.0)
    assert all(np.array_equal(a, b) for a, b in zip(draw.parts, run().parts))
    other = flwr_partition.split_like(labels, draw, seed)
    assert np.array_equal(np.sort(np.concatenate(other)), np.arange(n))


def test_iid_is_datasets_shuffle_then_contiguous_shards(datasets):
    ds = datasets.Dataset.from_dict({"i": list(range(23))}).shuffle(seed=3)
    ours = flwr_partition.iid_partition(23, 4, seed=3)
    for j in range(4):
        assert ds.shard(4, j, contiguous=True)["i"] == ours[j].tolist()


def test_dirichlet_retries_then_raises():
    labels = np.zeros(12, int)
    with pytest.raises(ValueError, match="none of 11 draws"):
        flwr_partition.dirichlet_partition(labels, 4, alpha=0.01, min_partition_size=3)


# ----------------------------------------------------------------------------- bad input

CSV = ("text,label,domain\n"
       "fine film,pos,a\n"
       "\"a review\nover two lines\",neg,a\n"
       "\n"
       "{row},pos,b\n")


@pytest.mark.parametrize("row, kw, match", [
    (",neg,a\n", {}, r"d\.csv:7: column 'text': no text"),
    ("\"   \",neg,a\n", {}, r"d\.csv:7: column 'text': no text"),
    ("words,,a\n", {}, r"d\.csv:7: column 'label': no label"),
    ("words,neg,\n", {}, r"d\.csv:7: column 'domain': no client"),
    ("words,neg,a\n", {"text_column": "body"},
     r"d\.csv: no column 'body' \(--text-column\); its columns: text, label, domain"),
    ("words,neg,a,extra\n", {}, r"d\.csv:7: 4 fields where the header has 3"),
    ("\"bad \"film\",neg,a\n", {}, r"d\.csv:7: a quoted field opens on this line and holds "
     r"a quote that is not doubled; double a quote inside a field"),
    ("\"two\nlines \"quoted\" badly,neg,a\nmore,pos,b\n", {}, r"d\.csv:7: a quoted field opens "
     r"on this line and holds a quote that is not doubled \(on line 8\), so lines 7-8 would "
     r"read as one record"),
    ("\"words,neg,a\nmore,pos,b\n", {},
     r"d\.csv:7: a quote opened on this line is never closed, so lines 7-8 \(the rest of the "
     r"file\) read as one record \(1 of the header's 3 fields\)"),
])
def test_bad_csv_names_file_line_and_column(tmp_path, row, kw, match):
    path = tmp_path / "d.csv"
    path.write_text(CSV.format(row="b text") + row)
    with pytest.raises(ValueError, match=match):
        read(path, test_fraction=0.5, **kw)


@pytest.mark.parametrize("ext", ["csv", "jsonl", "parquet"])
def test_rows_without_text_dropped_or_kept_on_request(tmp_path, ext):
    data = rows(12)
    for i in (3, 8):
        data[i]["text"] = "  " if i == 3 else None
    path = write(tmp_path / f"d.{ext}", data)
    with pytest.raises(ValueError, match="no text"):
        read(path, test_fraction=0.25)
    whole = read(path, test_fraction=0.25, empty_text="keep")
    dropped = read(path, test_fraction=0.25, empty_text="drop")
    count = lambda got: sum(len(c) for parts in got.corpora.values()  # noqa: E731
                            for c in parts.values())
    assert (count(whole), count(dropped)) == (12, 10)
    assert sum(c.num_empty for parts in whole.corpora.values() for c in parts.values()) == 2
    assert whole.num_dropped == 0 and dropped.num_dropped == 2
    where = ([f"d.{ext}:5", f"d.{ext}:10"] if ext == "csv" else [f"d.{ext}:4", f"d.{ext}:9"]
             if ext == "jsonl" else [f"d.{ext}: row 3", f"d.{ext}: row 8"])
    assert [w.rpartition("/")[2] for w in dropped.dropped_rows] == where
    kept = {t for parts in dropped.corpora.values() for c in parts.values() for t in c.texts}
    assert kept == {r["text"] for r in data if r["text"] and r["text"].strip()}
    with pytest.raises(ValueError, match="--empty-text must be one of refuse, drop, keep"):
        read(path, empty_text="skip")


def test_two_objects_on_a_line_an_upper_case_gz_and_empty_text_edge_cases(tmp_path):
    two = tmp_path / "two.jsonl"
    two.write_text('{"text": "a", "label": 1, "domain": "x"} {"text": "b", "label": 0, '
                   '"domain": "x"}\n{"text": "c", "label": 0, "domain": "x"}\n')
    with pytest.raises(ValueError, match=r"two\.jsonl:1: more than one JSON object on this "
                       r"line \(the second at column 42\)"):
        read(two)
    upper = tmp_path / "D.CSV.GZ"
    with gzip.open(upper, "wt") as f:
        f.write("text,label,domain\n" + "".join(f"w{i},{i % 2},a\n" for i in range(6)))
    assert len(read(upper, test_fraction=0.5).corpora["a"]["train"]) == 3
    dup = tmp_path / "dup.csv"
    dup.write_text("text,label,domain,text\na,1,x,z\nb,0,x,z\n")
    with pytest.raises(ValueError, match=r"column 'text' \(--text-column\) occurs 2 times"):
        read(dup, empty_text="drop")
    data = rows(8)
    data[1]["text"] = ""
    tab = pa.Table.from_pylist(data)
    tab = tab.set_column(0, "text", tab.column("text").dictionary_encode())
    pq.write_table(tab, tmp_path / "dict.parquet")
    assert read(tmp_path / "dict.parquet", test_fraction=0.25, empty_text="drop").num_dropped == 1


def test_bad_jsonl_and_parquet_name_line_or_row(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a", "label": 1, "domain": "x"}\n\n'
                    '{"text": "b", "domain": "x"}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:3: column 'label': no label"):
        read(path)
    path.write_text('{"text": "a", "label": 1, "domain": "x"}\n'
                    '{"text": "b", "label": "one", "domain": "x"}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:2: .*Column\(/label\) changed"):
        read(path)
    path.write_text('{"text": "a", "label": 1, "domain": "x"}\n'
                    '{"text": "b", "label": 0, "domain": "x"\n'  # cut short
                    '{"text": "c", "label": 0 "domain": "x"}\n')
    with pytest.raises(ValueError, match=r"d\.jsonl:2: .*Python's json: Expecting ',' delimiter"
                       r", column 40; the line ends before its object is closed"):
        read(path)
    path.write_text('{"text": "a", "label": 1, "domain": "x"}\n{"text": "wor\n'
                    '{"text": "c", "label": 0, "domain": "x"}\n')  # cut inside a string
    with pytest.raises(ValueError, match=r"d\.jsonl:2: .*Python's json: Unterminated string "
                       r"starting, column 10; the line ends before its object is closed"):
        read(path)
    path.write_text('{"text": "a", "label": 1, "domain": "x"}\n'
                    '{"text": "c", "label": 0 "domain": "x"}\n')  # a comma missing
    with pytest.raises(ValueError, match=r"d\.jsonl:2: .*\(Python's json: Expecting ',' "
                       r"delimiter, column 26\)$"):
        read(path)
    data = rows(6)
    data[4]["text"] = ""
    with pytest.raises(ValueError, match=r"d\.parquet: row 4: column 'text': no text"):
        read(write(tmp_path / "d.parquet", data))


@pytest.mark.parametrize("name, data, match", [
    ("d.csv", b"text,label,domain\nfine,1,a\nbad \xff film,0,a\n",
     r"d\.csv:3: not valid UTF-8 \(byte 0xff at column 5\)"),
    ("d.jsonl", b'{"text": "fine", "label": 1, "domain": "a"}\n'
                b'{"text": "caf\xe9", "label": 0, "domain": "a"}\n',
     r"d\.jsonl:2: not valid UTF-8 \(byte 0xe9 at column 14\)"),
    ("d.csv", b"text,label,domain\nfine,1,a\nbad,0,a\nok,inf,a\n",
     r"d\.csv:4: column 'label': label inf is not a finite number"),
])
def test_bytes_not_utf8_and_an_infinite_label_name_their_line(tmp_path, name, data, match):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError, match=match):
        read(tmp_path / name)


@pytest.mark.parametrize("column, values, says", [
    ("domain", ["007", "7", "007", "7"], None),  # two clients, as written
    ("label", ["1", "true", "0", "false"], r"label '(true|1)' among labels that are"),
    ("label", ["1.0", "2.0", "pos", "1.0"], r"label 'pos' among labels that are numbers"),
    ("label", ["1.0", "1.00", "0", "0"], r"d\.csv:3: column 'label': '1.00' is the number "
     r"'1.0' of .*d\.csv:2 written otherwise"),
    ("label", ["pos", "pos ", "neg", "neg"], r"d\.csv:3: column 'label': 'pos ' and 'pos' "
     r"\(.*d\.csv:2\) differ only by spaces"),
    ("domain", ["u1", " u1", "u2", "u2"], r"d\.csv:3: column 'domain': ' u1' and 'u1'"),
    ("label", ["positive", "Positive ", "neg", "neg"], r"d\.csv:3: column 'label': "
     r"'Positive ' and 'positive' \(.*d\.csv:2\) differ only by case and spaces"),
    ("domain", ["Bob", "bob", "u2", "u2"], None),  # clients: case counts
])
def test_a_csv_keeps_labels_and_clients_as_written(tmp_path, column, values, says):
    data = [{"text": f"words {i}", "label": ["pos", "neg"][i % 2], "domain": "a"}
            for i in range(4)]
    for row, v in zip(data, values):
        row[column] = v
    path = tmp_path / "d.csv"
    path.write_text("text,label,domain\n" + "".join(
        f"{r['text']},{r['label']},{r['domain']}\n" for r in data))
    if says is None:
        assert sorted(read(path, test_fraction=0.5).corpora) == sorted(set(values))
        return
    with pytest.raises(ValueError, match=says):
        read(path, test_fraction=0.5)


def test_a_test_file_reads_ids_as_the_training_rows_do(tmp_path):
    train, test = tmp_path / "d.csv", tmp_path / "t.csv"
    train.write_text("text,label,domain\n" + "".join(
        f"w{i},{i % 2},{('00123', '123')[i % 2]}\n" for i in range(8)))
    test.write_text("text,label,domain\nx,0,123\ny,1,00123\n")  # plain ids only here too
    got = read(train, test_data=str(test))
    assert sorted(got.corpora) == ["00123", "123"]
    assert [len(got.corpora[c]["test"]) for c in ("00123", "123")] == [1, 1]


def test_labels_mixing_numbers_and_words_name_the_odd_row(tmp_path):
    data = rows(12, labels=("0", "1", "2"))
    data[7]["label"] = "pos"  # a CSV of 0/1/2 with one label spelt as a word
    path = write(tmp_path / "mixed.csv", data)
    with pytest.raises(ValueError, match=r"mixed\.csv:9: column 'label': label 'pos' among "
                       r"labels that are numbers \('0', '1', '2'\)"):
        read(path, test_fraction=0.3)
    assert read(write(tmp_path / "words.csv", rows(12, labels=("1star", "pos"))),
                test_fraction=0.3).label_names == ("1star", "pos")  # words only: fine


def test_bad_labels_clients_and_splits(tmp_path):
    one = write(tmp_path / "one.csv", rows(6, labels=("pos",)))
    with pytest.raises(ValueError, match=r"one\.csv: column 'label' holds one class only"):
        read(one)
    train = write(tmp_path / "d.csv", rows(12))
    test = write(tmp_path / "t.csv", rows(6, labels=("pos", "neg", "mixed")))
    with pytest.raises(ValueError, match=r"t\.csv:4: column 'label': label 'mixed' does not "
                       r"occur in the classes of the training rows of .*d\.csv"):
        read(train, test_data=str(test))
    data = [dict(r, split=["train", "dev"][i == 3]) for i, r in enumerate(rows(6))]
    with pytest.raises(ValueError, match=r"s\.csv:5: column 'split': split value 'dev'"):
        read(write(tmp_path / "s.csv", data), split_column="split")
    with pytest.raises(ValueError, match=r"d\.txt: unknown extension '\.txt'"):
        read(tmp_path / "d.txt")
    with pytest.raises(ValueError, match=r"unknown extension '\.parquet\.gz'"):
        read(tmp_path / "d.parquet.gz")


def test_duplicate_columns_and_type_clashes_name_the_file(tmp_path):
    dup = tmp_path / "dup.csv"
    dup.write_text("text,label,text,domain\ngood,1,x,a\n")
    with pytest.raises(ValueError, match=r"dup\.csv: column 'text' \(--text-column\) occurs 2 "
                       r"times \(its columns: text, label, text, domain\)"):
        read(dup)
    train = write(tmp_path / "d.csv", [dict(r, label=0.5 + i % 2) for i, r in enumerate(rows(8))])
    with pytest.raises(ValueError, match=r"t\.csv:2: column 'label': label '.*' is of another kind .*"
                       r"\(this file's labels are string, those double\): write them one way"):
        read(train, test_data=str(write(tmp_path / "t.csv", rows(4))))
    train = write(tmp_path / "d.csv", rows(8, clients=(1, 2)))
    with pytest.raises(ValueError, match=r"t\.csv:2: column 'domain': client 'b' is of another "
                       r"kind .* \(this file's clients are string, those int64\)"):
        read(train, test_data=str(write(tmp_path / "t.csv", rows(4))))
    words = write(tmp_path / "w.csv", rows(8))  # string labels; the test file's numbers
    with pytest.raises(ValueError, match=r"n\.csv:2: column 'label': label '1' does not occur "
                       r"in the classes of the training rows of .*w\.csv"):
        read(words, test_data=str(write(tmp_path / "n.csv", rows(4, labels=(1, 0)))))
    with pytest.raises(ValueError, match=r"d\.csv: column 'label': the classes \[1, 'pos'\] "
                       r"are not all of one type"):
        read(train, test_fraction=0.5, label_names=[1, "pos"])
    with pytest.raises(ValueError, match=r"label_names names 'pos' twice"):
        read(words, test_fraction=0.5, label_names=["neg", "pos", "pos"])
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"text": "a", "text": "b", "label": 1, "domain": "x"}\n')
    with pytest.raises(ValueError, match=r"b\.jsonl: not a readable json file \(pyarrow: .*twice"):
        read(bad)


# ------------------------------------------------------------------------------- datasets


@pytest.fixture
def datasets(tmp_path, monkeypatch):
    """``datasets``, offline (HF_DATASETS_OFFLINE=1) with its cache in ``tmp_path``."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    datasets.disable_progress_bars()
    return datasets


def test_datasets_folder_and_hf_spec(tmp_path, datasets):
    data, test = rows(24), rows(8)
    ref = summary(read(write(tmp_path / "d.csv", data), test_data=str(write(
        tmp_path / "t.csv", test))))
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(data),
                               "test": datasets.Dataset.from_list(test)})
    dd.save_to_disk(str(tmp_path / "dd"))
    assert summary(read(tmp_path / "dd")) == ref
    got = read(f"hf:csv:{tmp_path / 'd.csv'}", test_data=f"hf:csv:{tmp_path / 't.csv'}")
    assert summary(got) == ref
    na = tmp_path / "na.csv"  # a review "NA" is a text, as the plain reader keeps it
    na.write_text("text,label,domain\nNA,1,x\nnull,0,x\nc,1,x\nd,0,x\n")
    assert "NA" in read(f"hf:csv:{na}", test_fraction=0.5).corpora["x"]["train"].texts + \
        read(f"hf:csv:{na}", test_fraction=0.5).corpora["x"]["test"].texts
    data[2]["label"] = None
    datasets.Dataset.from_list(data).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(ValueError, match=r"ds: row 2: column 'label': no label"):
        read(tmp_path / "ds")
    c = TrainConfig(scene="table", data=str(tmp_path / "dd"), text_column="text",
                    label_column="label", client_column="domain").resolved()
    assert c.test_fraction is None  # the DatasetDict's own test split
    names = sorted(p.name for p in corpus_files(c))
    assert "dataset_dict.json" in names and names.count("state.json") == 2


def test_hf_spec_of_a_malformed_file_is_one_line(tmp_path, datasets):
    bad = tmp_path / "m.csv"
    bad.write_text("text,label,domain\ngood,pos,a\nbad,neg,a,extra\n")
    with pytest.raises(ValueError, match=r"hf:csv:.*m\.csv: datasets cannot read it "
                       r"\(ParserError: .*line 3"):
        read(f"hf:csv:{bad}")


def test_datasets_missing_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(ImportError, match=r"fedjax_sc\[hf\]"):
        read("hf:csv:x.csv")


# ------------------------------------------------------------------------------ the config


def test_config_checks_and_defaults(tmp_path):
    path = write(tmp_path / "d.csv", rows(12))
    base = dict(scene="table", data=str(path), text_column="text", label_column="label")
    c = TrainConfig(**base, client_column="domain").resolved()
    assert (c.test_fraction, c.max_len, c.batch_size, c.lr) == (0.2, 200, 8, 0.01)
    assert corpus_files(c) == [path.resolve()]
    bad = [
        (dict(base, data=None, client_column="domain"), "--scene table needs --data"),
        (dict(base, label_column=None, client_column="domain"), "needs --label-column"),
        (dict(scene="synthetic", text_column="text"), "--text-column applies to --scene table"),
        (dict(base), "without --client-column: choose"),
        (dict(base, client_column="domain", partition="iid", num_clients=2),
         "leave it out with --partition iid"),
        (dict(base, client_column="domain", test_fraction=1.0), "must lie in"),
        (dict(base, client_column="domain", test_data=str(path), test_fraction=0.1),
         "--test-fraction applies without"),
        (dict(base, partition="iid", num_clients=2, alpha=1.0), "iid takes no --alpha"),
        (dict(base, partition="dirichlet", num_clients=2), "dirichlet takes --alpha"),
        (dict(base, partition="iid", num_clients=2, self_balancing=True),
         "apply to --partition dirichlet"),
    ]
    for kw, match in bad:
        with pytest.raises(ValueError, match=match):
            TrainConfig(**kw).resolved()


def test_hold_out_size_is_ceil(tmp_path):
    for n, f in ((2, 0.2), (7, 0.5), (10, 0.25), (13, 0.01)):
        got = read(write(tmp_path / "d.csv", rows(n, clients=("a",)), ), client_column=None,
                   partition="iid", num_clients=1, test_fraction=f)
        parts = got.corpora["client0000"]
        assert (len(parts["test"]), len(parts["train"])) == (math.ceil(f * n),
                                                             n - math.ceil(f * n))


def test_clients_of_one_size_hold_out_independent_positions(tmp_path):
    # 6 clients of 20 rows each: the same seed for all would hold out the same positions
    got = read(write(tmp_path / "d.csv", rows(240, clients=tuple("abcdef"))),
               test_fraction=0.2)
    row = lambda t: int(t.split()[1])  # "review I ...": client (I // 2) % 6, its row:
    position = lambda c: sorted(2 * (row(t) // 12) + row(t) % 2
                                for t in got.corpora[c]["test"].texts)
    assert len({tuple(position(c)) for c in "abcdef"}) > 1


def test_flwr_partitions_on_other_scenes():
    from fedjax_sc.run.loading import load_scene
    small = dict(scene="synthetic", synthetic_clients=2, synthetic_train=12, synthetic_test=6,
                 max_len=8)
    for kw in (dict(partition="iid", num_clients=3),
               dict(partition="dirichlet", num_clients=3, alpha=1.0, min_partition_size=1)):
        scene = load_scene(TrainConfig(**small, **kw).resolved())
        assert scene.client_names == ("client0000", "client0001", "client0002")
        assert int(scene.train.counts.sum()) == 12 + 7 and int(scene.test.counts.sum()) == 12
        assert scene.label_names is None


def test_table_scene_without_pyarrow_names_the_extra(monkeypatch, tmp_path):
    import fedjax_sc.data
    from fedjax_sc.run import table_scene
    monkeypatch.delattr(fedjax_sc.data, "table")
    monkeypatch.delitem(sys.modules, "fedjax_sc.data.table")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ImportError, match=r"pip install 'fedjax_sc\[table\]'"):
        TrainConfig(scene="table", data=str(tmp_path / "d.csv"), text_column="text",
                    label_column="label", client_column="domain").resolved()
    assert table_scene.FIELDS[0] == "data"


def test_cross_device_clients_without_test_rows_and_unseen_clients(tmp_path):
    train = write(tmp_path / "d.csv", rows(12))  # clients a and b
    test = write(tmp_path / "t.csv", rows(6, clients=("a", "z", "y")))
    got = read(train, test_data=str(test))
    assert sorted(got.corpora) == ["a", "b"]  # a test-only client is no client
    assert len(got.corpora["a"]["test"]) == 2 and len(got.corpora["b"]["test"]) == 0
    assert got.unseen is not None and len(got.unseen) == 4  # z and y's rows, file order
    assert got.unseen.texts == tuple(r["text"] for r in rows(6) if (rows(6).index(r) // 2) % 3)
    scene = build_scene("table", got.corpora, 2, 8, 50, label_names=got.label_names,
                        allow_no_test=True, unseen=got.unseen)
    assert scene.counts("test").tolist() == [2, 0] and scene.unseen.counts.tolist() == [4]
    with pytest.raises(ValueError, match=r"client 'b', split 'test'.*allow-empty"):
        build_scene("table", got.corpora, 2, 8, 50, label_names=got.label_names)
    assert read(train, test_data=str(write(tmp_path / "s.csv", rows(4)))).unseen is None


def test_per_client_split_keeps_one_training_row(tmp_path):
    tiny = write(tmp_path / "tiny.csv", rows(5, clients=("a", "a", "b")))  # a: 4, b: 1
    got = read(tiny, test_fraction=0.5)
    assert [len(got.corpora["b"][s]) for s in ("train", "test")] == [1, 0]
    assert [len(got.corpora["a"][s]) for s in ("train", "test")] == [2, 2]
    two = read(write(tmp_path / "two.csv", rows(4, clients=("a",))), test_fraction=0.9)
    assert [len(two.corpora["a"][s]) for s in ("train", "test")] == [1, 3]


def test_last_rows_held_out_in_file_order(tmp_path):
    """``test_split="last"``: each client's last min(ceil(F n), n - 1) rows in file order are
    its test rows, those before them its training rows (LEAF's per-user split, time-ordered),
    as many as a random split takes; a client of one row trains on it."""
    path = tmp_path / "t.csv"
    users = "aababbbbca"  # a: rows 0 1 3 9; b: 2 4 5 6 7; c: 8
    path.write_text("text,label,domain\n" + "".join(f"r{i} good,{i % 2},{u}\n"
                                                     for i, u in enumerate(users)))
    got = read(path, test_fraction=0.3, test_split="last")
    texts = {c: {s: [t.split()[0] for t in x.texts] for s, x in parts.items()}
             for c, parts in got.corpora.items()}
    assert texts == {"a": {"train": ["r0", "r1"], "test": ["r3", "r9"]},
                     "b": {"train": ["r2", "r4", "r5"], "test": ["r6", "r7"]},
                     "c": {"train": ["r8"], "test": []}}
    assert got.corpora["b"]["test"].labels.tolist() == [0, 1]
    rand = read(path, test_fraction=0.3)
    assert summary(rand) == summary(read(path, test_fraction=0.3, test_split="random"))
    assert {c: {s: len(x) for s, x in p.items()} for c, p in rand.corpora.items()} == {
        c: {s: len(x) for s, x in p.items()} for c, p in got.corpora.items()}
    for kw, match in ((dict(test_split="first"), r"--test-split 'first': choose from random"),
                      (dict(test_split="last", client_column=None, partition="iid",
                            num_clients=2), "it needs --client-column"),
                      (dict(test_split="last", test_data=str(path)), "the test split is given")):
        with pytest.raises(ValueError, match=match):
            read(path, **kw)


def test_test_split_in_the_config(tmp_path):
    from fedjax_sc.run.config_file import config_diff, config_from_json
    path = write(tmp_path / "d.csv", rows(12))
    base = dict(scene="table", data=str(path), text_column="text", label_column="label",
                client_column="domain")
    c = TrainConfig(**base).resolved()
    assert (c.test_fraction, c.test_split) == (0.2, "random")
    assert TrainConfig(**base, test_split="last").resolved().test_split == "last"
    assert TrainConfig(**base, split_column="s").resolved().test_split is None
    saved = json.loads(json.dumps(dataclasses.asdict(c)))
    del saved["test_split"]  # a run written before --test-split: held out at random
    assert config_diff(saved, c) == {} and config_from_json(saved).test_split == "random"
    assert config_diff(saved, TrainConfig(**base, test_split="last").resolved()) == {
        "test_split": ("random", "last")}
    bad = [(dict(base, test_split="first"), r"^--test-split 'first': choose from random, last$"),
           (dict(base, client_column=None, partition="iid", num_clients=2, test_split="last"),
            "needs --client-column"),
           (dict(base, split_column="s", test_split="random"), "--test-split applies without"),
           (dict(scene="synthetic", test_split="last"), "--test-split applies to --scene table")]
    for kw, match in bad:
        with pytest.raises(ValueError, match=match):
            TrainConfig(**kw).resolved()
