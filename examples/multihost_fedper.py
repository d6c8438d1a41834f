"""FedPer with M of N clients sampled per round, on every device of every process: the way a
multi-host job (several GPU hosts, a TPU pod, a SLURM allocation) runs the compiled round.

Every process runs this same program. ``jax.distributed.initialize`` connects them; the mesh
spans all processes' devices (``sharding.client_mesh``); every process builds the same scene
and calls the same functions, and each one places only its own devices' client rows
(``jax.make_array_from_callback``); the private leaves come back to every host through
``sharding.to_host`` (an all-gather).

On a cluster (one process per host; JAX reads the coordinator, the number of processes and
the process id from SLURM, a TPU pod or Kubernetes)::

    srun --nodes 2 --ntasks-per-node 1 python examples/multihost_fedper.py --out fedper.npz
    # TPU pod: gcloud compute tpus tpu-vm ssh NAME --worker=all \\
    #     --command="python examples/multihost_fedper.py --out fedper.npz"

On one machine, as tests/core/test_multiprocess.py does (2 processes x 2 CPU devices)::

    python examples/multihost_fedper.py --process-id 0 --num-processes 2 --local-devices 2 \\
        --coordinator 127.0.0.1:12355 --out two.npz &
    python examples/multihost_fedper.py --process-id 1 --num-processes 2 --local-devices 2 \\
        --coordinator 127.0.0.1:12355 --out two.npz

Process 0 writes the server params and every client's private leaves to ``--out`` (.npz).
"""

import argparse
import os

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("--out", required=True, help="where process 0 saves the final states (.npz)")
p.add_argument("--coordinator", help="host:port of process 0 (default: from the cluster)")
p.add_argument("--num-processes", type=int, help="default: from the cluster")
p.add_argument("--process-id", type=int, help="default: from the cluster")
p.add_argument("--local-devices", type=int, help="CPU only: devices per process (testing)")
p.add_argument("--clients", type=int, default=32)
p.add_argument("--sampled", type=int, default=8)
p.add_argument("--rounds", type=int, default=2)
args = p.parse_args()
if args.local_devices:  # simulated CPU devices; must be set before JAX starts (other flags kept)
    from fedjax_sc.run.plumbing.processes import cpu_device_flags
    os.environ["XLA_FLAGS"] = cpu_device_flags(args.local_devices)
    os.environ["JAX_PLATFORMS"] = "cpu"

import jax  # noqa: E402

if args.num_processes != 1:
    if jax.config.jax_platforms == "cpu" or os.environ.get("JAX_PLATFORMS") == "cpu":
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=args.coordinator,
                               num_processes=args.num_processes, process_id=args.process_id)

import numpy as np  # noqa: E402
from flax import traverse_util  # noqa: E402

import fedjax_sc as fsc  # noqa: E402
from fedjax_sc.core import sharding  # noqa: E402
from fedjax_sc.core.feed import ClientFeed  # noqa: E402
from fedjax_sc.data.client_data import host_client_data  # noqa: E402

scene = fsc.synthetic_scene(num_clients=args.clients, train_per_client=6, test_per_client=2,
                            max_len=6)
model = fsc.TextClassifier(vocab_size=len(scene.vocab), embed_dim=8, hidden=4, mlp_hidden=6)
algorithm = fsc.methods.fedper(model, learning_rate=0.1)
state, clients = fsc.init_states(algorithm, fsc.init_params(model, jax.random.key(0)),
                                 args.clients)
mesh = sharding.client_mesh()  # every device of every process
state = sharding.put_replicated(state, mesh)
feed = ClientFeed(host_client_data(scene.train, local_vocab=True), clients.private, mesh,
                  num_sampled=args.sampled, seed=0)
step = jax.jit(fsc.build_round(algorithm, batch_size=4, local_epochs=1), donate_argnums=(0, 1))
for r in range(1, args.rounds + 1):
    idx = feed.sample(r)  # the same on every process: a function of (seed, round)
    data, private = feed.inputs(idx)
    state, new, metrics = step(state, fsc.ClientStates(private), data, jax.random.key(1))
    feed.update(idx, new.private)  # an all-gather of the sampled clients' private leaves
    loss = sharding.to_host(metrics.train_loss)[: len(idx)].mean()
    if jax.process_index() == 0:
        print(f"round {r}: {len(idx)} of {args.clients} clients, mean local loss {loss:.4f}, "
              f"{jax.device_count()} devices in {jax.process_count()} processes", flush=True)
params = sharding.to_host(state.params)
if jax.process_index() == 0:
    flat = {"params/" + "/".join(k): v for k, v in traverse_util.flatten_dict(params).items()}
    flat |= {"private/" + "/".join(k): v
             for k, v in traverse_util.flatten_dict(feed.private).items()}
    np.savez(args.out, **flat)
