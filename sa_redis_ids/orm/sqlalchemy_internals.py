"""The SQLAlchemy internals this package cannot do without, and only here.

Everything else in `sa_redis_ids.orm` uses SQLAlchemy's public, documented API. Each function
below names the internal it touches and why no public API does the job. ``INTERNALS`` lists them;
``tests/test_sqlalchemy_internals.py`` exercises each one on the installed SQLAlchemy and fails
with the internal's name when a release changes or removes it, so an upgrade that breaks one is
caught by the test suite, not by an application.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import sqlalchemy
from sqlalchemy import util
from sqlalchemy.exc import MissingGreenlet
from sqlalchemy.schema import Column, ColumnDefault
from sqlalchemy.util import concurrency

T = TypeVar("T")

INTERNALS = {
    "SchemaItem._set_parent_with_dispatch": "attach_column_default: a default for a mapped column",
    "HasMemoized._reset_memoizations": "attach_column_default: forget the former default",
    "DefaultExecutionContext.compiled_parameters": "statement_rows: the rows of one statement",
    "sqlalchemy.util.await_only / await_": "await_in_greenlet: await under AsyncSession",
    "sqlalchemy.util.greenlet_spawn": "sync_in_greenlet: read a column floor from a coroutine",
    "sqlalchemy.util.concurrency.in_greenlet": "can_block: whether an asyncio connection works",
}
"""Each internal used, with the function that uses it and what for."""


class InternalChanged(RuntimeError):
    """An internal of SQLAlchemy this package relies on is gone or behaves otherwise."""

    def __init__(self, internal: str, detail: str):
        super().__init__(
            f"sa_redis_ids relies on the SQLAlchemy internal {internal}, which SQLAlchemy "
            f"{sqlalchemy.__version__} changed or removed ({detail}); use a SQLAlchemy release "
            f"within the range sa_redis_ids declares"
        )
        self.internal = internal


def attach_column_default(column: Column[Any], default: Any) -> None:
    """Give ``column``, already built and mapped, the Python-side default ``default``.

    ``register(Model, generator)`` adopts an existing model, so its column was constructed without
    ``default=``. SQLAlchemy has no public way to add a default to an existing `Column`;
    this does what ``Column(..., default=...)`` does inside its constructor:
    ``ColumnDefault(default)._set_parent_with_dispatch(column)`` (sets ``column.default`` and
    fires the ``before/after_parent_attach`` events), then ``column._reset_memoizations()``
    so that what the column memoized about its former default (``None``) is recomputed.
    """
    attach = getattr(ColumnDefault(default), "_set_parent_with_dispatch", None)
    if attach is None:
        raise InternalChanged("SchemaItem._set_parent_with_dispatch", "ColumnDefault has none")
    reset = getattr(column, "_reset_memoizations", None)
    if reset is None:
        raise InternalChanged("HasMemoized._reset_memoizations", "Column has none")
    attach(column)
    reset()
    found = column.default
    if getattr(found, "arg", None) is not default:
        raise InternalChanged(
            "SchemaItem._set_parent_with_dispatch", f"the column's default is {found!r} after it"
        )


def statement_rows(context: Any) -> int:
    """How many rows the statement executing in ``context`` inserts (parameter sets).

    A Python-side column default is called once per row; the first call reserves the IDs of
    every row. The public ``ExecutionContext.parameters`` is filled only after the defaults ran,
    and ``get_current_parameters()`` gives the current row alone, so the count is read from
    ``DefaultExecutionContext.compiled_parameters``: one dict per row.
    """
    try:
        rows = context.compiled_parameters
    except AttributeError as exc:
        raise InternalChanged("DefaultExecutionContext.compiled_parameters", str(exc)) from exc
    if not isinstance(rows, list):
        raise InternalChanged(
            "DefaultExecutionContext.compiled_parameters", f"a {type(rows).__name__}, not a list"
        )
    return len(rows)


def _awaiter() -> Any:
    found = getattr(util, "await_", None) or getattr(util, "await_only", None)
    if found is None:
        raise InternalChanged("sqlalchemy.util.await_only / await_", "neither exists")
    return found


def await_in_greenlet(coroutine: Coroutine[Any, Any, T]) -> T:
    """Await ``coroutine`` on the event loop from synchronous ORM code running under
    ``AsyncSession`` / ``AsyncConnection`` (the flush hooks, a column default).

    SQLAlchemy's asyncio extension runs the synchronous ORM inside a greenlet that its event loop
    drives; ``sqlalchemy.util.await_only`` (named ``await_`` from 2.1 on, ``await_only`` kept
    as an alias) hands an awaitable to that loop and resumes with its result. It is the mechanism
    every asyncio dialect of SQLAlchemy uses, but is not documented as public API.

    Raises `sqlalchemy.exc.MissingGreenlet` (the coroutine closed, never started) when the
    caller does not run under the asyncio extension: a plain synchronous ``Session``.
    """
    if importlib.util.find_spec("greenlet") is None:  # SQLAlchemy 2.1: the asyncio extra
        coroutine.close()
        raise MissingGreenlet("the greenlet library is not installed")
    try:
        result: T = _awaiter()(coroutine)
    except (MissingGreenlet, InternalChanged):
        coroutine.close()
        raise
    return result


async def sync_in_greenlet(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)``, synchronous SQLAlchemy code, from a coroutine: in a greenlet, so that
    a connection of an asyncio engine (``AsyncSession``'s, ``AsyncEngine.sync_engine``'s) can
    run statements (and a blocking one simply runs). ``sqlalchemy.util.greenlet_spawn`` is what
    ``AsyncSession.run_sync`` uses, and is not documented as public API."""
    spawn = getattr(util, "greenlet_spawn", None)
    if spawn is None:
        raise InternalChanged("sqlalchemy.util.greenlet_spawn", "it is gone")
    result: T = await spawn(fn, *args)
    return result


def can_block_on(dialect: Any) -> bool:
    """Whether synchronous code running here can execute statements of ``dialect``: always for
    a blocking driver; for an asyncio one only inside SQLAlchemy's greenlet (the ORM under
    ``AsyncSession``), as ``sqlalchemy.util.concurrency.in_greenlet`` tells."""
    if not getattr(dialect, "is_async", False):
        return True
    check = getattr(concurrency, "in_greenlet", None)
    if check is None:
        raise InternalChanged("sqlalchemy.util.concurrency.in_greenlet", "it is gone")
    return bool(check())
