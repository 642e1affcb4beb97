"""The package stays ruff and mypy clean: the test command enforces it, not a reviewer's memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


CODE = [
    name
    for name in ("sa_redis_ids", "tests", "benchmarks", "migrations_example", "examples", "docs")
    if (ROOT / name).exists()
]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check_is_clean() -> None:
    result = _run("ruff", "check", *CODE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_is_clean() -> None:
    """The code, and the Python examples of the README and the docs pages (``docs/ruff.toml``
    keeps those within the site's column)."""
    result = _run("ruff", "format", "--check", *CODE, "README.md")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = _run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr
