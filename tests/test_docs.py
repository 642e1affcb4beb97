"""The documentation site builds with MkDocs in strict mode (a warning fails the build), and the
README stays a short front page that links into it."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DEMO_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -e '.[all]' && .venv/bin/sa-redis-ids demo"
)
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all,test]' && "
    ".venv/bin/python -m pytest"
)


def require(module: str) -> None:
    """Skip without the docs tools, unless the services are required (then they must be here)."""
    if importlib.util.find_spec(module) is not None:
        return
    if os.environ.get("SA_REDIS_IDS_REQUIRE_SERVICES"):
        pytest.fail(f"{module} is not importable: install the docs extra (it is in the test extra)")
    pytest.skip(f"{module} is not installed (pip install -e '.[docs]')")


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        require(module)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    reference = (tmp_path / "site" / "reference" / "index.html").read_text(encoding="utf-8")
    for name in ("RedisIds", "from_sentinel", "date_prefixed", "floor_from_column"):
        assert name in reference, f"the API reference lacks {name}"


def test_the_readme_is_a_short_front_page() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    assert DEMO_COMMAND in text.splitlines()
    assert TEST_COMMAND in text.splitlines()
    for word in ("seed 0", "the issue", "issue #", "benchmark log"):
        assert word not in text.lower(), f"the README speaks of {word!r}"


def test_the_ci_runs_the_readmes_test_command() -> None:
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def test_the_readmes_and_pages_links_lead_somewhere() -> None:
    sources = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    for source in sources:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", source.read_text("utf-8")):
            if re.match(r"[a-z]+://", target):
                continue
            assert (source.parent / target).exists(), f"{source.name} links to missing {target}"


def test_no_page_speaks_of_the_projects_history() -> None:
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8").lower()
        assert not re.search(r"\bseed 0\d\d\b", text), page
