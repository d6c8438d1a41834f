"""--upload-compression: the same run as the algorithm written with the transform, refused in
one line when misspelt or beside --pca-band, chained before the noise."""

import json
from pathlib import Path

import pytest

from fedjax_sc.algorithms.model_change import Sparse
from fedjax_sc.run import cli
from fedjax_sc.run.plumbing import uploads

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "compressed_uploads.py"
TINY = ["--scene", "synthetic", "--synthetic-clients", "2", "--synthetic-train", "12",
        "--synthetic-test", "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3",
        "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--no-ap",
        "--rounds", "2"]


def test_the_flag_trains_what_the_written_algorithm_trains(tmp_path):
    for name, flags in (("flag", ["--algorithm", "fedavg", "--upload-compression", "topk:0.1"]),
                        ("spec", ["--algorithm", f"{EXAMPLE}:top_tenth"])):
        assert cli.main(["train", *TINY, *flags, "--out", str(tmp_path / name)]) in (0, None)
    reports = {n: json.loads((tmp_path / n / "report.json").read_text()) for n in ("flag", "spec")}
    assert reports["flag"]["Ag"] == reports["spec"]["Ag"]
    assert (reports["flag"]["communication"]["upload_sent_over_dense"]
            == reports["spec"]["communication"]["upload_sent_over_dense"] < 0.3)
    digests = [json.loads((tmp_path / n / "checkpoints/digests.json").read_text())
               for n in ("flag", "spec")]
    assert digests[0] == digests[1]  # the same params and states, byte for byte


@pytest.mark.parametrize("flags, says", [
    (["--upload-compression", "topk"], "--upload-compression 'topk': write one of none"),
    (["--upload-compression", "gzip:3"],
     "write one of none, topk:FRACTION[+ef], bits:BITS, sign[+ef]"),
    (["--upload-compression", "topk:2"], "fraction must be in (0, 1]"),
    (["--upload-compression", "bits:12"], "bits must be an int in 1..8"),
    (["--upload-compression", "bits:4", "--pca-band", "2", "5"], "choose one"),
    (["--algorithm", "fs", "--upload-compression", "bits:4"], "trained centrally"),
])
def test_a_bad_compression_is_one_line_before_anything(flags, says, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", *TINY, *flags, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedjax-sc: error:") and says in err[0], err
    assert not out.exists()


def test_the_compression_goes_before_the_noise():
    import jax
    import jax.numpy as jnp

    from fedjax_sc.algorithms.base import UploadContext
    upload = uploads.run_upload(None, 0.5, True, "topk:0.5")
    x = {"w": jnp.arange(1.0, 5.0)}
    context = UploadContext({}, {"w": jnp.zeros(4)})
    message, _ = upload.encode(x, upload.init(x), jax.random.key(0), context)
    sent = message["w"]
    assert isinstance(sent, Sparse) and sent.values.shape == (2,)
    assert set(map(int, sent.indices)) == {2, 3}  # chosen before the noise moved anything
