"""One run on several processes (GPU hosts, a TPU slice, a SLURM job): JAX's multi-controller
runtime (:func:`jax.distributed.initialize`), started by ``fedjax-sc train`` and ``reproduce``.

Every process runs the same command. :func:`start` connects them before anything touches a
device: with ``--coordinator HOST:PORT --num-processes N --process-id I``, or with none of the
three in a cluster JAX recognises by itself (:func:`detected_cluster`: SLURM with more than one
task, Open MPI with more than one rank, a TPU slice of several workers, or
``JAX_COORDINATOR_ADDRESS`` set); otherwise the run stays in one process.

Who does what (:func:`primary` is process 0):
- process 0 alone writes the run folder (``rundir.write_text`` / ``append_text`` /
  ``remove_run`` / ``locked`` do nothing in the others), logs, and runs the trackers;
- every process calls the collectives (the compiled round, ``sharding.to_host``, orbax's save
  and restore) in the same order; :func:`barrier` waits for all of them;
- checks that may fail before training (configuration, data, run folder, lock) end in an
  :class:`Agreement`: if one process fails, every process stops with that error instead of
  waiting in a collective for it.

Waiting: the processes meet at the start (:func:`start`), each waited for up to
``--connect-timeout`` seconds: JAX's coordination service connects them, they start the
backend, wait for each other at a barrier of that service and run one tiny collective, which
sets up the CPU collectives' (gloo's) connections between all devices. Gloo gives that set-up
a fixed 30 s, which no option of JAX or XLA changes: met at the start, a process slower than
another (a loaded machine) no longer meets it first inside a collective of the run, which
waits for it up to XLA's ``xla_cpu_collective_timeout_seconds`` (30 minutes by default).

Failure: when a process dies, the others stop within :data:`HEARTBEAT_S` seconds instead of
hanging. Where the runtime reports the broken collective as an error (gloo with one device per
process), they print one line (:func:`lost_contact`) and leave at once (:func:`leave`),
without JAX's shutdown barrier, which would wait for the dead process. Where a collective or a
barrier waits instead (several devices per process; NCCL), the coordination service declares
the process dead after :data:`HEARTBEAT_S` seconds without a heartbeat and JAX aborts the
others from C++, where no Python code runs (its message starts ``Terminating process because
the JAX distributed service detected fatal errors``); gloo sometimes aborts at once
(``gloo::EnforceNotMet``). The last complete checkpoint resumes the run, with any number of
processes.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

CONNECT_S = 60
"""Default of ``--connect-timeout``: how long the processes wait for each other at the start."""
HEARTBEAT_S = 30
"""Seconds without a heartbeat after which the coordination service declares a process dead
and ends the others (``heartbeat_timeout_seconds`` of :func:`jax.distributed.initialize`;
JAX's default is 100). Heartbeats come from a thread of their own: a long compilation or
step does not delay them."""
SHUTDOWN_S = 60
"""Seconds a finished process waits at exit for the others to finish
(``shutdown_timeout_seconds``)."""
_MESSAGE_CHARS = 1024
"""Room for one process's error in :class:`Agreement`."""
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def cpu_device_flags(count: int, flags: str | None = None) -> str:
    """``XLA_FLAGS`` that give a CPU process ``count`` simulated devices (to try several
    processes or a device mesh on one machine), the other flags of ``flags`` (default: the
    environment's ``XLA_FLAGS``) kept and an earlier device count replaced. Takes effect
    when set before JAX's CPU backend starts (its first computation)."""
    flags = os.environ.get("XLA_FLAGS", "") if flags is None else flags
    return " ".join([f for f in flags.split() if not f.startswith(_DEVICE_COUNT_FLAG)]
                    + [f"{_DEVICE_COUNT_FLAG}={count}"])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--coordinator``, ``--num-processes``, ``--process-id`` and ``--connect-timeout``."""
    g = parser.add_argument_group(
        "several processes (jax.distributed; the same command in every process)")
    g.add_argument("--coordinator", metavar="HOST:PORT", help="process 0's host and a free "
                   "port on it, the same in every process (default: one process, or what "
                   "SLURM, Open MPI or a TPU slice tell JAX)")
    g.add_argument("--num-processes", type=int, metavar="N", help="the number of processes")
    g.add_argument("--process-id", type=int, metavar="I", help="this process's id, 0..N-1; "
                   "process 0 writes the run folder")
    g.add_argument("--connect-timeout", type=int, default=CONNECT_S, metavar="S",
                   help="give up when the processes have not all connected and met after S "
                   "seconds (raise it on a loaded machine)")


def pop_arguments(args: dict) -> dict:
    """Removes :func:`add_arguments`' options from parsed ``args``; returns them as
    :func:`start`'s keywords."""
    return {k: args.pop(k) for k in ("coordinator", "num_processes", "process_id",
                                      "connect_timeout")}


def start(coordinator: str | None = None, num_processes: int | None = None,
          process_id: int | None = None, connect_timeout: int = CONNECT_S) -> None:
    """Connects this process to the others (:func:`jax.distributed.initialize`), or does
    nothing for a run of one process. Call it before anything touches a device.

    A process that cannot connect and meet the others (:func:`_meet`) within
    ``connect_timeout`` seconds prints one line (``fedjax-sc: error: ...``) and exits with
    status 1 (JAX itself would abort the process).

    Raises:
      ValueError: some but not all of the three flags, a process id outside ``[0, N)``, N < 1,
        a coordinator that is not ``HOST:PORT``, an unknown host, or (process 0) a host that is
        not this machine or a port already in use.
      RuntimeError: JAX refused to start (e.g. a device was used already).
    """
    flags = {"--coordinator": coordinator, "--num-processes": num_processes,
             "--process-id": process_id}
    if connect_timeout < 1:
        raise ValueError(f"--connect-timeout must be >= 1 second, got {connect_timeout}")
    if all(v is None for v in flags.values()):
        where = detected_cluster()
        if where is not None:
            _initialize(where, connect_timeout)
        return
    missing = [k for k, v in flags.items() if v is None]
    if missing:
        raise ValueError(f"{', '.join(flags)} go together; missing: {', '.join(missing)}")
    if num_processes < 1:
        raise ValueError(f"--num-processes must be >= 1, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id {process_id} is outside [0, {num_processes}) for "
                         f"--num-processes {num_processes}")
    host, port = _host_port(coordinator)
    if num_processes == 1:
        return  # a run of one process: nothing to connect
    _check_coordinator(host, port, process_id, connect_timeout)
    _initialize(f"--coordinator {coordinator}", connect_timeout,
                coordinator_address=coordinator, num_processes=num_processes,
                process_id=process_id)


def detected_cluster() -> str | None:
    """The multi-process cluster JAX would configure itself from (its name), or None: SLURM
    with more than one task, Open MPI with more than one rank, a TPU slice of several workers,
    or ``JAX_COORDINATOR_ADDRESS`` set."""
    env = os.environ
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    slurm = ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID",
             "SLURM_LOCALID")  # what JAX's SLURM detection reads
    if all(k in env for k in slurm) and _int(env["SLURM_NTASKS"]) > 1:
        return f"SLURM ({env['SLURM_NTASKS']} tasks)"
    if "OMPI_MCA_orte_hnp_uri" in env and _int(env.get("OMPI_COMM_WORLD_SIZE", "1")) > 1:
        return f"Open MPI ({env['OMPI_COMM_WORLD_SIZE']} ranks)"
    workers = _tpu_workers()
    return f"a TPU slice ({workers} workers)" if workers > 1 else None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return 0


