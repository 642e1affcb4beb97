"""Start the tests' worker processes from a fork server that imported the library once.

A worker process of a multi-process test stands for another instance of the application: a
process of its own, with its own connections, nothing inherited from the test's process. The
``spawn`` start method gives that but imports the library, SQLAlchemy and redis-py again in every
child, which on a busy 2-core machine costs seconds per process. The ``forkserver`` method gives
the same fresh process (forked from a server process that has only imported modules, never made
a client, a thread or a connection) for a fraction of that: the server imports :data:`PRELOAD`
once per test session. Where the platform has no fork server, ``spawn`` is used.
"""

from __future__ import annotations

import multiprocessing
from multiprocessing.context import BaseContext

PRELOAD = [
    "pytest",
    "sqlalchemy",
    "sqlalchemy.orm",
    "redis",
    "redis.asyncio",
    "sa_redis_ids",
    "sa_redis_ids.asyncio",
    "tests.conftest",
    "tests.support.faults",
    "tests.support.uniqueness",
    "tests.support.model.worker",
]
"""What the fork server imports once (a module it cannot import is left to each child)."""


def process_context() -> BaseContext:
    """The multiprocessing context worker processes start from: the preloaded fork server, or
    ``spawn`` where there is none."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover - Windows
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)  # read when the server starts: the first child
    return context
