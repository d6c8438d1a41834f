"""Tests of fedjax_sc.data.corpus (FDU and IYY readers)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fedjax_sc.data import corpus
from fedjax_sc.data.corpus import FDU_DOMAINS, IYY_FILES

# ------------------------------------------------------------------------------------ helpers


def write(path: Path, data: bytes | str) -> Path:
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def fdu_lines(n: int, start: int = 0) -> str:
    return "".join(f"{i % 2}\tword{i} text\n" for i in range(start, start + n))


# ---------------------------------------------------------------------------------------- FDU


def test_read_fdu_file_basic(tmp_path):
    p = write(tmp_path / "a.task.train", "1\tgood movie\n0\tbad one\t with tab\r\n")
    c = corpus.read_fdu_file(p)
    assert c.texts == ("good movie", "bad one\t with tab")
    assert c.labels.dtype == np.int32 and c.labels.tolist() == [1, 0]
    assert (c.num_empty, c.num_latin1_lines, c.source, len(c)) == (0, 0, str(p), 2)


def test_read_fdu_file_no_final_newline(tmp_path):
    c = corpus.read_fdu_file(write(tmp_path / "f", "1\ta\n0\tb"))
    assert c.texts == ("a", "b")


def test_latin1_line_decoded_and_counted(tmp_path):
    p = write(tmp_path / "MR.task.train", b"1\tcaf\xe9 ok\n0\tplain\n1\tna\xefve \x93q\x94\n")
    c = corpus.read_fdu_file(p)
    assert c.texts == ("caf\u00e9 ok", "plain", "na\u00efve \x93q\x94")
    assert c.num_latin1_lines == 2


def test_valid_utf8_not_counted_as_latin1(tmp_path):
    c = corpus.read_fdu_file(write(tmp_path / "f", "1\tcaf\u00e9\n"))
    assert c.texts == ("caf\u00e9",) and c.num_latin1_lines == 0


def test_empty_text_kept_and_counted(tmp_path):
    c = corpus.read_fdu_file(write(tmp_path / "f", "1\ta b\n0\t\n1\t   \n"))
    assert c.texts == ("a b", "", "   ") and c.labels.tolist() == [1, 0, 1]
    assert c.num_empty == 2


@pytest.mark.parametrize("bad", ["2\ttext", "x\ttext", "1.0\ttext", "\ttext", " 1\ttext"])
def test_bad_label_reports_file_line(tmp_path, bad):
    p = write(tmp_path / "f.task.train", f"1\tok\n{bad}\n")
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: ")) as info:
        corpus.read_fdu_file(p)
    assert repr(bad)[1:-1][:20] in str(info.value)


def test_missing_tab_reports_file_line(tmp_path):
    p = write(tmp_path / "f", "1\tok\n0\tfine\n1 no tab here " + "x" * 200 + "\n")
    with pytest.raises(ValueError, match=re.escape(f"{p}:3: no tab")) as info:
        corpus.read_fdu_file(p)
    assert "1 no tab here" in str(info.value) and "x" * 100 not in str(info.value)


def test_blank_middle_line_raises(tmp_path):
    p = write(tmp_path / "f", "1\tok\n\n0\tfine\n")
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: blank line")):
        corpus.read_fdu_file(p)


def test_binary_file_fails_at_its_first_bad_line_not_its_first_blank_one(tmp_path):
    # line 1 has no tab; line 3 is blank: the first bad line is what the user must see
    p = write(tmp_path / "x.task.train", b"\x00\x8f\xff\x01bin\n1\tok\n\n0\tmore\n")
    with pytest.raises(ValueError, match=re.escape(f"{p}:1: no tab")):
        corpus.read_fdu_file(p)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.task.train"):
        corpus.read_fdu_file(tmp_path / "nope.task.train")


def make_fdu_dir(tmp_path: Path, domains=("apparel", "baby"), n_train=250, n_test=30) -> Path:
    for d in domains:
        write(tmp_path / f"{d}.task.train", fdu_lines(n_train))
        write(tmp_path / f"{d}.task.test", fdu_lines(n_test, start=1000))
    return tmp_path


def test_read_fdu_paper_split(tmp_path):
    data = corpus.read_fdu(make_fdu_dir(tmp_path), domains=("baby", "apparel"))
    assert list(data) == ["baby", "apparel"]
    assert set(data["baby"]) == {"train", "test"}
    assert (len(data["baby"]["train"]), len(data["baby"]["test"])) == (250, 30)


def test_read_fdu_dev_holdout_sizes(tmp_path):
    data = corpus.read_fdu(make_fdu_dir(tmp_path), domains=("apparel",), dev_holdout=True)
    split = data["apparel"]
    assert (len(split["train"]), len(split["dev"]), len(split["test"])) == (50, 200, 30)
    assert split["train"].texts[-1] == "word49 text" and split["dev"].texts[0] == "word50 text"
    assert split["dev"].source.endswith("[50:]")


def test_read_fdu_dev_holdout_too_small(tmp_path):
    with pytest.raises(ValueError, match="cannot hold out 200"):
        corpus.read_fdu(make_fdu_dir(tmp_path, n_train=200), domains=("apparel",),
                        dev_holdout=True)


def test_read_fdu_missing_domain_lists_found(tmp_path):
    d = make_fdu_dir(tmp_path, domains=("baby", "apparel"))
    with pytest.raises(FileNotFoundError) as info:
        corpus.read_fdu(d, domains=("apparel", "books"))
    msg = str(info.value)
    assert "books.task.train not found" in msg and "apparel, baby" in msg


def test_read_fdu_missing_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        corpus.read_fdu(tmp_path / "nowhere")


def test_fdu_domains_order():
    assert len(FDU_DOMAINS) == 16 and len(set(FDU_DOMAINS)) == 16
    assert FDU_DOMAINS[:3] == ("apparel", "baby", "books") and FDU_DOMAINS[-2:] == ("imdb", "MR")


# ---------------------------------------------------------------------------------------- IYY


def iyy_line(rating, text="great film . <sssss> loved it", user="u1", product="p1") -> str:
    return f"{user}\t\t{product}\t\t{rating}\t\t{text}\n"


def test_iyy_imdb_labels_and_sentence_marks(tmp_path):
    p = write(tmp_path / "imdb.train.txt.ss",
              iyy_line(10) + iyy_line(1, "bad  <sssss>   worse <sssss> ") + iyy_line(4)
              + iyy_line(5, "<sssss>"))
    c = corpus.read_iyy_file(p, "imdb")
    assert c.labels.tolist() == [4, 0, 1, 2]
    assert c.texts == ("great film . loved it", "bad worse", "great film . loved it", "")
    assert c.num_empty == 1


def test_iyy_yelp_labels(tmp_path):
    p = write(tmp_path / "y.ss", iyy_line(5) + iyy_line(1) + iyy_line(3))
    assert corpus.read_iyy_file(p, "yelp13").labels.tolist() == [4, 0, 2]


@pytest.mark.parametrize("client,rating", [("yelp14", 6), ("yelp13", 0), ("imdb", 11),
                                           ("imdb", "x")])
def test_iyy_bad_rating(tmp_path, client, rating):
    p = write(tmp_path / "f.ss", iyy_line(3) + iyy_line(rating))
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: rating")):
        corpus.read_iyy_file(p, client)


def test_iyy_bad_field_count(tmp_path):
    p = write(tmp_path / "f.ss", iyy_line(3) + "u1\t\tp1\t\t3 only three fields\n")
    with pytest.raises(ValueError, match=re.escape(f"{p}:2: expected 4 fields")):
        corpus.read_iyy_file(p, "yelp13")


def test_iyy_unknown_client(tmp_path):
    with pytest.raises(ValueError, match="unknown IYY client"):
        corpus.read_iyy_file(write(tmp_path / "f.ss", iyy_line(3)), "amazon")


def make_iyy_dir(tmp_path: Path, n_train=25, n_test=4) -> Path:
    for client, (train, test) in IYY_FILES.items():
        write(tmp_path / train, "".join(iyy_line(1 + i % 5, f"doc {i}") for i in range(n_train)))
        write(tmp_path / test, "".join(iyy_line(1 + i % 5) for i in range(n_test)))
    return tmp_path


def test_read_iyy_and_dev_holdout(tmp_path):
    d = make_iyy_dir(tmp_path)
    data = corpus.read_iyy(d)
    assert list(data) == ["imdb", "yelp13", "yelp14"]
    assert (len(data["yelp13"]["train"]), len(data["yelp13"]["test"])) == (25, 4)
    held = corpus.read_iyy(d, clients=("yelp14",), dev_holdout=True)["yelp14"]
    assert (len(held["train"]), len(held["dev"]), len(held["test"])) == (23, 2, 4)
    assert held["dev"].texts == ("doc 23", "doc 24")


def test_read_iyy_missing_file_lists_found(tmp_path):
    d = make_iyy_dir(tmp_path)
    (d / IYY_FILES["yelp14"][1]).unlink()
    with pytest.raises(FileNotFoundError) as info:
        corpus.read_iyy(d)
    msg = str(info.value)
    assert "yelp-2014-seg-20-20.test.ss not found" in msg
    assert "imdb.test.txt.ss" in msg and "yelp-2014-seg-20-20.train.ss" in msg


# --------------------------------------------------------------------------------- real FDU

README_TRAIN = {d: 1600 for d in FDU_DOMAINS} | {
    "baby": 1500, "camera_photo": 1597, "electronics": 1598, "magazines": 1570, "software": 1515}


@pytest.mark.real_data
def test_real_fdu_counts_and_quirks(fdu_dir):
    data = corpus.read_fdu(fdu_dir)
    assert list(data) == list(FDU_DOMAINS)
    for d, splits in data.items():
        assert (len(splits["train"]), len(splits["test"])) == (README_TRAIN[d], 400), d
        for c in splits.values():
            assert set(np.unique(c.labels).tolist()) == {0, 1}
    assert data["sports_outdoors"]["train"].num_empty == 1
    assert data["sports_outdoors"]["train"].texts[1120] == ""
    assert sum(c.num_empty for s in data.values() for c in s.values()) == 1
    assert data["MR"]["train"].num_latin1_lines > 0 and data["MR"]["test"].num_latin1_lines > 0
    assert data["dvd"]["train"].num_latin1_lines >= 1


@pytest.mark.real_data
def test_real_fdu_dev_holdout(fdu_dir):
    data = corpus.read_fdu(fdu_dir, domains=("baby", "MR"), dev_holdout=True)
    assert [len(data["baby"][s]) for s in ("train", "dev", "test")] == [1300, 200, 400]
    assert [len(data["MR"][s]) for s in ("train", "dev", "test")] == [1400, 200, 400]