def _tpu_workers() -> int:
    """The workers of this Cloud TPU slice (1 off a TPU VM), as JAX's own detection counts
    them (its cluster classes; the environment or the VM's metadata)."""
    try:
        from jax._src import cloud_tpu_init
        if not cloud_tpu_init.running_in_cloud_tpu_vm:
            return 1
        from jax._src.clusters import cloud_tpu_cluster as tpu
        for cluster in (tpu.GkeTpuCluster, tpu.GceTpuCluster):
            if cluster.is_env_present():
                return int(cluster.get_process_count())
    except Exception:  # a JAX whose private cluster classes moved: let JAX decide alone
        return 1
    return 1


def _host_port(coordinator: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6-address]:PORT`` too) split and checked.

    Raises:
      ValueError: not of that form, or a port outside 1..65535.
    """
    host, sep, port = coordinator.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--coordinator {coordinator!r}: write HOST:PORT, e.g. "
                         f"10.0.0.1:12355 (process 0's host and a free port on it)")
    return host, int(port)


def _check_coordinator(host: str, port: int, process_id: int, timeout: int) -> None:
    """What can be checked before JAX connects, which aborts the process on failure: the
    host resolves; process 0 (which runs the coordination service on every interface at
    ``port``) is on ``host`` and the port is free; another process reaches ``host:port``
    within ``timeout`` seconds.

    Raises:
      ValueError: as :func:`start` says, or nothing answering at ``host:port``.
    """
    import time
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ValueError(f"--coordinator {host}:{port}: unknown host ({e.strerror})") from None
    if process_id == 0:
        family, _, _, _, address = addresses[0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((address[0], 0))
            except OSError:
                raise ValueError(f"--coordinator {host}:{port}: {host} is not an address of "
                                 f"this machine, but process 0 runs the coordinator: start "
                                 f"process 0 on {host}") from None
        for family, any_address in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
            try:
                s = socket.socket(family, socket.SOCK_STREAM)
            except OSError:  # no IPv6 here
                continue
            with s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((any_address, port))
                except OSError as e:
                    raise ValueError(f"--coordinator {host}:{port}: port {port} is in use on "
                                     f"this machine ({e.strerror}); choose another") from None
            break
        return
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=5):
                return
        except OSError as e:
            if time.monotonic() >= deadline:
                raise ValueError(f"--coordinator {host}:{port}: nothing answered there within "
                                 f"{timeout} s ({e.strerror or e}); start process 0 (--process-id "
                                 f"0) on {host}, or check the address and that the port is "
                                 f"open") from None
            time.sleep(0.5)


def _initialize(where: str, timeout: int, **flags) -> None:
    """:func:`jax.distributed.initialize` with this module's timeouts, then :func:`_meet`,
    ending the process with one line if the processes have not all connected and met after
    ``timeout`` seconds."""
    import jax
    connected = threading.Event()

    def watch():
        if not connected.wait(timeout):
            n = flags.get("num_processes")
            hint = ("start every process with the same --coordinator and --num-processes" if n
                    else "every task of the job must run the command (e.g. through srun)")
            print(f"fedjax-sc: error: {where}: {f'the {n} processes' if n else 'the processes'}"
                  f" did not all connect within {timeout} s (--connect-timeout); {hint}",
                  file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(1)

    threading.Thread(target=watch, name="fedjax-sc-connect", daemon=True).start()
    minutes = -(-(timeout + 30) // 60)  # the CPU backend's topology exchange, at the first
    for name, default in (("jax_cpu_get_local_topology_timeout_minutes", 2),  # device use
                          ("jax_cpu_get_global_topology_timeout_minutes", 5)):
        jax.config.update(name, max(default, minutes))
    try:  # JAX's own limits only back ours up: their failure aborts the process
        jax.distributed.initialize(**flags, initialization_timeout=timeout + 30,
                                   heartbeat_timeout_seconds=HEARTBEAT_S,
                                   shutdown_timeout_seconds=SHUTDOWN_S)
        _meet(timeout + 30)
    except (ValueError, TypeError, RuntimeError) as e:
        raise RuntimeError(f"{where}: jax.distributed.initialize failed: {_first_line(e)}"
                           ) from e
    finally:
        connected.set()


def _meet(timeout: int) -> None:
    """Lets the connected processes meet before the run: they start the backend (which
    exchanges the devices), wait for each other at a barrier of JAX's coordination service
    (up to ``timeout`` seconds), then run one tiny collective, which connects the collectives
    of all devices (gloo on CPU) while every process is there. Gloo gives that connection a
    fixed 30 s; met here, no process reaches it later than another by the time it took to
    load its data."""
    import jax
    import numpy as np
    from jax._src import distributed  # the coordination service's client (no public name)
    from jax.experimental import multihost_utils
    jax.devices()
    client = distributed.global_state.client
    if client is not None:
        client.wait_at_barrier("fedjax-sc met", timeout_in_ms=timeout * 1000)
    multihost_utils.process_allgather(np.asarray([jax.process_index()], np.int32))


def several() -> bool:
    """Whether this run spans several processes (never starts JAX by itself)."""
    import jax
    return jax.distributed.is_initialized() and jax.process_count() > 1


def primary() -> bool:
    """Whether this process writes the run folder and logs: process 0, or the only one
    (never starts JAX by itself)."""
    import jax
    return not jax.distributed.is_initialized() or jax.process_index() == 0


def primary_log(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log`` in process 0; a function dropping every line in the others."""
    return log if primary() else _drop


