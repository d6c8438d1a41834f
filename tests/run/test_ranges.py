"""The optimizers' and heterogeneous clients' numbers are refused when a configuration is
resolved, before any corpus is read, naming their flags (fedjax_sc.run.ranges)."""

import pytest

from fedjax_sc.run import cli, ranges
from fedjax_sc.run.config import TrainConfig

BAD = [
    (["--client-dropout", "1.5"], "--client-dropout must lie in [0, 1], got 1.5"),
    (["--straggler-fraction", "-1"], "--straggler-fraction must lie in [0, 1], got -1.0"),
    (["--partition", "dirichlet", "--num-clients", "2", "--alpha", "0"],
     "--alpha must be > 0, got 0.0"),
    (["--partition", "dirichlet", "--num-clients", "2"],
     "--partition dirichlet takes --alpha (missing here)"),
    (["--num-clients", "3"], "--num-clients, --alpha and --beta split a pooled corpus: they "
     "need a --partition other than natural (dirichlet_label, dirichlet_quantity, iid or "
     "dirichlet)"),
    (["--pca-band", "5", "2"], "--pca-band D1 D2 needs 1 <= D1 <= D2 <= d = 200, got 5 2"),
    (["--config", "."], "--config .: a folder; give its config.json (--config config.json)"),
    # allowed by the library's LocalWork, but no model would train
    (["--client-dropout", "1"], "--client-dropout 1: every client misses every round, so no "
     "model would train; give a probability below 1"),
    (["--straggler-fraction", "1", "--straggler-policy", "drop"],
     "--straggler-fraction 1 with --straggler-policy drop: every update would be discarded; "
     "give a fraction below 1 or --straggler-policy partial"),
    (["--local-steps", "x"], "--local-steps 'x': give N or LO:HI (integers)"),
    (["--local-steps", "0"], "--local-steps must be >= 1, got 0"),
    (["--lr", "-1"], "--lr must be >= 0, got -1.0"),
    (["--embedding-lr", "-0.5"], "--embedding-lr must be >= 0, got -0.5"),
    (["--momentum", "1.5"], "--momentum must be in [0, 1), got 1.5"),
    (["--server-opt", "adam", "--server-lr", "0"], "--server-lr must be > 0, got 0.0"),
    # an algorithm's own settings, checked by its builder at placeholder sizes
    (["--algorithm", "fedprox", "--prox-mu", "-1"], "FedProx mu must be >= 0, got -1.0"),
    (["--algorithm", "pfedme", "--pfedme-k", "0"], "pFedMe K must be an int >= 1, got 0"),
    (["--algorithm", "moon", "--moon-temperature", "0"],
     "MOON temperature must be > 0, got 0.0"),
]


@pytest.mark.parametrize("flags, message", BAD)
def test_bad_numbers_fail_before_the_corpus_is_read(tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert cli.main(["train", "--rounds", "1", "--out", str(out), *flags]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"fedjax-sc: error: {message}\n"
    assert not captured.out and not out.exists()  # no "scene synthetic: ..." line: not read


def test_the_configuration_is_checked_as_it_is_resolved():
    with pytest.raises(ValueError, match=r"--momentum must be a number, got 'x'"):
        TrainConfig(momentum="x").resolved()
    work = ranges.check(TrainConfig(local_steps="2:3", client_dropout=0.5).resolved())
    assert (work.steps_range, work.dropout) == ((2, 3), 0.5)


def test_the_iyy_preset_trains_the_embeddings_at_the_papers_rate():
    # Sec. 5.2: LR 0.1, the embedding layer's 0.01; a flag overrides the preset
    assert (TrainConfig(scene="iyy", data_dir=".").resolved().embedding_lr,
            TrainConfig(scene="fdu", data_dir=".").resolved().embedding_lr) == (0.01, None)
    assert TrainConfig(scene="iyy", data_dir=".", embedding_lr=0.1).resolved().embedding_lr == 0.1
    # a schedule scales --lr alone: refused beside the preset's embedding LR, saying where
    # that LR came from
    with pytest.raises(ValueError, match=r"fednova \(the iyy scene's preset sets "
                                         r"--embedding-lr 0.01"):
        TrainConfig(scene="iyy", data_dir=".", lr_schedule="cosine").resolved()
