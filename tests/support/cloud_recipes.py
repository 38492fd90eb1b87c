"""The connection recipes of docs/cloud.md, read as the suite runs them: each ``# recipe: NAME``
block's ``KafkaConsumer(...)`` keywords, with the ``<...>`` placeholders left for the test to
fill in with the local broker's values."""
from __future__ import annotations

import ast
import re

from repo_paths import REPO

_BLOCK = re.compile(r"```python\n# recipe: (?P<name>[\w-]+)\n(?P<code>.*?)```", re.S)


def recipes() -> dict[str, dict[str, object]]:
    """{recipe name: {keyword: literal value}} in the page's order."""
    found: dict[str, dict[str, object]] = {}
    for m in _BLOCK.finditer((REPO / "docs" / "cloud.md").read_text()):
        tree = ast.parse(m.group("code"))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "KafkaConsumer"]
        assert len(calls) == 1, f"recipe {m.group('name')} has no single KafkaConsumer(...) call"
        found[m.group("name")] = {kw.arg: ast.literal_eval(kw.value) for kw in calls[0].keywords if kw.arg}
    return found


def is_placeholder(value: object) -> bool:
    return isinstance(value, str) and value.startswith("<") and value.endswith(">")


def fill(recipe: dict[str, object], local: dict[str, object]) -> dict[str, object]:
    """The recipe's settings with each placeholder replaced by ``local``'s value for it (a
    placeholder without one fails the test: the page and the test disagree), plus the
    ``local`` keys the recipe does not have (the test CA)."""
    out: dict[str, object] = {}
    for key, value in recipe.items():
        if is_placeholder(value) or (isinstance(value, str) and "<" in value and key in local):
            assert key in local, f"no local value for the placeholder of {key!r}"
            out[key] = local[key]
        else:
            out[key] = value
    for key, value in local.items():
        out.setdefault(key, value)
    return out
