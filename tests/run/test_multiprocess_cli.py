"""``fedjax-sc train`` on several processes, for real: subprocesses of the CLI joined by
``jax.distributed`` on this machine (CPU devices faked with XLA_FLAGS, gloo collectives).

Several processes end with the figures of one process whatever the devices; a killed process
stops the other within the heartbeat timeout and the last checkpoint resumes the run with any
number of processes; bad flags are refused in one line before anything is written."""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedjax_sc.run import cli
from fedjax_sc.run.plumbing import processes

ROOT = Path(__file__).resolve().parents[2]
SCENE = ("--scene synthetic --synthetic-clients 4 --synthetic-train 16 --synthetic-test 8 "
         "--max-len 8 --embed-dim 6 --hidden 3 --mlp-hidden 4 --batch-size 4 --local-epochs 1 "
         "--ap-evals 1 --ap-steps 1").split()
ROUNDS = 3
TIMING = {"seconds", "client_steps_per_s", "timing", "environment"}
"""Entries of metrics.jsonl and report.json that measure the machine, not the run."""
RUNTIME_STOPS = ("lost contact with the others",  # ours: the runtime raised an error
                 "another task died",  # JAX: a peer missed its heartbeats (HEARTBEAT_S)
                 "gloo::")  # gloo aborted the process at once (CPU collectives)
"""How a process learns that another one died (processes.py's docstring; docs/scale.md)."""


