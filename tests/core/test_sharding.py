"""The client axis sharded over 8 (forced host) CPU devices gives the one-device results."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import jax, numpy as np
    assert len(jax.devices()) == 8, jax.devices()
    from fedjax_sc.algorithms.fedper import fedper
    from fedjax_sc.data.scenes import synthetic_scene
    from fedjax_sc.models.text_classifier import TextClassifier, init_params
    from fedjax_sc.core import round as rnd, sharding
    from fedjax_sc.core.feed import ClientFeed
    from fedjax_sc.data.client_data import host_client_data
    from fedjax_sc.core.round import ClientStates

    scene = synthetic_scene(num_clients=6, train_per_client=12, test_per_client=2, max_len=8,
                            seed=2)
    model = TextClassifier(vocab_size=len(scene.vocab), embed_dim=6, hidden=4, mlp_hidden=4)
    alg = fedper(model, 0.1)
    host = host_client_data(scene.train, local_vocab=True)
    step = rnd.make_round_step(alg, batch_size=4, local_epochs=1)
    out = {}
    for name, devices in (("one", jax.devices()[:1]), ("eight", jax.devices())):
        mesh = sharding.client_mesh(devices)
        state, clients = rnd.init_states(alg, init_params(model, jax.random.key(0)), 6)
        state = sharding.put_replicated(state, mesh)
        feed = ClientFeed(host, clients.private, mesh)
        for r in (1, 2):
            idx = feed.sample(r)
            data, private = feed.inputs(idx)
            state, new, m = step(state, ClientStates(private), data, jax.random.key(1))
            feed.update(idx, new.private)
        assert data.tokens.shape[0] == (6 if name == "one" else 8)  # 2 inert padding clients
        assert len(data.tokens.sharding.device_set) == len(devices)
        out[name] = (jax.device_get(state.params), jax.device_get(feed.private),
                     np.asarray(m.train_loss)[:6])
    a, b = out["one"], out["eight"]
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6)
    try:
        sharding.put_clients({"x": np.zeros((9,))}, sharding.client_mesh())
        raise SystemExit("an uneven client axis was placed")
    except ValueError as e:
        assert "pad it" in str(e)
    print("SHARDED-OK", len(jax.tree.leaves(a)))
""")


def test_sharded_round_matches_one_device():
    from fedjax_sc.run.plumbing.processes import cpu_device_flags
    # the conftest's compile flags are kept; only the device count is set
    env = {**os.environ, "XLA_FLAGS": cpu_device_flags(8), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "SHARDED-OK" in proc.stdout



def test_mesh_shapes_prefer_many_members_and_whole_processes():
    import pytest

    from fedjax_sc.core import sharding
    assert sharding.mesh_shape(1, 8) == (1, 8)  # one run: the 1-D client mesh
    assert sharding.mesh_shape(2, 4) == (2, 2)
    assert sharding.mesh_shape(4, 4, processes=2) == (4, 1)
    assert sharding.mesh_shape(6, 8, processes=2) == (2, 4)  # each process one member row
    assert sharding.mesh_shape(3, 4, processes=2) == (1, 4)
    assert sharding.mesh_shape(2, 8, processes=4) == (2, 4)  # no whole process: the largest
    assert sharding.parse_mesh("2x4") == (2, 4)
    for bad in ("2", "0x4", "2x", "axb", "2x2x2"):
        with pytest.raises(ValueError, match="--mesh"):
            sharding.parse_mesh(bad)
