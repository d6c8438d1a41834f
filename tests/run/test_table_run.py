"""``fedjax-sc train --scene table``: one round on a CSV the test writes, the classes in
config.json, a refused resume on a changed file, and bad input as one line and exit 1."""

from __future__ import annotations

import json

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
