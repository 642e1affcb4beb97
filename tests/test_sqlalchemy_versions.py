"""The ORM tests on the oldest SQLAlchemy release pyproject.toml declares (the newest is the one the
test environment installs, and runs every other test on).

Marked ``slow``: the first run builds a virtual environment (``python -m venv`` + ``pip install``
of that SQLAlchemy and of the test dependencies, pinned to the versions installed here) and caches
it under the temporary directory, keyed by the SQLAlchemy version, the Python version and the pins;
later runs reuse it (`tests.support.venvs`, shared with tests/test_lowest_versions.py). The ORM test files then run in a subprocess on that SQLAlchemy, with this
checkout's code on ``PYTHONPATH`` (the package itself is not installed there). When pip cannot
install (no package index reachable), the test skips, unless ``SA_REDIS_IDS_REQUIRE_SERVICES=1``.
``SA_REDIS_IDS_SQLALCHEMY_VERSIONS=2.0.41,2.1.0`` runs other releases instead of the oldest.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.support.venvs import ROOT, installed_version, pins, run_suite_part, venv_with

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


def declared_range() -> tuple[str, str]:
    """The ``sqlalchemy>=LOW,<HIGH`` bounds of pyproject.toml's dependencies."""
    text = (ROOT / "pyproject.toml").read_text()
    found = re.search(r'"sqlalchemy>=([0-9.]+),<([0-9.]+)"', text, re.IGNORECASE)
    assert found, 'pyproject.toml declares "sqlalchemy>=2.0.X,<2.Y"'
    return found.group(1), found.group(2)


def versions_to_test() -> list[str]:
    chosen = os.environ.get("SA_REDIS_IDS_SQLALCHEMY_VERSIONS", "")
    return [v.strip() for v in chosen.split(",") if v.strip()] or [declared_range()[0]]


def sqlalchemy_venv(version: str) -> Path:
    """A cached environment with SQLAlchemy ``version`` and the test dependencies, at the versions
    installed here (`tests.support.venvs`)."""
    return venv_with(f"sqlalchemy-{version}", [f"sqlalchemy=={version}", *pins()])


@pytest.mark.slow
@pytest.mark.parametrize("version", versions_to_test())
def test_the_orm_tests_pass_on_sqlalchemy(version: str) -> None:
    low, high = declared_range()
    venv = sqlalchemy_venv(version)
    found = installed_version(venv, "sqlalchemy")
    assert found == version, f"the environment has SQLAlchemy {found}, not {version}"
    run_suite_part(
        venv,
        ["-k", ORM_DESELECTED, *ORM_TEST_FILES],
        what=f"the ORM tests on SQLAlchemy {version} (pyproject.toml declares >={low},<{high})",
    )