CONNECT_S = 300
"""``--connect-timeout`` of the tests' processes: on a loaded machine a process may start,
or load its share, minutes after the other."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices: int, **extra: str) -> dict[str, str]:
    """The test session's environment with ``devices`` CPU devices per process and its
    persistent compilation cache (conftest.py), so that a repeated program is not compiled
    again; ``extra`` variables added."""
    return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=processes.cpu_device_flags(devices),
                PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                **extra)


def _start(out: Path, procs: int, devices: int, *extra: str, scene=SCENE,
           env: dict[str, str] | None = None) -> list[subprocess.Popen]:
    """``procs`` processes of ``fedjax-sc train`` on the tiny scene (or ``scene``'s flags),
    ``devices`` each, with ``env`` added to the environment."""
    port = _free_port()
    command = [sys.executable, "-m", "fedjax_sc.run.cli", "train", *scene, "--out", str(out),
               "--connect-timeout", str(CONNECT_S), *extra]
    return [subprocess.Popen(
        command + ([] if procs == 1 else ["--coordinator", f"127.0.0.1:{port}",
                                          "--num-processes", str(procs), "--process-id", str(i)]),
        cwd=ROOT, env=_env(devices, **(env or {})), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
        for i in range(procs)]


def _wait(workers: list[subprocess.Popen], timeout: float = 600) -> list[tuple[int, str, str]]:
    """Every worker's (exit status, stdout, stderr); kills them all past ``timeout``."""
    ends, done = time.monotonic() + timeout, []
    for i, w in enumerate(workers):
        try:
            out, err = w.communicate(timeout=max(1.0, ends - time.monotonic()))
        except subprocess.TimeoutExpired:
            for x in workers:
                x.kill()
            pytest.fail(f"process {i} of {len(workers)} did not end within {timeout} s")
        done.append((w.returncode, out, err))
    return done


def _train(out: Path, procs: int, devices: int, *extra: str, **start) -> list[str]:
    """A run that must succeed (``start``: :func:`_start`'s keywords); checks that process 0
    alone logged; returns every process's stderr."""
    ended = _wait(_start(out, procs, devices, *extra, **start))
    for i, (code, stdout, stderr) in enumerate(ended):
        assert code == 0, f"process {i} of {procs} failed:\n{stderr[-3000:]}"
    assert "round   1" in ended[0][1] or "resumed" in ended[0][1]
    # gloo's own connection lines, whole or cut apart by another rank's line (mid-line, a
    # line break even inside one): their words alone, none of which a line of ours is made of
    piece = re.compile(r"\[Gloo\]|Rank|is\s+connected\s+to|peer\s+ranks\.?|Expected\s+number"
                       r"\s+of\s+connected|is\s*:|\d+")
    for code, stdout, stderr in ended[1:]:  # gloo's own connection lines aside
        assert not piece.sub("", stdout).strip(), stdout
    return [stderr for _, _, stderr in ended]


def _figures(out: Path) -> dict:
    """report.json, the lines of metrics.jsonl (without what measures the machine) and the
    test-hits record (gathered from every process's share of the clients)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in TIMING}
        return [strip(v) for v in x] if isinstance(x, list) else x
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    return strip({"report": json.loads((out / "report.json").read_text()), "metrics": rows,
                  "hits": json.loads((out / "test_hits.json").read_text())})


def _assert_same(a, b, where="") -> None:
    """Equal structure and strings; numbers within 1e-5."""
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for k in a:
            _assert_same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert a == pytest.approx(b, abs=1e-5), where
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run in one process with one device (the runs it is compared with
    reuse its compiled programs when they resume in one process)."""
    out = tmp_path_factory.mktemp("one-process") / "run"
    _train(out, 1, 1, "--rounds", str(ROUNDS))
    return out


DOMAINS = ("apparel", "MR", "books", "dvd")
FDU_ROUNDS = 2
WORDS = ("good", "bad", "film", "plot", "great", "awful", "fine", "dull", "dry", "warm")


def _write_fdu(folder: Path) -> Path:
    """A tiny corpus in the FDU-MTL format, 4 domains of unequal sizes (the largest client of
    each split on process 1's side) and words of their own."""
    folder.mkdir(parents=True, exist_ok=True)
    for d, domain in enumerate(DOMAINS):
        for split, n in (("train", 6 + 2 * d), ("test", 3 + d)):
            (folder / f"{domain}.task.{split}").write_text("".join(
                f"{i % 2}\t{WORDS[(i + d) % 10]} {WORDS[(3 * i + d * d) % 10]} {domain} "
                f"{'w' + str(d * i % 7)}\n" for i in range(n)))
    return folder


def _fdu_scene(data: Path) -> list[str]:
    """The flags of a FedPer run on :func:`_write_fdu`'s corpus (private leaves, local
    vocabularies, a vocabulary cut among words of equal counts)."""
    return ["--scene", "fdu", "--data-dir", str(data), "--domains", *DOMAINS, "--max-len", "5",
            "--vocab-size", "12", "--algorithm", "fedper", "--rounds", str(FDU_ROUNDS),
            *SCENE[SCENE.index("--embed-dim"):]]


def test_each_process_loads_only_its_clients_and_ends_with_the_figures_of_one(tmp_path):
    scene = _fdu_scene(_write_fdu(tmp_path / "data"))
    _train(tmp_path / "one", 1, 1, scene=scene)
    errors = _train(tmp_path / "two", 2, 2, scene=scene, env={"FEDJAX_SC_LOG_LEVEL": "DEBUG"})
    want = _figures(tmp_path / "one")
    assert len([r for r in want["metrics"] if r["phase"] == "round"]) == FDU_ROUNDS
    assert want["report"]["Ap"] is not None and len(want["report"]["clients"]) == 4
    _assert_same(_figures(tmp_path / "two"), want, "2 processes x 2 devices, shares")
    for name in ("vocab.json", "fingerprint.json"):
        assert (tmp_path / "two" / name).read_bytes() == (tmp_path / "one" / name).read_bytes()
    for process, mine in enumerate((DOMAINS[:2], DOMAINS[2:])):  # clients 0-1 and 2-3
        read = set(re.findall(r"reading \S+/(\w+)\.task\.(?:train|test)", errors[process]))
        assert read == set(mine), (process, errors[process][-2000:])
    report = json.loads((tmp_path / "two" / "report.json").read_text())
    assert report["environment"]["device"].endswith("x 4 in 2 processes")
    assert not list((tmp_path / "two").glob(".*"))  # the lock file is gone with the run


def test_a_share_that_fails_to_load_stops_every_process(tmp_path):
    data = _write_fdu(tmp_path / "data")
    with (data / "dvd.task.train").open("a") as f:  # read by process 1 alone
        f.write("7\tno such label\n")
    ended = _wait(_start(tmp_path / "run", 2, 2, scene=_fdu_scene(data)), timeout=300)
    (code0, _, err0), (code1, _, err1) = ended
    last0, last1 = err0.strip().splitlines()[-1], err1.strip().splitlines()[-1]
    assert code1 == 1 and "dvd.task.train:13" in last1, err1[-2000:]
    assert code0 == 1 and last0.startswith("fedjax-sc: error: process 1 of 2 stopped before "
                                           "training:") and "dvd.task.train" in last0, err0[-2000:]
    assert not (tmp_path / "run").exists()


POPULATION = ("--seeds", "0,1", "--algorithm", "fedper", "--rounds", "2")
"""A 2-member population with private leaves (the members x clients mesh's both shardings)."""


def _members(out: Path) -> dict:
    """Every member folder's figures (:func:`_figures`)."""
    return {m: _figures(out / m) for m in ("seed-0", "seed-1")}


@pytest.fixture(scope="module")
def population_reference(tmp_path_factory) -> Path:
    """The 2-member population in one process with 1 device."""
    out = tmp_path_factory.mktemp("population-one-device") / "pop"
    _train(out, 1, 1, *POPULATION)
    return out


def test_a_population_on_a_2x2_mesh_gives_the_figures_of_one_device(population_reference,
                                                                     tmp_path):
    workers = _start(tmp_path / "mesh", 1, 4, *POPULATION, "--mesh", "2x2")
    (code, stdout, stderr), = _wait(workers)
    assert code == 0, stderr[-3000:]
    assert "2 members over 2 rows of a 2 x 2 mesh" in stdout, stdout[-2000:]
    _assert_same(_members(tmp_path / "mesh"), _members(population_reference), "2 x 2 mesh")


def test_a_population_over_two_processes_gives_the_figures_of_one(population_reference,
                                                                  tmp_path):
    # the automatic mesh: 2 x 2, each process's 2 devices one member's row
    _train(tmp_path / "two", 2, 2, *POPULATION)
    _assert_same(_members(tmp_path / "two"), _members(population_reference),
                 "2 processes x 2 devices")


def test_a_mesh_that_does_not_fit_is_one_line(tmp_path, capsys):
    import jax
    devices = len(jax.devices())
    for mesh, says in ((f"{devices + 1}x1", f"{devices + 1} devices, but the run has "
                                           f"{devices}"), ("2by2", "write MEMBERSxCLIENTS")):
        out = tmp_path / mesh
        assert cli.main(["train", *SCENE, *POPULATION, "--mesh", mesh, "--out", str(out)]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"fedjax-sc: error: --mesh {mesh}") \
            and says in err[0], err
        assert not list(out.glob("*/*"))


@pytest.mark.slow
def test_a_killed_process_stops_the_other_and_the_run_resumes_with_any_count(reference,
                                                                             tmp_path):
    out = tmp_path / "killed"
    # one device per process: the runtime reports the broken collective at once (with
    # several, it may wait out the heartbeat, up to 30 s; docs/scale.md has both measured)
    workers = _start(out, 2, 1, "--rounds", str(ROUNDS))
    digests, ends = out / "checkpoints" / "digests.json", time.monotonic() + 600
    while not (digests.exists() and '"1"' in digests.read_text()):  # round 1 fully saved
        if time.monotonic() > ends or any(w.poll() is not None for w in workers):
            for w in workers:
                w.kill()
            pytest.fail("round 1 was never saved:\n" + workers[0].communicate()[1][-3000:])
        time.sleep(0.02)
    workers[1].kill()  # SIGKILL
    killed = time.monotonic()
    (code, _, err), = _wait(workers[:1], timeout=processes.HEARTBEAT_S + 60)
    seconds = time.monotonic() - killed
    workers[1].communicate()
    assert code != 0 and seconds < processes.HEARTBEAT_S + 30, (code, seconds, err[-2000:])
    assert any(m in err for m in RUNTIME_STOPS), err[-3000:]
    print(f"process 0 stopped {seconds:.1f} s after the kill (exit {code}): "
          f"{[m for m in RUNTIME_STOPS if m in err]}")
    if RUNTIME_STOPS[0] in err:  # our line names the saved round and how to go on
        line, = [x for x in err.splitlines() if x.startswith("fedjax-sc: error:")]
        assert "process 0 of 2" in line and "--resume" in line and "every process" in line
    assert "1" in {p.name for p in (out / "checkpoints").iterdir()}

    shutil.copytree(out, tmp_path / "alone")
    _train(out, 2, 1, "--rounds", str(ROUNDS), "--resume")  # the same command again
    _assert_same(_figures(out), _figures(reference), "resumed in 2 processes")
    # the checkpoints are the same for any number of processes and devices: 2 -> 1
    _train(tmp_path / "alone", 1, 1, "--rounds", str(ROUNDS), "--resume")
    _assert_same(_figures(tmp_path / "alone"), _figures(reference), "2, then 1")


def test_a_lost_process_is_one_line_naming_the_saved_round(tmp_path, capsys, monkeypatch):
    # what a process prints when the runtime reports a broken collective as an error (the
    # case of one device per process; tests the message without a second process)
    import jax

    from fedjax_sc.run import train as train_module
    from fedjax_sc.run.setup import CheckpointError
    out = tmp_path / "run"

    def lost(config, log=print):
        (out / "checkpoints" / "2").mkdir(parents=True)
        try:
            raise jax.errors.JaxRuntimeError("UNKNOWN: Gloo all-reduce failed: [pair.cc:547] "
                                             "Connection closed by peer [10.0.0.2]:4321")
        except jax.errors.JaxRuntimeError as e:
            raise CheckpointError("round 3: saving failed") from e

    left = []
    monkeypatch.setattr(train_module, "train", lost)
    monkeypatch.setattr(processes, "several", lambda: True)
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    monkeypatch.setattr(processes, "leave", lambda code: left.append(code) or code)
    assert cli.main(["train", "--out", str(out)]) == 1 and left == [1]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "fedjax-sc: error: process 1 of 2 lost contact with the others"), err
    assert "Connection closed by peer" in err[0] and "round 2 is saved" in err[0]
    assert "--resume to the same command in every process" in err[0]


