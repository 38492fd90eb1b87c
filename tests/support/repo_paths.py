"""Where the checkout is, for tests that read its files or start a child from it."""
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
