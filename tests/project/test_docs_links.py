"""Every relative link in the README and docs/ leads to a file that is there (and, with an anchor,
to a heading of it): pages move between docs/user/, docs/ and docs/history/, and old reports live
in git history only."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def anchors(page: Path) -> set[str]:
    """GitHub's anchors: a heading lowercased, punctuation dropped, spaces as hyphens."""
    found = set()
    for line in FENCE.sub("", page.read_text(encoding="utf-8")).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def broken_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # another site, mail, or a heading of the same page
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve()
        if not dest.exists():
            bad.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    return bad


def test_the_link_checker_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## Two words\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#two-words) [gone](c.md) [no heading](a.md#three) [web](https://x.y)\n"
        "```\n[in a fence](d.md)\n```\n"
    )
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        assert broken_links(page) == ["b.md: c.md (no such file)", "b.md: a.md#three (no such heading)"]
    finally:
        ROOT = root


def test_every_relative_link_of_the_readme_and_docs_leads_somewhere() -> None:
    bad = [line for page in pages() for line in broken_links(page)]
    assert not bad, "broken links:\n" + "\n".join(bad)
