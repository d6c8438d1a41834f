"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import pytest


def pytest_configure(config):
    """Share compiled XLA programs between tests: many build the same tiny round afresh
    (a resumed run, the CLI, every algorithm), and compiling dominates the suite's time."""
    cache = Path(config.rootpath) / ".pytest_cache" / "jax-compilation"
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

# The corpus lives next to the checkout (../shared/data/fdu-mtl); never inside the repository.
DEFAULT_FDU_DIR = Path(__file__).resolve().parents[1].parent / "shared/data/fdu-mtl"


@pytest.fixture(scope="session")
def fdu_dir() -> Path:
    """The FDU-MTL directory (env FEDJAX_SC_FDU_DIR overrides); skips the test when absent."""
    path = Path(os.environ.get("FEDJAX_SC_FDU_DIR", DEFAULT_FDU_DIR))
    if not (path / "apparel.task.train").is_file():
        pytest.skip(f"FDU-MTL corpus not found at {path} (set FEDJAX_SC_FDU_DIR)")
    return path
