"""The package's import graph, read from the source (every import, those inside functions
too): no module imports itself back through others, and every arrow between the packages
points down the layers, so that a reader can learn the house from the bottom up."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import fedjax_sc

ROOT = Path(fedjax_sc.__file__).parent
LAYERS = {"streams": 0, "models": 1, "data": 1, "algorithms": 2, "methods": 2, "core": 3,
          "run": 4}
"""A package may import its own layer's modules and those of lower layers only."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports (``from a import b`` counts ``a.b`` when
    ``b`` is a module, else ``a``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules
                     else node.module for a in node.names]
        else:
            continue
        out.update(n for n in names if n in modules)
    return out


def graph() -> dict[str, set[str]]:
    files = {module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(files)
    return {m: imports(p, modules) - {m} for m, p in files.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None  # the top package: above all


def test_the_graph_is_read():
    edges = graph()
    assert "fedjax_sc.run.options" in edges["fedjax_sc.run.cli"]
    assert "fedjax_sc.algorithms.base" in edges["fedjax_sc.core.round"]


def test_no_import_circle():
    assert cycles(graph()) == []


def test_a_planted_circle_is_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_arrow_between_packages_points_down():
    up = [(m, d) for m, deps in graph().items() for d in deps
          if layer(m) is not None and layer(d) is not None and layer(d) > layer(m)]
    assert up == []


def test_the_engine_and_the_models_know_no_run():
    edges = graph()
    for m, deps in edges.items():
        if layer(m) is not None and layer(m) < LAYERS["run"]:
            assert not [d for d in deps if d.startswith("fedjax_sc.run")], m


ENGINE_MAY_USE = {"fedjax_sc.algorithms", "fedjax_sc.algorithms.base",
                  "fedjax_sc.algorithms.masking", "fedjax_sc.algorithms.aggregate"}
"""What the engine (core/) takes from the algorithms: the interface (base), the private/shared
masks and the weighted means; never a particular algorithm, never a model."""


def test_the_engine_knows_no_particular_algorithm_and_no_model():
    for m, deps in graph().items():
        if m.startswith("fedjax_sc.core"):
            used = {d for d in deps if d.startswith(("fedjax_sc.algorithms", "fedjax_sc.models"))}
            assert used <= ENGINE_MAY_USE, (m, used - ENGINE_MAY_USE)


def test_run_reads_as_three_seams():
    """run/ is the application (config, options, registry, the training loop, checkpoints,
    reports), the paper on top of it (run/paper/) and the plumbing beneath (run/plumbing/):
    the plumbing imports neither, the application never imports the paper, and the CLI
    alone joins them."""
    plumbing, paper = "fedjax_sc.run.plumbing", "fedjax_sc.run.paper"
    for m, deps in graph().items():
        if not m.startswith("fedjax_sc.run."):
            continue
        run = {d for d in deps if d.startswith("fedjax_sc.run.")}
        if m.startswith(plumbing):
            assert all(d.startswith(plumbing) for d in run), (m, run)
        elif not m.startswith(paper) and m != "fedjax_sc.run.cli":
            assert not [d for d in run if d.startswith(paper)], m
    flat = sorted(p.stem for p in (ROOT / "run").glob("*.py"))
    assert len(flat) <= 20, flat  # the application; the rest lives in its two folders



def test_the_top_level_names_are_few_documented_and_every_algorithm_is_in_the_catalogue():
    """``import fedjax_sc as fsc`` offers about thirty documented names; every algorithm
    module's builder is in ``fsc.methods`` and listed in docs/algorithms.md."""
    import pathlib

    import fedjax_sc as fsc
    assert len(fsc.__all__) <= 35
    for name in fsc.__all__:
        assert getattr(fsc, name).__doc__, name
    catalogue = pathlib.Path(__file__).parents[1] / "docs" / "algorithms.md"
    listed = catalogue.read_text()
    for path in (ROOT / "algorithms").glob("[!_]*.py"):  # fedavg.py builds fedavg(), ...
        module = importlib.import_module(f"fedjax_sc.algorithms.{path.stem}")
        if callable(getattr(module, path.stem, None)):
            assert path.stem in fsc.methods.__all__, path.stem
    for name in fsc.methods.__all__:
        assert getattr(fsc.methods, name).__doc__, name
        assert f"`{name}" in listed or f"{name}(" in listed, name
