"""The command-line spelling of a run's configuration fields: one rule, used by the options
(:mod:`fedjax_sc.run.options`) and by every error message that names a flag."""

from __future__ import annotations


def flag(field: str) -> str:
    """The command-line flag of a config field: ``embed_dim`` -> ``--embed-dim``."""
    return "--" + field.replace("_", "-")
