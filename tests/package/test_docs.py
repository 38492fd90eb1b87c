"""The documentation stays true: generated pages are current, links resolve inside the repo."""
from __future__ import annotations

import re
import subprocess
import sys
import repo_paths

REPO = repo_paths.REPO
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_configuration_reference_is_generated_from_the_config_tables():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import gen_config_docs
    finally:
        sys.path.remove(str(REPO / "tools"))
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == gen_config_docs.render(), (
        "docs/configuration.md is stale: run `python tools/gen_config_docs.py`")


# The team's working notes live outside the repository; nothing shipped may point at them.
# Code comments once cited those notes by section; they now cite docs/mechanisms.md as "mechanisms §N".
OUTSIDE = ("../" + "shared", "SPEC" + ".md", "DESIGN" + ".md", "SPEC" + " §")


def test_docs_point_nowhere_outside_the_repository():
    tracked = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    for path in tracked:
        if not path.endswith((".md", ".py", ".pyx", ".pxd", ".pyi", ".sh", ".toml")):
            continue
        text = (REPO / path).read_text(errors="replace")
        found = [s for s in OUTSIDE if s in text]
        assert not found, f"{path} points at the team's notes outside the repository: {found}"


def test_relative_links_in_docs_resolve():
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                continue
            assert (doc.parent / target).exists(), f"{doc.relative_to(REPO)} links to missing {target}"


def test_metrics_reference_is_generated_from_the_metric_table():
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import gen_metrics_docs
    finally:
        sys.path.remove(str(REPO / "tools"))
    committed = (REPO / "docs" / "metrics.md").read_text()
    assert committed == gen_metrics_docs.render(), (
        "docs/metrics.md is stale: run `python tools/gen_metrics_docs.py`")
