"""Every relative link of the README and of the pages under docs/ leads somewhere: the file or folder
exists and, with an anchor, the page it names has a heading that GitHub gives that anchor. A section
moved or renamed leaves no link to its old place (issue 46, item 7: the README cut into docs/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE_CODE = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")


def _prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks (where a ``[x](y)`` is code, not a link)."""
    lines, fence = [], None
    for line in text.splitlines():
        opened = _FENCE.match(line)
        if fence is None and opened:
            fence = opened.group(1)
        elif fence is not None and line.strip().startswith(fence):
            fence = None
        elif fence is None:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text (github-slugger): links reduced to their text, lower case,
    every character but letters, digits, ``_``, ``-`` and spaces dropped, spaces made ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors a page has: its headings' slugs (a repeated one numbered ``-1``, ``-2``, as GitHub does)
    and explicit ``<a name=...>`` / ``<a id=...>``."""
    seen: dict[str, int] = {}
    found = set()
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        found.update(_HTML_ANCHOR.findall(line))
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    """The targets of the page's inline links that are not web addresses (``http:``, ``mailto:``, ...)."""
    targets = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        targets += [t for t in _LINK.findall(_INLINE_CODE.sub("", line)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]
    return targets


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """``page: target (why)`` for each relative link of ``page`` that leads nowhere (``page`` named from ``root``)."""
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{page.relative_to(root)}: {target} (no such file)")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{page.relative_to(root)}: {target} (no such heading)")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_the_readme_links_the_architecture_page_near_its_top():
    """A newcomer finds the map before the details: within the README's first 20 lines."""
    head = "\n".join((ROOT / "README.md").read_text(encoding="utf-8").splitlines()[:20])
    assert "](docs/architecture.md)" in head


def test_slugs_are_githubs(tmp_path):
    """Headings with code, punctuation, a link and a repeat get the anchors GitHub gives them; a link
    to an anchor or a file that is not there is reported, one that is there is not."""
    assert slug("An OpenAI-compatible server: `localspec serve`") == "an-openai-compatible-server-localspec-serve"
    assert slug("`scripts/bench_infill.py`: autocomplete latency against llama-server's `/infill`") == \
        "scriptsbench_infillpy-autocomplete-latency-against-llama-servers-infill"
    assert slug("See [the docs](other.md) (issue 32, item 6)") == "see-the-docs-issue-32-item-6"
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Part\n\n## Part\n\n```\n[code](nowhere.md)\n## not a heading\n```\n\n"
                    "[a](#part-1) [b](#title) [c](page.md#part) [d](https://example.com/x#y) `[e](gone.md)`\n"
                    "[f](#not-a-heading) [g](gone.md) [h](#part-2)\n", encoding="utf-8")
    assert anchors(page) == {"title", "part", "part-1"}
    assert [b.split(": ", 1)[1] for b in broken_links(page, tmp_path)] == [
        "#not-a-heading (no such heading)", "gone.md (no such file)", "#part-2 (no such heading)"]

