"""The README stays a page for users: short, with the two commands CI and new users rely on,
links whose section anchors exist, and no text that points to an issue tracker."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
import repo_paths

REPO = repo_paths.REPO
README = REPO / "README.md"
PAGES = [README, REPO / "CHANGELOG.md", *sorted((REPO / "docs").glob("*.md"))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_readme_is_at_most_250_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move details into docs/"


def test_readme_keeps_the_two_commands():
    text = README.read_text()
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in text, f"README.md lost {command!r}"
        assert (REPO / command.split()[1]).exists()
    assert "bash scripts/test.sh" in (REPO / ".ci" / "run").read_text(), "CI runs the README's test command"


def test_section_links_point_to_existing_headings():
    for page in PAGES:
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            linked = (page.parent / target).resolve() if target else page
            if linked.suffix != ".md":
                continue
            assert anchor in _anchors(linked), f"{page.relative_to(REPO)} links to missing #{anchor} in {linked.name}"


# "(issue 14)", "issues 14 and 15", "issue #19", "(#19)", "the issue's": references to a tracker
# the repository does not contain ("issues 2 requests" is a verb, not a reference).
TRACKER = re.compile(r"\bissues? #\d+|\bissues? \d+(?=\s*(?:[),.;:]|and\b|$))|\(#\d+\b|\bissue's\b",
                     re.IGNORECASE)


THIS_FILE = str(Path(__file__).resolve().relative_to(REPO))  # its own pattern's examples


def test_no_text_names_an_issue_tracker():
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    found = []
    for path in tracked:
        if not path.endswith((".md", ".py", ".pyx", ".pxd", ".pyi", ".sh", ".toml", ".h")):
            continue
        for number, line in enumerate((REPO / path).read_text(errors="replace").splitlines(), 1):
            if TRACKER.search(line) and path != THIS_FILE:
                found.append(f"{path}:{number}: {line.strip()}")
    assert not found, "text that names an issue tracker:\n" + "\n".join(found)