def test_a_check_failing_in_one_process_stops_every_process(tmp_path):
    from fedjax_sc.run import rundir
    out = tmp_path / "run"
    with rundir.locked(out):  # another run holds the folder: process 0 cannot lock it
        ended = _wait(_start(out, 2, 1, "--rounds", "1"), timeout=300)
    (code0, _, err0), (code1, _, err1) = ended
    assert code0 == 1 and "is in use by" in err0.strip().splitlines()[-1], err0[-2000:]
    last = err1.strip().splitlines()[-1]
    assert code1 == 1 and last.startswith("fedjax-sc: error: process 0 of 2 stopped before "
                                          "training:") and "is in use by" in last, err1[-2000:]
    assert not out.exists()


MEET = """
import sys, time
from fedjax_sc.run.plumbing import processes
port, me = sys.argv[1], int(sys.argv[2])
processes.start(f"127.0.0.1:{port}", 2, me, 300)
if me == 1:  # loading its data on a loaded machine: past gloo's fixed 30 s of set-up
    time.sleep(40)
print(processes.allgather_json(me), flush=True)
"""
LATE_TEST = "test_a_process_reaching_the_first_collective_late_is_waited_for"


@pytest.fixture(scope="module", autouse=True)
def late_meeting(request):
    """The two processes of :data:`MEET`, started with the module when its test is selected,
    so that their deliberate 40 s wait passes while the module's other tests run (the test,
    last in the file, collects them)."""
    if not any(item.name == LATE_TEST for item in request.session.items):
        yield None
        return
    port = str(_free_port())
    workers = [subprocess.Popen([sys.executable, "-c", MEET, port, str(i)], cwd=ROOT,
                                env=_env(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for i in range(2)]
    yield workers
    for w in workers:  # the test did not run (a failure before it, -x): none is left behind
        if w.poll() is None:
            w.kill()
            w.communicate()


@pytest.mark.parametrize("flags, says", [
    (["--coordinator", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "2"],
     "--process-id 2 is outside [0, 2)"),
    (["--num-processes", "2", "--process-id", "0"], "missing: --coordinator"),
    (["--coordinator", "localhost", "--num-processes", "2", "--process-id", "1"],
     "write HOST:PORT"),
    (["--coordinator", "no-such-host.invalid:1234", "--num-processes", "2", "--process-id",
      "1"], "unknown host"),
])
def test_bad_process_flags_are_one_line_before_anything(flags, says, tmp_path, capsys,
                                                       monkeypatch):
    lookup = socket.getaddrinfo

    def offline(host, *args, **kwargs):  # .invalid never resolves: no resolver asked
        if str(host).endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", offline)
    out = tmp_path / "run"
    assert cli.main(["train", *SCENE, "--out", str(out), *flags]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fedjax-sc: error:") and says in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("process_id, says", [
    (1, "nothing answered there within 3 s"),  # no process 0
    (0, "did not all connect within 3 s"),  # no process 1
])
def test_processes_that_never_meet_give_up_in_one_line(process_id, says, tmp_path):
    out = tmp_path / "run"
    (code, stdout, stderr), = _wait(_start(
        out, 1, 1, "--coordinator", f"127.0.0.1:{_free_port()}", "--num-processes", "2",
        "--process-id", str(process_id), "--connect-timeout", "3"), timeout=120)
    lines = stderr.strip().splitlines()
    assert code == 1 and len(lines) == 1 and says in lines[0], stderr[-2000:]
    assert lines[0].startswith("fedjax-sc: error: --coordinator 127.0.0.1:")
    assert not out.exists()  # the message's "within 3 s" is the flag's, not the default's


def test_a_collective_failing_inside_a_checkpoint_save_is_lost_contact_not_a_disk_error(
        monkeypatch):
    # orbax re-raised gloo's broken all-gather as a ValueError in a killed-peer run: it must
    # read as a lost process (one line, how to resume), not as "free space or fix the folder"
    import jax

    from fedjax_sc.run import setup

    class Manager:  # a checkpoint manager whose save meets a dead peer
        directory = "/runs/x/checkpoints"

        def save(self, *args, **kwargs):
            raise ValueError("UNKNOWN: Gloo AllGather failed: [external/gloo/gloo/transport/tcp/"
                             "pair.cc:538] Read error [127.0.0.1]:10156: Connection reset by peer")

    monkeypatch.setattr(processes, "several", lambda: True)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    monkeypatch.setattr(jax, "process_count", lambda: 2)
    state = setup.ServerState(params={"w": jax.numpy.zeros(2)}, round=jax.numpy.asarray(3))
    with pytest.raises(ValueError) as caught:
        setup.save_checkpoint(Manager(), 3, state, setup.ClientStates(private={}))
    line = processes.lost_contact(caught.value)
    assert line.startswith("process 0 of 2 lost contact with the others")
    assert "Connection reset by peer" in line
    # with one process the same error is no lost contact, and a disk error never is
    monkeypatch.setattr(processes, "several", lambda: False)
    assert processes.lost_contact(caught.value) is None
    monkeypatch.setattr(processes, "several", lambda: True)
    assert processes.lost_contact(OSError(28, "No space left on device")) is None


def test_a_process_reaching_the_first_collective_late_is_waited_for(late_meeting):
    # once, process 0 gave up 30 s into its first collective ("Gloo context initialization
    # failed: DEADLINE_EXCEEDED"); the processes now meet in processes.start
    for i, (code, stdout, stderr) in enumerate(_wait(late_meeting, timeout=600)):
        assert code == 0, f"process {i}:\n{stderr[-3000:]}"
        assert stdout.strip().splitlines()[-1] == "[0, 1]", stdout
