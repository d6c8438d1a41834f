"""The API reference (mkdocs.yml, docs/api/) builds with ``mkdocs build --strict``, every public
name and every algorithm and model module is on it, and every name it shows has a docstring.

The pages are static ``::: module`` directives; a new algorithm file or a new name in
``fedjax_sc.__all__`` / ``fedjax_sc.methods.__all__`` that no page shows fails here."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings_handlers.python",
                    reason="mkdocstrings[python] is not installed (pip install -e '.[docs]')")
griffe = pytest.importorskip("griffe")

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
DIRECTIVE = re.compile(r"^::: ([\w.]+)", re.M)
HTML_ID = re.compile(r'\bid="(fedjax_sc[\w.]*)"')


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    warnings = [line for line in done.stderr.splitlines() if not line.startswith("INFO")]
    assert done.returncode == 0, "\n".join(warnings[-60:])
    return out


def test_site_builds_in_strict_mode(site):
    assert (site / "index.html").exists() and (site / "api" / "index.html").exists()


def _canonical(obj) -> str:
    """The identifier mkdocstrings gives ``obj`` where it is defined."""
    if isinstance(obj, type(sys)):
        return obj.__name__
    return f"{obj.__module__}.{obj.__qualname__}"


def test_every_public_name_and_module_is_on_an_api_page(site):
    import fedjax_sc
    from fedjax_sc import methods

    ids = {m for page in (site / "api").rglob("*.html") for m in HTML_ID.findall(page.read_text())}
    wanted = {f"fedjax_sc.{name}": _canonical(getattr(fedjax_sc, name))
              for name in fedjax_sc.__all__}
    wanted |= {f"fedjax_sc.methods.{name}": _canonical(getattr(methods, name))
               for name in methods.__all__}
    for package in ("algorithms", "models"):
        wanted |= {f"fedjax_sc.{package}.{file.stem}": f"fedjax_sc.{package}.{file.stem}"
                   for file in (ROOT / "fedjax_sc" / package).glob("*.py")
                   if file.stem != "__init__"}
    missing = sorted(f"{name} ({target})" for name, target in wanted.items()
                     if target not in ids)
    assert len(wanted) > 80 and not missing, f"on no page of docs/api/: {missing}"


def _public(obj):
    """The members the pages show: a module's ``__all__``, else its own public names."""
    if obj.is_module and obj.exports:
        return [(name, obj.members[name]) for name in obj.exports if name in obj.members]
    return [(name, member) for name, member in obj.members.items()
            if not name.startswith("_") and not member.is_alias and name != "setup"]


def test_every_name_on_the_api_pages_has_a_docstring():
    package = griffe.load("fedjax_sc", search_paths=[str(ROOT)], resolve_aliases=True)
    paths = [path for page in sorted(API.glob("*.md"))
             for path in DIRECTIVE.findall(page.read_text())]
    assert len(paths) > 40, paths
    undocumented = []
    for path in paths:
        obj = package if path == "fedjax_sc" else package[path.removeprefix("fedjax_sc.")]
        shown = [obj, *(member for _, member in _public(obj) if obj.is_module)]
        # a class's methods too (its fields are documented in its Attributes section)
        shown += [method for member in shown if member.is_class
                  for _, method in _public(member) if method.is_function]
        undocumented += [f"{member.relative_filepath}:{member.lineno} {member.path}"
                         for member in shown
                         if not (member.docstring and member.docstring.value.strip())]
    assert not undocumented, "no docstring:\n" + "\n".join(sorted(set(undocumented)))
