"""Every SQLAlchemy internal sa_redis_ids relies on, exercised on the installed SQLAlchemy.

:mod:`sa_redis_ids.orm.sqlalchemy_internals` is the one module that touches SQLAlchemy internals;
its ``INTERNALS`` lists them. Each has a check here that fails naming the internal and the
SQLAlchemy release, so an upgrade that changes one is reported as exactly that.
"""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine, select, text
from sqlalchemy.exc import MissingGreenlet
from sqlalchemy.ext.asyncio import create_async_engine

from sa_redis_ids.orm.sqlalchemy_internals import (
    INTERNALS,
    attach_column_default,
    await_in_greenlet,
    can_block_on,
    statement_rows,
    sync_in_greenlet,
)


class Counting:
    """A column default that numbers rows and records the row count it saw per statement."""

    def __init__(self) -> None:
        self.next = 0
        self.rows_seen: list[int] = []

    def __call__(self, context: Any) -> int:
        if getattr(context, "compiled", None) is not None and not getattr(context, "seen", False):
            context.seen = True
            self.rows_seen.append(statement_rows(context))
        self.next += 1
        return self.next


def _table(metadata: MetaData, **column: Any) -> Table:
    return Table(
        "things",
        metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False, **column),
        Column("name", String(10)),
    )


def check_attach_column_default() -> None:
    metadata = MetaData()
    table = _table(metadata)
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"id": 100, "name": "before"}])  # memoizes "no default"
        default = Counting()
        attach_column_default(table.c.id, default)
        assert table.c.id.default is not None and table.c.id.default.arg is default
        conn.execute(table.insert(), [{"name": "a"}, {"name": "b"}])
        conn.execute(table.insert().values(name="c"))
        found = sorted(conn.execute(select(table.c.id, table.c.name)).all())
    engine.dispose()
    assert found == [(1, "a"), (2, "b"), (3, "c"), (100, "before")], found


def check_reset_memoizations() -> None:
    check_attach_column_default()  # the insert before attaching memoized the column's default


def check_statement_rows() -> None:
    default = Counting()
    metadata = MetaData()
    table = _table(metadata, default=default)
    engine = create_engine("sqlite://")
    metadata.create_all(engine)
    with engine.begin() as conn:
        conn.execute(table.insert(), [{"name": str(i)} for i in range(5)])
        conn.execute(table.insert(), [{"name": "one"}])
    engine.dispose()
    assert default.rows_seen == [5, 1], default.rows_seen


def check_await_in_greenlet(tmp_path: Path) -> None:
    async def answer(value: int) -> int:
        await asyncio.sleep(0)
        return value

    async def scenario() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'greenlet.sqlite3'}")
        try:
            async with engine.connect() as conn:
                got = await conn.run_sync(lambda _: await_in_greenlet(answer(42)))
            assert got == 42, got
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    coroutine = answer(1)
    with pytest.raises(MissingGreenlet):
        await_in_greenlet(coroutine)  # a plain call: no greenlet drives a loop
    assert coroutine.cr_frame is None, "the coroutine was closed, never left pending"


def check_sync_in_greenlet(tmp_path: Path) -> None:
    async def scenario() -> int:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'spawn.sqlite3'}")
        try:

            def read() -> int:
                with engine.sync_engine.connect() as conn:
                    found: int = conn.execute(text("select 7")).scalar_one()
                return found

            # a synchronous statement on an asyncio engine, run from a coroutine
            return await sync_in_greenlet(read)
        finally:
            await engine.dispose()

    assert asyncio.run(scenario()) == 7


def check_can_block_on(tmp_path: Path) -> None:
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'block.sqlite3'}")
    dialect = engine.sync_engine.dialect
    assert can_block_on(create_engine("sqlite://").dialect)  # a blocking driver: anywhere
    assert not can_block_on(dialect)  # an asyncio driver outside SQLAlchemy's greenlet

    async def scenario() -> bool:
        try:
            async with engine.connect() as conn:
                return await conn.run_sync(lambda _: can_block_on(dialect))
        finally:
            await engine.dispose()

    assert asyncio.run(scenario())  # inside it (as under AsyncSession)


CHECKS: dict[str, Callable[..., None]] = {
    "SchemaItem._set_parent_with_dispatch": check_attach_column_default,
    "HasMemoized._reset_memoizations": check_reset_memoizations,
    "DefaultExecutionContext.compiled_parameters": check_statement_rows,
    "sqlalchemy.util.await_only / await_": check_await_in_greenlet,
    "sqlalchemy.util.greenlet_spawn": check_sync_in_greenlet,
    "sqlalchemy.util.concurrency.in_greenlet": check_can_block_on,
}


def test_every_internal_has_a_check() -> None:
    assert set(CHECKS) == set(INTERNALS), "add a check for each internal of INTERNALS"


@pytest.mark.parametrize("internal", sorted(INTERNALS))
def test_internal_still_works(internal: str, tmp_path: Path) -> None:
    check = CHECKS[internal]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # "coroutine was never awaited"
            if "tmp_path" in check.__code__.co_varnames:
                check(tmp_path)
            else:
                check()
            gc.collect()
    except Exception as exc:
        pytest.fail(
            f"SQLAlchemy {sqlalchemy.__version__} changed the internal {internal} that "
            f"sa_redis_ids uses for {INTERNALS[internal]}: {type(exc).__name__}: {exc}",
            pytrace=True,
        )


def test_a_missing_internal_is_reported_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from sqlalchemy import util

    from sa_redis_ids.orm.sqlalchemy_internals import InternalChanged

    for name in ("await_", "await_only"):
        monkeypatch.delattr(util, name, raising=False)

    async def nothing() -> None:
        return None

    with pytest.raises(InternalChanged, match=r"internal sqlalchemy\.util\.await_only / await_"):
        await_in_greenlet(nothing())

    monkeypatch.setattr(Column, "_reset_memoizations", None)
    with pytest.raises(InternalChanged, match=r"internal HasMemoized\._reset_memoizations"):
        attach_column_default(Column("id", BigInteger), Counting())

    class Context:
        pass

    with pytest.raises(InternalChanged, match=r"DefaultExecutionContext\.compiled_parameters"):
        statement_rows(Context())
