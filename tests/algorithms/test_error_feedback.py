"""Error feedback: nothing the compressor drops is lost (what the server received plus the
memory is every change made), the memory per client in the round (kept by a client that did
not train, checkpointed and resumed), and the errors; the scaled sign it was shown to repair
(contractive, one bit an entry)."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedjax_sc.algorithms.base import UploadContext, chain, encode_upload, identity_upload
from fedjax_sc.algorithms.fedavg import fedavg
from fedjax_sc.algorithms.model_change import (
    Signs,
    error_feedback,
    model_change,
    probabilistic_quantization,
    scaled_sign,
    top_k,
)
from fedjax_sc.core import communication
from fedjax_sc.core import round as rnd
from fedjax_sc.data.client_data import client_data
from fedjax_sc.models.text_classifier import init_params
from fedjax_sc.run import cli

TINY = ["--scene", "synthetic", "--synthetic-clients", "3", "--synthetic-train", "12",
        "--synthetic-test", "6", "--max-len", "8", "--embed-dim", "6", "--hidden", "3",
        "--mlp-hidden", "4", "--batch-size", "4", "--local-epochs", "1", "--no-ap"]


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 1000), st.sampled_from(["topk", "bits", "sign"]), st.integers(1, 5))
def test_what_the_server_received_plus_the_memory_is_every_change(seed, kind, rounds):
    """sum_t decode(message_t) + e_T = sum_t change_t (Stich et al. 2018, the memory's
    invariant), whatever the compressor drops in between."""
    compressor = {"topk": top_k(0.2), "bits": probabilistic_quantization(2),
                  "sign": scaled_sign()}[kind]
    t = chain(model_change(), error_feedback(compressor))
    keys = jax.random.split(jax.random.key(seed), rounds + 1)
    start = {"w": jax.random.normal(keys[0], (4, 5))}
    state, memory = t.init(start), t.client_init(start)
    received = total = jnp.zeros((4, 5))
    for r in range(rounds):
        params = {"w": start["w"] + jax.random.normal(keys[r + 1], (4, 5))}
        context = UploadContext({}, start, memory)
        message, diagnostics, memory = t.encode(params, state, keys[r], context)
        received = received + t.decode(message, state, context)["w"] - start["w"]
        total = total + params["w"] - start["w"]
        assert 0.0 <= float(diagnostics["ef_carried"]) <= 1.0
    np.testing.assert_allclose(received + memory[1]["w"], total, atol=1e-4)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 6), st.integers(1, 5))
def test_the_scaled_sign_is_contractive_and_sends_a_bit_an_entry(seed, rows, width):
    x = jax.random.normal(jax.random.key(seed), (rows, width))
    t = scaled_sign()

    def roundtrip(x):  # one compiled program, not op by op
        message, _ = t.encode({"w": x}, (), jax.random.key(0), None)
        return message, t.decode(message, (), None)["w"]

    message, got = jax.jit(roundtrip)(x)
    assert isinstance(message["w"], Signs) and message["w"].wire(None)[0][0] == -(-x.size // 8)
    x, got = np.asarray(x, np.float64), np.asarray(got, np.float64)
    np.testing.assert_allclose(np.abs(got), np.mean(np.abs(x)), rtol=1e-5)
    np.testing.assert_array_equal(got >= 0, x >= 0)
    # |C(x) - x|^2 = |x|^2 - |x|_1^2 / n (Karimireddy et al. 2019): below |x|^2
    error, norm = float(np.sum((got - x) ** 2)), float(np.sum(x ** 2))
    np.testing.assert_allclose(error, norm - float(np.sum(np.abs(x))) ** 2 / x.size,
                               rtol=1e-4, atol=1e-5)
    assert error < norm


def test_the_scaled_sign_of_a_table_counts_and_restores_the_clients_own_rows():
    table = jnp.array([[1.0, -3.0], [2.0, -2.0], [100.0, 100.0]])  # the last row is padding
    context = UploadContext({"embedding/embedding": jnp.array([True, True, False])}, None)
    t = scaled_sign()
    message, _ = t.encode({"embedding": {"embedding": table}}, (), jax.random.key(0), context)
    got = t.decode(message, (), context)["embedding"]["embedding"]
    np.testing.assert_array_equal(got, [[2.0, -2.0], [2.0, -2.0], [0.0, 0.0]])
    assert message["embedding"]["embedding"].wire(2) == [(1, jnp.uint8), (1, jnp.float32)]


def test_everything_sent_leaves_no_memory_and_a_table_remembers_its_own_rows_only():
    start = {"embedding": {"embedding": jnp.zeros((4, 3))}}
    params = {"embedding": {"embedding": jnp.arange(12.0).reshape(4, 3) + 1}}
    mask = jnp.array([True, True, True, False])  # the last row is padding
    for fraction, left in ((1.0, 0.0), (0.25, None)):
        t = chain(model_change(), error_feedback(top_k(fraction)))
        context = UploadContext({"embedding/embedding": mask}, start, t.client_init(start))
        _, diagnostics, memory = t.encode(params, t.init(start), jax.random.key(0), context)
        table = memory[1]["embedding"]["embedding"]
        assert float(jnp.max(jnp.abs(table[3]))) == 0.0  # never a padding row
        if left is not None:
            assert float(jnp.max(jnp.abs(table))) == left == float(diagnostics["ef_carried"])
        else:  # 3 of the 9 real entries sent; the other 6 remembered as they were
            np.testing.assert_array_equal(table[:3].reshape(-1)[:6], np.arange(1.0, 7.0))
            assert float(diagnostics["ef_carried"]) > 0


def test_a_memory_in_a_memory_and_a_context_without_one_raise():
    with pytest.raises(ValueError, match="keeps a memory of its own"):
        error_feedback(error_feedback(top_k(0.5)))
    t = error_feedback(top_k(0.5))
    with pytest.raises(ValueError, match="UploadContext.memory"):
        t.encode({"w": jnp.ones(4)}, (), jax.random.key(0), UploadContext({}, None))
    # the other transforms keep no memory: encode_upload gives theirs as ()
    assert encode_upload(identity_upload(), {"w": 1.0}, (), jax.random.key(0), None)[2] == ()
    forgetful = identity_upload()._replace(client_init=lambda params: params)
    with pytest.raises(ValueError, match="with client_init returns 3 results from encode"):
        encode_upload(forgetful, {"w": 1.0}, (), jax.random.key(0), None)


def test_the_round_keeps_every_clients_memory_and_one_that_did_not_train_keeps_its(scene,
                                                                                    model):
    data = client_data(scene.train, local_vocab=True)
    params = init_params(model, jax.random.key(0))
    plain = fedavg(model, 0.1)
    results = {}
    for name, upload in (("all", chain(model_change(), error_feedback(top_k(1.0)))),
                         ("tenth", chain(model_change(), error_feedback(top_k(0.1))))):
        alg = plain._replace(upload=upload)
        state, clients = rnd.init_states(alg, params, scene.num_clients)
        step = rnd.make_round_step(alg, batch_size=4, local_epochs=1)
        state, clients, metrics = step(state, clients, data, jax.random.key(1))
        results[name] = state, clients, metrics, step, alg
    # every entry sent: FedAvg's round, nothing remembered
    base_state, base_clients = rnd.init_states(plain, params, scene.num_clients)
    base = rnd.make_round_step(plain, batch_size=4, local_epochs=1)(
        base_state, base_clients, data, jax.random.key(1))[0]
    state, clients, _, _, _ = results["all"]
    chex.assert_trees_all_close(state.params, base.params, atol=1e-6)
    assert all(float(jnp.max(jnp.abs(x))) == 0 for x in jax.tree.leaves(clients.upload))
    # a tenth sent: each client remembers the rest; a client without examples next round
    # trains nothing and keeps what it remembered
    state, clients, metrics, step, alg = results["tenth"]
    table = clients.upload[1]["embedding"]["embedding"]
    assert table.shape == (scene.num_clients,) + params["embedding"]["embedding"].shape
    assert np.all(np.asarray(jnp.max(jnp.abs(table), axis=(1, 2))) > 0)
    np.testing.assert_array_less(0.0, np.asarray(metrics.aux["ef_carried"]))
    idle = data._replace(mask=data.mask.at[0].set(False), counts=data.counts.at[0].set(0))
    _, after, _ = step(state, clients, idle, jax.random.key(2))
    chex.assert_trees_all_equal(jax.tree.map(lambda x: x[0], after.upload),
                                jax.tree.map(lambda x: x[0], clients.upload))
    changed = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a[1:] - b[1:]))), after.upload,
                           clients.upload)
    assert max(jax.tree.leaves(changed)) > 0
    # an empty memory: the first round is top_k's; error feedback adds no byte to what it sends
    no_memory = plain._replace(upload=chain(model_change(), top_k(0.1)))
    first, clients0 = rnd.init_states(no_memory, params, scene.num_clients)
    first = rnd.make_round_step(no_memory, batch_size=4, local_epochs=1)(
        first, clients0, data, jax.random.key(1))[0]
    # two programs compiled apart: equal up to float32 rounding (XLA may fuse them otherwise)
    chex.assert_trees_all_close(first.params, state.params, atol=1e-6)
    np.testing.assert_array_equal(communication.account(alg, state, data).upload_sent_bytes,
                                  communication.account(no_memory, state, data).upload_sent_bytes)


def test_the_flag_checkpoints_the_memory_and_a_resumed_run_is_the_same_run(tmp_path):
    flags = ["--upload-compression", "topk:0.1+ef", "--seed", "0"]
    assert cli.main(["train", *TINY, *flags, "--rounds", "3",
                     "--out", str(tmp_path / "whole")]) in (0, None)
    assert cli.main(["train", *TINY, *flags, "--rounds", "1",
                     "--out", str(tmp_path / "part")]) in (0, None)
    assert cli.main(["train", *TINY, *flags, "--rounds", "3", "--resume",
                     "--out", str(tmp_path / "part")]) in (0, None)
    digests = [json.loads((tmp_path / n / "checkpoints/digests.json").read_text())
               for n in ("whole", "part")]
    assert digests[0]["3"] == digests[1]["3"]
    saved = (tmp_path / "whole" / "checkpoints" / "3" / "default" / "_METADATA").read_text()
    assert '"client_upload"' in saved  # the clients' memories are in the checkpoint
    rows = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").open()]
    assert all(0 < r["aux"]["ef_carried"] < 1 for r in rows if r.get("phase") == "round")


@pytest.mark.parametrize("spec, says", [
    ("topk:0.1+fb", "write one of none, topk:FRACTION[+ef], bits:BITS, sign[+ef]"),
    ("none+ef", "write one of"), ("bits:4+", "write one of"), ("sign:2", "write one of"),
    ("bits:1+ef", "error feedback goes with topk and sign")])
def test_a_misspelt_or_unbounded_error_feedback_is_one_line(spec, says, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(["train", *TINY, "--rounds", "1", "--upload-compression", spec,
                     "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not out.exists()
