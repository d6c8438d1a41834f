"""``fedjax-sc train --config FILE``: every key checked against TrainConfig's fields and types
before any corpus is read or folder made (fedjax_sc.run.config_file)."""

import dataclasses
import json

import pytest

from fedjax_sc.run import cli, config_file
from fedjax_sc.run.config import TrainConfig

SAVED = json.loads(json.dumps(dataclasses.asdict(TrainConfig(rounds=1))))  # as a run writes


def _write(tmp_path, drop=(), **changes):
    fields = {k: v for k, v in {**SAVED, **changes}.items() if k not in drop}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields))
    return str(path)


@pytest.mark.parametrize("drop, changes, message", [
    ((), {"rounds": "1"}, '"rounds" must be an int or null, got "1"'),
    ((), {"rounds": 1.5}, '"rounds" must be an int or null, got 1.5'),
    ((), {"local_epochs": True}, '"local_epochs" must be an int, got true'),
    ((), {"client_dropout": "0.5"}, '"client_dropout" must be a number, got "0.5"'),
    ((), {"pca_band": [1, "x"]}, '"pca_band" must be a list of 2 ints or null, got [1, "x"]'),
    ((), {"domains": "books"}, '"domains" must be a list of strings or null, got "books"'),
    ((), {"bogus": 1, "other": 2}, 'unknown keys "bogus", "other"'),
    (("algorithm",), {}, 'no "algorithm", which every run\'s config.json holds'),
])
def test_a_bad_config_is_one_line_before_anything_is_written(tmp_path, capsys, drop, changes,
                                                              message):
    path = _write(tmp_path, drop, **changes)
    out = tmp_path / "run"
    assert cli.main(["train", "--config", path, "--out", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"fedjax-sc: error: --config {path}: {message}")
    assert len(captured.err.strip().splitlines()) == 1 and not captured.out
    assert not out.exists()


def test_a_torn_config_names_the_flag_the_file_and_the_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text('{"scene": "synth')
    assert cli.main(["train", "--config", str(path), "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fedjax-sc: error: --config {path}:1: not valid JSON"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_values_take_their_fields_types_and_missing_fields_are_named(tmp_path, capsys):
    path = _write(tmp_path, drop=("ditto_lambda", "pfedme_beta"), lr=1, pca_band=[1, 2],
                  domains=None)
    given = {"seed"}
    args = {f.name: getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)}
    merged, defaulted = config_file.merge(path, args, given)
    assert merged["lr"] == 1.0 and isinstance(merged["lr"], float)
    assert merged["pca_band"] == (1, 2) and merged["rounds"] == 1
    assert defaulted == ["ditto_lambda", "pfedme_beta"]
    cli._from_config(path, args, given)
    err = capsys.readouterr().err
    assert err == (f"fedjax-sc: note: --config {path} has no ditto_lambda, pfedme_beta (an "
                   f"older version's configuration?): their defaults apply\n")
    path = _write(tmp_path, drop=("algorithm",))  # given on the command line: fine
    assert config_file.merge(path, args, {"algorithm"})[1] == []


def test_an_algorithm_option_given_overrides_that_option_alone(tmp_path):
    path = _write(tmp_path, algorithm="own.py:f", algorithm_options={"mu": 0.1, "beta": 0.5})
    args = {f.name: getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)}
    merged, _ = config_file.merge(path, {**args, "algorithm_options": {"mu": 0.2}},
                                  {"algorithm_options"})
    assert merged["algorithm_options"] == {"mu": 0.2, "beta": 0.5}
    assert config_file.merge(path, args, set())[0]["algorithm_options"] == {"mu": 0.1,
                                                                            "beta": 0.5}
