"""Every relative link of the README, docs/ and results/ Markdown points at a file that
exists (a moved run or page breaks no link silently)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_relative_links_resolve():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "results").rglob("*.md"))]
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in pages
              for target in LINK.findall(page.read_text())
              if "://" not in target and not (page.parent / target).exists()]
    assert len(pages) > 10 and not broken, broken