def _drop(line: str) -> None:
    """Drops a line (the processes after the first)."""


def barrier(name: str) -> None:
    """Waits until every process has reached the barrier ``name`` (nothing with one process;
    a collective: every process must call it)."""
    if several():
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


class Agreement:
    """Checks that must pass on every process before any process changes anything: each
    process calls :meth:`reached` once its checks passed, or :meth:`failed` with its error;
    both are the same collective, so a failing process never leaves the others waiting in
    one. With one process both do nothing.

    Args:
      what: what the processes agree on (for the messages).
    """

    def __init__(self, what: str):
        self.what, self.done = what, False

    def reached(self) -> None:
        """This process's checks passed.

        Raises:
          RuntimeError: another process failed its checks (names it and its error).
        """
        for k, message in enumerate(self._exchange("")):
            if message:
                import jax
                raise RuntimeError(f"process {k} of {jax.process_count()} stopped "
                                   f"{self.what}: {message}")

    def step(self) -> None:
        """A point every process reaches before a collective that a process which already
        failed would not call (loading a share of the data): the same exchange as
        :meth:`reached`, after which :meth:`reached` and :meth:`failed` are still due.

        Raises:
          RuntimeError: another process failed its checks (names it and its error).
        """
        self.reached()
        self.done = False

    def failed(self, error: BaseException) -> None:
        """This process's checks failed with ``error`` (tells the others; the caller raises
        it). Does nothing once :meth:`reached` was called."""
        if not self.done:
            self._exchange(describe(error) or type(error).__name__)

    def _exchange(self, message: str) -> list[str]:
        self.done = True
        if not several():
            return []
        return allgather_json(message[:_MESSAGE_CHARS])


