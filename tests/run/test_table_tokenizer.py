"""``--tokenizer`` in a run's configuration: ``basic`` by default for ``--scene table`` and
refused by the other scenes, a ``tokenizer.json`` read through the flag, a ``config.json``
written before the option reruns with ``whitespace``, and a bad file is one line."""

from __future__ import annotations

import dataclasses
import json

import pytest

from fedjax_sc.run import cli, config_file, table_scene
from fedjax_sc.run.config import TrainConfig
from fedjax_sc.run.config_file import config_diff, config_from_json

tokenizers = pytest.importorskip("tokenizers")
pytest.importorskip("pyarrow")

TEXTS = ("Great!! I don't LOVE it.", "Awful (really), can't stand it", "Caf\u00e9 \ufb01ne")


def _table(tmp_path, **kw) -> TrainConfig:
    data = tmp_path / "reviews.csv"
    data.write_text("text,label,split\n" + "".join(
        f'"{t}",{i % 2},{s}\n' for s in ("train", "test") for i, t in enumerate(TEXTS)))
    return TrainConfig(scene="table", data=str(data), text_column="text",
                       label_column="label", split_column="split", **kw)


def _texts(c: TrainConfig) -> list[str]:
    """The training texts of every client, as the run reads them, sorted."""
    return sorted(t for parts in table_scene.load(c).corpora.values()
                  for t in parts["train"].texts)


def test_table_defaults_to_basic_and_other_scenes_refuse_it(tmp_path):
    c = _table(tmp_path, partition="iid", num_clients=1).resolved()
    assert c.tokenizer == "basic"
    assert _texts(c) == ["awful ( really ) , ca n't stand it", "caf\u00e9 fine",
                         "great ! ! i do n't love it ."]
    assert TrainConfig(scene="fdu", data_dir=str(tmp_path)).resolved().tokenizer is None
    with pytest.raises(ValueError, match="^--tokenizer applies to --scene table only$"):
        TrainConfig(scene="fdu", data_dir=str(tmp_path), tokenizer="whitespace").resolved()
    c = _table(tmp_path, partition="iid", num_clients=1, tokenizer="whitespace").resolved()
    assert _texts(c) == sorted(TEXTS)


def test_a_tokenizer_json_through_the_flag(tmp_path):
    tk = tokenizers
    words = {"[UNK]": 0, "great": 1, "!": 2, "awful": 3}
    wl = tk.Tokenizer(tk.models.WordLevel(words, unk_token="[UNK]"))
    wl.normalizer = tk.normalizers.Lowercase()
    wl.pre_tokenizer = tk.pre_tokenizers.Whitespace()
    path = tmp_path / "tokenizer.json"
    wl.save(str(path))
    c = _table(tmp_path, partition="iid", num_clients=1, tokenizer=str(path)).resolved()
    assert c.tokenizer == str(path.resolve()) and path.resolve() in table_scene.files(c)
    unk = "[UNK] "  # "(", "really", "),", "can", "'", "t", "stand", "it"; "!!", "i", "don", ...
    assert _texts(c) == [(unk * 2).strip(), "awful " + (unk * 8).strip(),
                         "great " + (unk * 8).strip()]


def test_a_config_json_without_tokenizer_reruns_with_whitespace(tmp_path):
    c = _table(tmp_path, partition="iid", num_clients=1).resolved()
    saved = json.loads(json.dumps(dataclasses.asdict(c)))
    assert config_from_json(saved).tokenizer == "basic"
    old = {k: v for k, v in saved.items() if k not in ("tokenizer", "empty_text")}
    again = config_from_json(old)
    assert again.tokenizer == "whitespace" and _texts(again) == sorted(TEXTS)
    assert again.empty_text == "refuse"  # the only behaviour before --empty-text
    assert config_diff(old, again) == {}
    assert config_diff(old, c) == {"tokenizer": ("whitespace", "basic")}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(old))
    args = {f.name: getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)}
    merged, defaulted = config_file.merge(str(path), args, set())
    assert merged["tokenizer"] == "whitespace" and "tokenizer" not in defaulted
    merged, _ = config_file.merge(str(path), {**args, "tokenizer": "basic"}, {"tokenizer"})
    assert merged["tokenizer"] == "basic"
    fdu = {k: v for k, v in json.loads(json.dumps(dataclasses.asdict(
        TrainConfig(scene="fdu", data_dir=str(tmp_path)).resolved()))).items()
        if k != "tokenizer"}
    assert config_from_json(fdu).tokenizer is None


@pytest.mark.parametrize("content, message", [
    (None, "no such file"), ("{not json", "not a tokenizers tokenizer.json")])
def test_a_bad_tokenizer_json_is_one_line(tmp_path, capsys, content, message):
    path = tmp_path / "tok.json"
    if content is not None:
        path.write_text(content)
    c = _table(tmp_path)
    args = ["train", "--scene", "table", "--data", c.data, "--text-column", "text",
            "--label-column", "label", "--split-column", "split", "--partition", "iid",
            "--num-clients", "1", "--tokenizer", str(path), "--out", str(tmp_path / "run")]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fedjax-sc: error: --tokenizer {path}: {message}")
    assert err.count("\n") == 1 and not (tmp_path / "run").exists()


def test_fsc_table_scene_reads_a_table_as_the_cli_does(tmp_path):
    """``fsc.table_scene``: the table scene from Python, its clients and basic words."""
    import fedjax_sc as fsc
    path = tmp_path / "t.csv"
    path.write_text("text,label,client\ngood film,pos,a\nbad film,neg,a\nGreat!,pos,b\n"
                    "awful.,neg,b\nnice,pos,a\nmeh,neg,b\n")
    scene = fsc.table_scene(path, text_column="text", label_column="label",
                            client_column="client", test_fraction=0.3)
    assert scene.num_clients == 2
    words = set(scene.vocab.words) - {"<pad>", "<unk>"}
    # basic words: lower case, punctuation apart; two of b's three rows train, so "Great!"
    # or "awful." is among them
    assert {"great", "awful"} & words and all(w == w.lower() for w in words)
    assert not {"Great!", "awful."} & words


def test_the_unseen_clients_rows_are_tokenized_as_every_clients_test_rows(tmp_path):
    """Test rows of a client without training rows (Ag_unseen) go through the same
    tokenizer as the other clients' test rows."""
    data = tmp_path / "users.csv"
    data.write_text('text,label,user,split\n"Great!! I LOVE it.",1,a,train\n'
                    '"Awful, can\'t stand it",0,a,train\n"Don\'t LIKE it!",0,a,test\n'
                    '"Don\'t LIKE it!",0,b,test\n')
    c = TrainConfig(scene="table", data=str(data), text_column="text", label_column="label",
                    client_column="user", split_column="split").resolved()
    got = table_scene.load(c)
    assert got.corpora["a"]["test"].texts == ("do n't like it !",)
    assert got.unseen.texts == got.corpora["a"]["test"].texts
