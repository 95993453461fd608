"""The README stays a front door and the docs stay whole: a short README that links every
page under docs/, relative links that resolve inside the repository (file and heading), the architecture page
naming every floor tools/check_layers.py checks, and no module too long to read."""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

README_MAX_LINES = 400
MODULE_MAX_LINES = 800


_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where brackets are not links."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def links(path: Path) -> list[str]:
    return _LINK.findall(prose(path.read_text(encoding="utf-8")))


def anchors(path: Path) -> set[str]:
    """The heading anchors GitHub makes for a Markdown page: lower case, punctuation
    dropped, spaces to hyphens, a repeated heading numbered -1, -2, ..."""
    seen: Counter[str] = Counter()
    found: set[str] = set()
    for line in _FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of one page whose file or heading does not exist."""
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if root not in resolved.parents and resolved != root:
            # A clone has nothing beside it: a link out of the repository is dead there,
            # whatever this machine has next to the checkout.
            problems.append(f"{path.relative_to(root)}: {target}: outside the repository")
        elif not resolved.exists():
            problems.append(f"{path.relative_to(root)}: {target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            problems.append(f"{path.relative_to(root)}: {target}: no such heading")
    return problems


def test_the_readme_is_short():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to a page under docs/"


def test_there_are_docs_pages():
    assert PAGES, "no page under docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_readme_links_every_docs_page(page):
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README) if t.partition("#")[0]}
    assert page.resolve() in linked, f"README.md does not link {page.relative_to(ROOT)}"


@pytest.mark.parametrize("path", [README, *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_the_link_check_sees_a_broken_file_and_heading(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Two words\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text("[ok](a.md#two-words) [ok](#here) [bad](a.md#nowhere) [bad](c.md)\n"
                    "`[not a link](c.md)`\n\n```\n[not a link](c.md)\n```\n\n# Here\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == ["b.md: a.md#nowhere: no such heading", "b.md: c.md: no such file"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "d.md").write_text("[out](../../spec/API.md) [in](../a.md)\n", encoding="utf-8")
    assert broken_links(tmp_path / "docs" / "d.md", tmp_path) == ["docs/d.md: ../../spec/API.md: outside the repository"]


def test_the_architecture_page_names_every_floor():
    spec = importlib.util.spec_from_file_location("check_layers", ROOT / "tools" / "check_layers.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    missing = [title for title, _ in tool.FLOORS if f"| {title} |" not in text]
    assert missing == [], f"docs/architecture.md has no row for the floor(s) {missing}"


def test_no_module_is_too_long_to_read():
    lengths = {str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
               for path in sorted((ROOT / "mlstream").rglob("*.py"))}
    too_long = {name: n for name, n in lengths.items() if n > MODULE_MAX_LINES}
    assert too_long == {}, f"over {MODULE_MAX_LINES} lines: {too_long}; split them"