def allgather_json(value: Any) -> list[Any]:
    """Every process's ``value`` (anything :func:`json.dumps` writes), in process order: the
    JSON text as a padded uint8 array through ``multihost_utils.process_allgather``, in two
    gathers whatever its size (the lengths, then the texts). ``[value]`` with one process; a
    collective: every process must call it."""
    import json
    if not several():
        return [value]
    import numpy as np
    from jax.experimental import multihost_utils
    text = np.frombuffer(json.dumps(value, ensure_ascii=False).encode(), np.uint8)
    sizes = np.asarray(multihost_utils.process_allgather(np.asarray([text.size], np.int64)))
    buf = np.zeros(int(sizes.max()), np.uint8)
    buf[:text.size] = text
    rows = np.asarray(multihost_utils.process_allgather(buf))
    return [json.loads(bytes(row[:int(n)]).decode()) for row, n in zip(rows, sizes.reshape(-1))]


def describe(e: BaseException) -> str:
    """One line for an error: ``"<reason>: <path>"`` for an ``OSError`` with a file name, else
    the first line of its message."""
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        return f"{e.strerror}: {e.filename}" + (f" -> {e.filename2}" if e.filename2 else "")
    return _first_line(e)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


_LOST = ("gloo", "nccl", "connection", "peer", "heartbeat", "barrier", "unavailable",
         "deadline_exceeded", "coordination", "socket", "preempt")
_COLLECTIVES = ("gloo", "nccl")
"""Collective backends: an error naming one is a failed collective, whatever its type (a
checkpoint library may re-raise the runtime's error as a ValueError)."""


def lost_contact(e: BaseException) -> str | None:
    """For an error that says another process is gone (a collective or a barrier of the
    distributed runtime failed, in a run of several processes): one line naming this process
    and the runtime's reason; None for any other error."""
    if not several():
        return None
    import jax
    seen = e
    while seen is not None:
        text = str(seen).lower()
        if any(word in text for word in _COLLECTIVES) or (
                isinstance(seen, jax.errors.JaxRuntimeError)
                and any(word in text for word in _LOST)):
            reason = _first_line(seen).removeprefix("UNKNOWN: ").removeprefix("INTERNAL: ")
            return (f"process {jax.process_index()} of {jax.process_count()} lost contact "
                    f"with the others (one of them stopped, or its host failed): {reason}")
        seen = seen.__cause__ or seen.__context__
    return None


def leave(code: int) -> int:
    """Ends a failed process of a multi-process run at once with ``code`` (its output
    flushed), skipping JAX's shutdown barrier, which waits for every other process (up to
    :data:`SHUTDOWN_S` s, then aborts); returns ``code`` in a run of one process or on
    success."""
    if code and several():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
