"""Shared pytest fixtures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import pytest

FAST_COMPILE_XLA_FLAGS = ("--xla_cpu_use_fusion_emitters=false",
                          "--xla_backend_optimization_level=0")
"""Compiling, not running, is what the suite's tiny programs cost, and XLA's CPU fusion
emitters and LLVM's optimisation take most of it. A FedAvg round of 3 clients compiles in
9.4 s with XLA's defaults, 4.1 s without the fusion emitters at level 1 and 1.4 s at level 0;
KTEPS*'s in 47 s, 9.0 s and 4.2 s (one sitting). Level 0 rounds some floats differently from
the default build (a round's mean loss by ~1e-7), which the suite's tolerances allow."""


def _xla_accepts(flags: list[str]) -> bool:
    """Whether this jaxlib knows ``flags`` (XLA aborts the process on an unknown XLA_FLAGS
    entry, so a throwaway interpreter asks first)."""
    env = dict(os.environ, XLA_FLAGS=" ".join([os.environ.get("XLA_FLAGS", ""), *flags]),
               JAX_PLATFORMS="cpu")
    probe = "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"
    try:
        return subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                              timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def pytest_configure(config):
    """Share compiled XLA programs between tests: many build the same tiny round afresh
    (a resumed run, the CLI, every algorithm), and compiling dominates the suite's time.
    Compile them with less optimisation too (:data:`FAST_COMPILE_XLA_FLAGS`; a flag already
    in XLA_FLAGS is left as it is; ``FEDJAX_SC_TEST_XLA_OPT=1`` keeps XLA's defaults).

    The cache is ``.pytest_cache/jax-compilation`` (``FEDJAX_SC_TEST_JAX_CACHE`` names another
    folder: ``benchmarks/suite_time.py`` times cold runs in fresh ones). pytest-xdist's workers
    and the subprocess tests share it; JAX writes an entry once and reads a half-written one
    as a miss (a warning), so sharing costs at most a compile."""
    cache = Path(os.environ.get("FEDJAX_SC_TEST_JAX_CACHE")
                 or Path(config.rootpath) / ".pytest_cache" / "jax-compilation")
    # the same settings for this process and, through the environment, for the subprocesses
    # the tests start (several processes, the CLI)
    settings = {"jax_compilation_cache_dir": str(cache),
                # not the ~1,300 single operations run outside jit (a few ms each to compile,
                # and writing them costs more than it saves); every round, evaluation and Ap
                # phase takes longer
                "jax_persistent_cache_min_compile_time_secs": 0.1,
                "jax_persistent_cache_min_entry_size_bytes": 0}
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep LONGEST_FIRST's order
        config.option.loadscopereorder = False
    for name, value in settings.items():
        jax.config.update(name, value)
        os.environ[name.upper()] = str(value)
    if os.environ.get("FEDJAX_SC_TEST_XLA_OPT") == "1":
        return
    given = os.environ.get("XLA_FLAGS", "")
    extra = [f for f in FAST_COMPILE_XLA_FLAGS if f.split("=")[0] not in given]
    if extra and not _xla_accepts(extra):  # a newer jaxlib dropped one: keep the others
        extra = [f for f in extra if _xla_accepts([f])]
    if extra:  # read when the CPU backend starts: at the first computation, after this hook
        os.environ["XLA_FLAGS"] = " ".join([given, *extra]).strip()


LONGEST_FIRST = ("run/test_multiprocess_cli.py", "run/test_population_run.py",
                 "core/test_round.py", "run/test_train.py", "test_readme.py",
                 "algorithms/test_baselines.py", "core/test_population.py",
                 "run/test_reproduce.py", "test_own_algorithm.py", "run/test_compare.py",
                 "run/test_run_lock.py", "algorithms/test_feddyn.py",
                 "run/test_results.py", "run/test_rundir.py", "run/test_kteps_star.py",
                 "core/test_heterogeneity.py")
"""Test files (under tests/) by their time in a cold run, longest first: pytest-xdist hands
out whole files (``--dist loadfile``) in this order, then the others in the usual one, so the
workers end together instead of one waiting on a long file handed out last (by default
pytest-xdist hands out the files with the most tests first, and the README's snippet, one
of the longest, has two)."""


def pytest_collection_modifyitems(config, items):
    """Runs the files of :data:`LONGEST_FIRST` first, in its order (a stable sort)."""
    root = Path(config.rootpath) / "tests"
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def key(item):
        try:
            return rank.get(item.path.relative_to(root).as_posix(), len(rank))
        except ValueError:  # a test outside tests/
            return len(rank)
    items.sort(key=key)


# The corpus lives next to the checkout (../shared/data/fdu-mtl); never inside the repository.
DEFAULT_FDU_DIR = Path(__file__).resolve().parents[1].parent / "shared/data/fdu-mtl"


@pytest.fixture(scope="session")
def fdu_dir() -> Path:
    """The FDU-MTL directory (env FEDJAX_SC_FDU_DIR overrides); skips the test when absent."""
    path = Path(os.environ.get("FEDJAX_SC_FDU_DIR", DEFAULT_FDU_DIR))
    if not (path / "apparel.task.train").is_file():
        pytest.skip(f"FDU-MTL corpus not found at {path} (set FEDJAX_SC_FDU_DIR)")
    return path


TINY_DIMS = dict(embed_dim=8, hidden=4, mlp_hidden=6)
"""The model sizes of the tiny FedAvg scene below (with :func:`scene`, one compiled round
serves the round's tests and the baselines')."""


@pytest.fixture(scope="session")
def scene():
    """A 3-client synthetic scene of unequal client sizes (a test module may override it)."""
    from fedjax_sc.data.scenes import synthetic_scene
    return synthetic_scene(num_clients=3, train_per_client=14, test_per_client=6, max_len=10,
                           seed=3)


@pytest.fixture(scope="session")
def model(scene):
    """The TextClassifier of :func:`scene` with :data:`TINY_DIMS`."""
    from fedjax_sc.models.text_classifier import TextClassifier
    return TextClassifier(vocab_size=len(scene.vocab), **TINY_DIMS)


def run_rounds(algorithm, model, data, rounds, num_clients):
    """``rounds`` compiled rounds (batch 4, one local epoch) from the model's seed-0 params;
    returns ``(server state, client states, the last round's metrics)``."""
    from fedjax_sc.core import round as rnd
    from fedjax_sc.models.text_classifier import init_params
    state, clients = rnd.init_states(algorithm, init_params(model, jax.random.key(0)),
                                     num_clients)
    step = jax.jit(rnd.build_round(algorithm, batch_size=4, local_epochs=1))
    for _ in range(rounds):
        state, clients, metrics = step(state, clients, data, jax.random.key(1))
    return state, clients, metrics


@pytest.fixture(scope="session")
def rounds():
    """:func:`run_rounds`, for the tests of algorithms that own state."""
    return run_rounds


def markdown_rows(text: str, head: str = "|") -> dict[str, dict[str, str]]:
    """The rows of the first Markdown table in ``text`` whose header line starts with
    ``head``: first cell -> {column name: cell}, cells stripped; a line that does not start
    with ``|`` ends the table."""
    lines = text[text.index(head):].splitlines()
    names = [c.strip() for c in lines[0].strip().strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[cells[0]] = dict(zip(names, cells))
    return rows


@pytest.fixture(scope="session")
def table_rows():
    """:func:`markdown_rows`, for tests that read the Markdown tables the code writes."""
    return markdown_rows
