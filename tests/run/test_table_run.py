"""``fedjax-sc train --scene table``: one round on a CSV the test writes, the classes in
config.json, a refused resume on a changed file, and bad input as one line and exit 1."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fedjax_sc.run import cli

SMALL = ["--rounds", "1", "--max-len", "6", "--vocab-size", "40", "--embed-dim", "6",
         "--hidden", "3", "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1",
         "--no-ap"]


def _csv(path, n=24):
    words = {"pos": "good great", "neg": "bad awful", "meh": "okay so"}
    labels = ("pos", "neg", "meh")
    path.write_text("text,label,user\n" + "".join(
        f"review {i} {words[labels[i % 3]]},{labels[i % 3]},u{(i // 3) % 2}\n"
        for i in range(n)))
    return path


def test_train_table_one_round_then_resume_refused_on_changed_data(tmp_path, capsys):
    data, out = _csv(tmp_path / "reviews.csv"), tmp_path / "run"
    args = ["train", "--scene", "table", "--data", str(data), "--text-column", "text",
            "--label-column", "label", "--client-column", "user", "--out", str(out), *SMALL]
    assert cli.main(args) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["label_names"] == ["meh", "neg", "pos"]
    assert (config["test_fraction"], config["client_column"]) == (0.2, "user")
    assert "reviews.csv" in json.loads((out / "fingerprint.json").read_text())["files"]
    report = json.loads((out / "report.json").read_text())
    assert [c["client"] for c in report["clients"]] == ["u0", "u1"]
    assert cli.main([*args, "--rounds", "2", "--resume"]) == 0  # label_names: not a change
    assert json.loads((out / "report.json").read_text())["rounds"] == 2
    capsys.readouterr()

    with data.open("a") as f:
        f.write("one more review good,pos,u0\n")
    assert cli.main([*args, "--rounds", "3", "--resume"]) == 1
    err = capsys.readouterr().err
    assert "fedjax-sc: error: --resume:" in err and "reviews.csv changed" in err


def test_train_table_bad_input_is_one_line(tmp_path, capsys):
    data = tmp_path / "d.csv"
    data.write_text("text,label,user\ngood,pos,u0\n,neg,u1\n")
    base = ["train", "--scene", "table", "--data", str(data), "--label-column", "label",
            "--client-column", "user", "--out", str(tmp_path / "run"), *SMALL]
    assert cli.main(base) == 1
    assert capsys.readouterr().err.strip() == ("fedjax-sc: error: --scene table needs "
                                               "--text-column")
    assert cli.main([*base, "--text-column", "text"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{data}:3: column 'text': no text" in err
    assert cli.main(["train", "--scene", "fdu", "--data-dir", str(tmp_path), "--text-column",
                     "text", "--out", str(tmp_path / "x")]) == 1
    assert "--text-column applies to --scene table only" in capsys.readouterr().err


def test_empty_text_drop_and_keep_through_the_cli(tmp_path, capsys):
    data = _csv(tmp_path / "d.csv")
    with data.open("a") as f:
        f.write(",pos,u0\n\"  \",neg,u1\n")  # lines 26 and 27: no text
    base = ["train", "--scene", "table", "--data", str(data), "--text-column", "text",
            "--label-column", "label", "--client-column", "user", *SMALL]
    assert cli.main([*base, "--out", str(tmp_path / "refused")]) == 1
    assert f"{data}:26: column 'text': no text" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()
    assert cli.main([*base, "--out", str(tmp_path / "drop"), "--empty-text", "drop"]) == 0
    out = capsys.readouterr().out
    assert (f"--empty-text drop: 2 rows without text left out ({data}:26, {data}:27)"
            in out) and "N = 18 train / 6 test" in out and "without a word" not in out
    assert json.loads((tmp_path / "drop" / "config.json").read_text())["empty_text"] == "drop"
    assert cli.main([*base, "--out", str(tmp_path / "keep"), "--empty-text", "keep"]) == 0
    out = capsys.readouterr().out
    assert "N = 20 train / 6 test" in out and "2 rows without a word" in out
    assert cli.main([*base, "--out", str(tmp_path / "x"), "--allow-empty-clients"]) == 1
    assert "--allow-empty-clients does nothing with --client-column" in capsys.readouterr().err
    assert cli.main([*base, "--out", str(tmp_path / "x"), "--empty-text", "skip"]) == 1
    assert capsys.readouterr().err.strip() == ("fedjax-sc: error: --empty-text must be one of "
                                               "refuse, drop, keep, got 'skip'")


def test_cross_device_table_trains_clients_without_test_rows(tmp_path, capsys, monkeypatch):
    """One-review users train with no test row (no Ag^k), test-only users are Ag_unseen (the
    final global model's accuracy on exactly their rows), and sampled rounds pad to the
    sampled clients' bucket (``--padding auto`` for a cross-device scene)."""
    from fedjax_sc.models.text_classifier import TextClassifier
    from fedjax_sc.run import cross_device
    spied = {}
    choose, figures = cross_device.padding, cross_device.Figures.__call__

    def padding(scene, choice="auto"):
        spied["padding"] = choose(scene, choice)
        spied["scene"] = scene
        return spied["padding"]

    def final_figures(self, global_params, ag):
        spied["params"] = global_params()
        return figures(self, lambda: spied["params"], ag)

    monkeypatch.setattr(cross_device, "padding", padding)
    monkeypatch.setattr(cross_device.Figures, "__call__", final_figures)
    lines = ["text,label,user,split"]
    for u in range(12):
        n = 1 + 3 * (u % 3)  # 1, 4 or 7 reviews; the last of a larger user is a test row
        lines += [f"review {u} {i} {('bad awful', 'good great')[(u + i) % 2]},{(u + i) % 2},"
                  f"u{u:02d},{'test' if i == n - 1 and n > 1 else 'train'}" for i in range(n)]
    lines += ["new good great,1,new0,test", "new bad awful,0,new1,test"]
    data, out = tmp_path / "users.csv", tmp_path / "run"
    data.write_text("\n".join(lines) + "\n")
    args = ["train", "--scene", "table", "--data", str(data), "--text-column", "text",
            "--label-column", "label", "--client-column", "user", "--split-column", "split",
            "--clients-per-round", "3", "--out", str(out), *SMALL]
    assert cli.main(args) == 0
    assert "4 of 12 clients without test rows" in capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    no_test = [c for c in report["clients"] if c["M"] == 0]
    assert len(no_test) == 4 and all(c["Ag"] is None for c in no_test)
    assert (report["Ag_clients"], report["unseen_rows"]) == (8, 2)
    seen = [c for c in report["clients"] if c["M"]]  # correct rows over rows: each counts once
    assert report["Ag_pooled"] == pytest.approx(
        sum(c["Ag"] * c["M"] for c in seen) / sum(c["M"] for c in seen), abs=1e-4)
    # Ag_unseen: the two test-only users' rows, labels 1 and 0, under the final model
    unseen = spied["scene"].unseen
    assert unseen.tokens.shape[0] == 1 and int(np.sum(unseen.mask)) == 2
    assert sorted(np.asarray(unseen.labels)[np.asarray(unseen.mask)].tolist()) == [0, 1]
    model = TextClassifier(vocab_size=len(spied["scene"].vocab), embed_dim=6, hidden=3,
                           mlp_hidden=4)
    logits = model.apply({"params": spied["params"]}, np.asarray(unseen.tokens[0]))
    right = np.argmax(logits, -1) == np.asarray(unseen.labels[0])
    assert report["Ag_unseen"] == pytest.approx(right[np.asarray(unseen.mask[0])].mean())
    assert spied["padding"] == "bucket"
    row = json.loads((out / "metrics.jsonl").read_text().splitlines()[0])
    assert row["Ag_coverage"] == 8 / 12 and row["padding_ratio"] >= 1
    assert "Ag_unseen" in (out / "report.md").read_text()
    # results export --csv keeps the cross-device figures of every round
    assert cli.main(["results", "export", str(out), "--csv", str(tmp_path / "m.csv")]) == 0
    import csv
    with (tmp_path / "m.csv").open() as f:
        means = [r for r in csv.DictReader(f) if r["client"] == "all" and r["round"] == "1"]
    figures = {r["metric"]: float(r["value"]) for r in means}
    assert figures["Ag_pooled"] == pytest.approx(row["Ag_pooled"])
    assert figures["Ag_unseen"] == pytest.approx(row["Ag_unseen"])
    assert figures["padding_ratio"] == pytest.approx(row["padding_ratio"])


def test_test_split_last_through_the_cli(tmp_path, capsys):
    """--test-split last: each user's last rows in file order are its test rows (at least
    one row trains), recorded in config.json; a bad value is one line."""
    data, out = tmp_path / "users.csv", tmp_path / "run"
    users = ["u0"] * 5 + ["u1"] * 3 + ["u2"]  # 0.4 held out: 2, 2 and 0 test rows
    data.write_text("text,label,user\n" + "".join(
        f"day {i} {('bad awful', 'good great')[i % 2]},{i % 2},{u}\n"
        for i, u in enumerate(users)))
    args = ["train", "--scene", "table", "--data", str(data), "--text-column", "text",
            "--label-column", "label", "--client-column", "user", "--test-fraction", "0.4",
            "--out", str(out), *SMALL]
    assert cli.main([*args, "--test-split", "last"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert (config["test_split"], config["test_fraction"]) == ("last", 0.4)
    report = json.loads((out / "report.json").read_text())
    assert [(c["client"], c["M"]) for c in report["clients"]] == [("u0", 2), ("u1", 2),
                                                                   ("u2", 0)]
    capsys.readouterr()
    assert cli.main([*args, "--test-split", "first", "--overwrite"]) == 1
    assert capsys.readouterr().err == ("fedjax-sc: error: --test-split 'first': choose from "
                                       "random, last\n")


def test_pooled_accuracy_counts_each_test_row_once():
    from fedjax_sc.run.cross_device import pooled_accuracy
    assert pooled_accuracy([1.0, 0.5, float("nan")], [1, 4, 0]) == 3 / 5
    assert pooled_accuracy([float("nan")], [0]) is None
