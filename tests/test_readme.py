"""The README's library snippet runs as printed (at most 15 lines) and learns; its results
table says what the rendered tables in results/ say."""

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"

RUN_XLA_FLAGS = "--xla_backend_optimization_level=1"
"""The snippet runs its compiled round ten times and its Ap phase 250 steps: XLA's level 1
runs them about three times faster than the suite's level 0 (tests/conftest.py) for the
same compile time, so its interpreter takes level 1 (the suite's other flags kept)."""


def test_the_readme_snippet_runs_as_printed():
    text = README.read_text()
    section = text[text.index("## Using the library"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.strip().splitlines()) <= 15
    # a fresh interpreter, as a reader who pastes it: nothing imported or set by the suite
    # (the suite's level 0 only: XLA's defaults, FEDJAX_SC_TEST_XLA_OPT=1, stay as they are)
    flags = [RUN_XLA_FLAGS if f == "--xla_backend_optimization_level=0" else f
             for f in os.environ.get("XLA_FLAGS", "").split()]
    env = dict(os.environ, XLA_FLAGS=" ".join(flags))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, cwd=README.parent, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert [int(line.split()[0]) for line in lines[:10]] == list(range(1, 11))
    first, last = (float(lines[i].split()[-1]) for i in (0, 9))
    ap = float(lines[10].split()[-1])
    assert last > max(first, 0.6) and 0.6 < ap <= 1.0  # above chance: it learns


def test_the_readme_results_table_matches_the_rendered_table(table_rows):
    # the README's FDU table is copied by hand from results/fdu/table3.md (made by `fedjax-sc
    # results render`): every row and figure must agree
    rendered = README.parent / "results" / "fdu" / "table3.md"
    text = README.read_text()
    readme = table_rows(text[text.index("## Results on FDU-MTL"):], "| method |")
    table = table_rows(rendered.read_text(), "| method |")
    assert list(readme) == list(table)
    columns = [c for c in next(iter(readme.values())) if c != "method"]
    for method, row in readme.items():
        assert {c: row[c] for c in columns} == {c: table[method][c] for c in columns}, method
