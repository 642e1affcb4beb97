"""The core tests on the lowest versions pyproject.toml declares: the oldest redis-py and SQLAlchemy
it allows, on the oldest Python it supports (3.10), so a floor that no longer works is found here
and not by a user.

Marked ``slow``: the first run builds a virtual environment with those versions and the other test
dependencies at their newest releases for that Python, cached under the temporary directory for later runs
(`tests.support.venvs`, shared with tests/test_sqlalchemy_versions.py). A machine without
``python3.10`` on PATH skips, unless ``SA_REDIS_IDS_REQUIRE_SERVICES=1``.
"""

from __future__ import annotations

import pytest

from tests.support.venvs import (
    ROOT,
    declared_floor,
    installed_version,
    interpreter,
    pins,
    run_suite_part,
    venv_with,
)

OLDEST_PYTHON = "3.10"
"""pyproject.toml's ``requires-python``."""

LOWEST_TESTS = [
    # every strategy, drawn by threads (sync) and by tasks (asyncio), on each backend
    "tests/test_sharing.py::test_sixteen_threads_share_calls_and_never_repeat_a_value",
    "tests/test_sharing.py::test_sixty_four_tasks_share_calls_and_never_repeat_a_value",
    # the asyncio front end: every coroutine method, maintenance, the lock, Sentinel
    "tests/test_asyncio_front.py",
    "tests/test_async_io_methods.py",
    # the Redlock, sync: one node's holders, threads contending, three real nodes
    "tests/test_redlock.py::test_fencing_tokens_increase_strictly_across_holders",
    "tests/test_redlock.py::test_contention_on_one_node_never_has_two_holders",
    "tests/test_redlock.py::test_real_acquire_and_release_on_all_three",
    "tests/test_redlock.py::test_real_one_node_stopped_still_acquires",
    # the ORM: every insert path, sync and asyncio sessions
    "tests/test_orm_register.py",
    "tests/test_orm_async.py",
]
"""A selection that runs in about half a minute: every strategy, the ORM, the lock and the asyncio
front end, where an older redis-py or SQLAlchemy differs (connection pools, asyncio clients,
session events)."""

LOWEST_DESELECTED = "not valkey"
"""The Valkey backend is left out (the same redis-py client classes as the ``redis`` one)."""


def test_pyproject_declares_python_3_10_as_the_oldest() -> None:
    assert f'requires-python = ">={OLDEST_PYTHON}"' in (ROOT / "pyproject.toml").read_text()


@pytest.mark.slow
def test_the_core_tests_pass_on_the_lowest_declared_versions() -> None:
    redis_floor = declared_floor("redis")
    sqlalchemy_floor = declared_floor("sqlalchemy")
    python = interpreter(OLDEST_PYTHON)
    venv = venv_with(
        "lowest",
        [
            f"redis=={redis_floor}",
            f"sqlalchemy[asyncio]=={sqlalchemy_floor}",
            *pins(leave_out=["redis"], exact=False),
        ],
        python=python,
    )
    assert installed_version(venv, "redis") == redis_floor
    assert installed_version(venv, "sqlalchemy") == sqlalchemy_floor
    run_suite_part(
        venv,
        ["-k", LOWEST_DESELECTED, *LOWEST_TESTS],
        what=(
            f"the core tests on redis-py {redis_floor}, SQLAlchemy {sqlalchemy_floor} and "
            f"Python {OLDEST_PYTHON} (the lowest versions pyproject.toml declares)"
        ),
    )
