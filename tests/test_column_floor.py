"""The ORM binding is the floor: a generator bound to a column reads it without ``floor=``.

Each test plays two processes with two ``RedisIds`` on one key prefix (the second has no
high-water marks: a process that received nothing from the node), and a loss in between (the
prefix's keys deleted, as ``FLUSHALL`` would). Every strategy, on the backend table, on SQLite,
PostgreSQL and MariaDB where the query differs; sync ``Session`` and ``AsyncSession``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, Integer, create_engine, event, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import ConfigError, RedisIds, redis_id, redis_id_column, register
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.generators.base import IdGenerator
from tests.conftest import Backend
from tests.support.orm import STRATEGIES, STRATEGY_IDS, Strategy
from tests.support.servers import RedisServer
from tests.support.services import REDIS_URL
from tests.test_orm_async_native import async_ids, async_url  # noqa: F401 - a fixture
from tests.test_restarts import PERSISTENCE

ROWS = 30


def lose(backend: Backend) -> None:
    """What FLUSHALL does to this test's keys."""
    found = backend.keys()
    for key in found:
        backend.client.delete(key)


def row_model(generator: Any, *, table: str = "cf_rows", **binding: Any) -> Any:
    """A fresh declarative model whose ``value`` column is filled from ``generator``."""

    class Base(DeclarativeBase):
        pass

    class Row(Base):
        __tablename__ = table
        id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
        value: Mapped[Any] = redis_id_column(generator, primary_key=False, **binding)

    return Row


def insert_rows(engine: Engine, model: Any, count: int = ROWS) -> list[Any]:
    """Insert ``count`` rows in one flush; the values they got."""
    with Session(engine, expire_on_commit=False) as session:
        rows = [model() for _ in range(count)]
        session.add_all(rows)
        session.commit()
        return [row.value for row in rows]


def values_in(engine: Engine, model: Any) -> list[Any]:
    with engine.connect() as connection:
        return list(connection.scalars(select(model.value)))


@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_a_new_process_first_after_a_loss_repeats_no_value_of_the_column(
    backend: Backend, engine: Engine, create_tables: Any, strategy: Strategy
) -> None:
    first = strategy.make(backend.ids(), "cf")
    model = row_model(first)
    create_tables(model.metadata)
    before = insert_rows(engine, model)
    lose(backend)
    again = strategy.make(backend.ids(), "cf")  # a new process: nothing received from the node
    after = insert_rows(engine, row_model(again))
    assert not set(before) & set(after)
    stored = values_in(engine, model)
    assert len(stored) == len(set(stored)) == 2 * ROWS


def test_without_the_binding_the_same_process_repeats_what_the_table_holds(
    backend: Backend, tmp_path: Path
) -> None:
    """column_floor=False is the opt-out: the second process starts from nothing again."""
    engine = create_engine(f"sqlite:///{tmp_path / 'optout.sqlite3'}")
    first = backend.ids().sequence("cf")
    model = row_model(first, column_floor=False, unique=False)
    model.metadata.create_all(engine)
    before = insert_rows(engine, model, 5)
    lose(backend)
    again = backend.ids().sequence("cf")
    with Session(engine) as session:
        session.add(row_model(again, column_floor=False, unique=False)())
        session.flush()
        repeated = session.scalars(select(model.value)).all()
    assert before == [1, 2, 3, 4, 5]
    assert sorted(repeated) == [1, 1, 2, 3, 4, 5]  # no unique check on purpose: the repeat shows


def test_a_generator_bound_to_several_columns_continues_above_the_highest(
    backend: Backend, engine: Engine, create_tables: Any
) -> None:
    class Base(DeclarativeBase):
        pass

    users = backend.ids().sequence("cf", headroom=0)

    class Small(Base):
        __tablename__ = "cf_small"
        id: Mapped[int] = redis_id_column(users)

    class Large(Base):
        __tablename__ = "cf_large"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)

    register(Large, users)
    create_tables(Base.metadata)
    with engine.begin() as connection:
        connection.execute(insert(Small), [{"id": 10}])
        connection.execute(insert(Large), [{"id": 50}, {"id": 7}])
    with Session(engine) as session:
        row = Small()
        session.add(row)
        session.commit()
        assert row.id == 51


def test_an_explicit_floor_overrides_the_column(backend: Backend, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'override.sqlite3'}")
    users = backend.ids().sequence("cf", floor=lambda: 1_000, headroom=0)
    model = row_model(users)
    model.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(insert(model), [{"value": 5_000}])
    assert insert_rows(engine, model, 1) == [1_001]


def test_a_direct_call_reads_the_engine_the_last_flush_read_with(
    backend: Backend, tmp_path: Path
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'direct.sqlite3'}")
    users = backend.ids().sequence("cf", headroom=0)
    model = row_model(users)
    model.metadata.create_all(engine)
    assert insert_rows(engine, model, 3) == [1, 2, 3]
    lose(backend)
    again = backend.ids().sequence("cf", headroom=0)
    row_model(again)
    assert again.next_id() == 1  # nothing flushed yet in this "process": no floor to read
    lose(backend)
    again = backend.ids().sequence("cf", headroom=0)
    bound = row_model(again)
    insert_rows(engine, bound, 1)  # reads the floor through the flush: above 3
    lose(backend)
    assert again.next_id() > 4  # after a loss a direct call reads through that engine


def test_an_async_session_reads_the_floor_through_its_own_connection(
    backend: Backend, tmp_path: Path
) -> None:
    path = tmp_path / "async.sqlite3"
    first = backend.ids().sequence("cf", headroom=0)
    model = row_model(first)
    sync_engine = create_engine(f"sqlite:///{path}")
    model.metadata.create_all(sync_engine)
    insert_rows(sync_engine, model, 4)
    lose(backend)
    again = backend.ids().sequence("cf", headroom=0)
    bound = row_model(again)

    async def scenario() -> int:
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        try:
            async with AsyncSession(engine, expire_on_commit=False) as session:
                row = bound()
                session.add(row)
                await session.commit()
                value: int = row.value
                return value
        finally:
            await engine.dispose()

    assert asyncio.run(scenario()) == 5


def test_a_core_insert_reads_the_floor_through_the_statements_connection(
    backend: Backend, tmp_path: Path
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'core.sqlite3'}")
    first = backend.ids().snowflake("cf")
    model = row_model(first)
    model.metadata.create_all(engine)
    before = insert_rows(engine, model, 10)
    lose(backend)
    again = backend.ids().snowflake("cf")
    bound = row_model(again)
    with engine.begin() as connection:
        connection.execute(insert(bound), [{} for _ in range(10)])
    stored = values_in(engine, model)
    assert len(set(stored)) == 20 and min(set(stored) - set(before)) > max(before)


def count_reads(engine: Engine, table: str) -> Callable[[], int]:
    """How many floor queries (``… WHERE value BETWEEN …``) read ``table``."""
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "BETWEEN" in statement.upper() and table in statement:
            seen.append(statement)

    return lambda: len(seen)


def test_a_short_id_floor_is_merged_once_per_node_state(backend: Backend, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'marker.sqlite3'}")
    reads = count_reads(engine, "cf_rows")

    def process() -> IdGenerator[int]:
        generator: IdGenerator[int] = backend.ids().short_id("cf", pool_size=4_000, offset=100)
        return generator

    model = row_model(process())
    model.metadata.create_all(engine)
    with engine.begin() as connection:
        connection.execute(insert(model), [{"value": v} for v in range(100, 600)])
    insert_rows(engine, row_model(process()), 10)
    assert reads() == 1  # the first process merged the column
    for _ in range(3):
        insert_rows(engine, row_model(process()), 10)
    assert reads() == 1  # later processes checked the node's marker instead
    lose(backend)
    insert_rows(engine, row_model(process()), 10)
    assert reads() == 2  # a new node state: merged again, once
    insert_rows(engine, row_model(process()), 10)
    assert reads() == 2
    stored = values_in(engine, model)
    assert len(stored) == len(set(stored)) == 560


def test_a_process_that_finds_a_loss_merges_again_and_the_next_process_does_not(
    backend: Backend, tmp_path: Path
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'loss.sqlite3'}")
    reads = count_reads(engine, "cf_rows")
    running = backend.ids().short_id("cf", pool_size=4_000, offset=100)
    model = row_model(running)
    model.metadata.create_all(engine)
    insert_rows(engine, model, 50)
    assert reads() == 1
    lose(backend)
    insert_rows(engine, model, 50)  # this process finds the loss: it merges the column again
    assert reads() == 2 and running.rewinds >= 1
    insert_rows(engine, row_model(backend.ids().short_id("cf", pool_size=4_000, offset=100)), 50)
    assert reads() == 2
    stored = values_in(engine, model)
    assert len(stored) == len(set(stored)) == 150


def test_column_floor_must_be_a_bool(backend: Backend) -> None:
    with pytest.raises(ConfigError, match="column_floor"):
        redis_id(backend.ids().sequence("cf"), column_floor="no")  # type: ignore[arg-type]


@pytest.mark.parametrize("factory", ["sequence", "short_id"])
def test_an_async_generator_reads_its_column_through_the_async_session(
    factory: str,
    async_url: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
) -> None:
    """An ``AsyncIdGenerator`` (``AsyncRedisIds``, real Redis) under ``AsyncSession`` on an
    asyncio driver: the floor is read from the event loop, through the session's connection."""
    options: dict[str, Any] = {"pool_size": 2_000, "offset": 100} if factory == "short_id" else {}

    async def scenario() -> tuple[list[int], list[int]]:
        engine = create_async_engine(async_url)
        try:
            async with async_ids() as ids:
                first = row_model(getattr(ids, factory)("cf", **options), table="cf_async")
                async with engine.begin() as connection:
                    await connection.run_sync(first.metadata.drop_all)
                    await connection.run_sync(first.metadata.create_all)
                before = await insert_async(engine, first, 500)
                client = ids.nodes.nodes[0].client
                async for key in client.scan_iter(match=f"{ids.prefix}:*"):
                    await client.delete(key)  # the loss
                again = AsyncRedisIds.from_url(REDIS_URL, prefix=ids.prefix)
                try:
                    bound = row_model(getattr(again, factory)("cf", **options), table="cf_async")
                    after = await insert_async(engine, bound, 500)
                finally:
                    await again.aclose()
                async with engine.begin() as connection:
                    await connection.run_sync(first.metadata.drop_all)
            return before, after
        finally:
            await engine.dispose()

    before, after = asyncio.run(scenario())
    assert len(set(before)) == len(set(after)) == 500
    assert not set(before) & set(after)


async def insert_async(engine: Any, model: Any, count: int) -> list[int]:
    async with AsyncSession(engine, expire_on_commit=False) as session:
        rows = [model() for _ in range(count)]
        session.add_all(rows)
        await session.commit()
        return [row.value for row in rows]


def test_an_evicted_bitmap_is_merged_again_by_the_next_process(
    backend: Backend, tmp_path: Path
) -> None:
    """The node's marker outlives the bitmap it describes (one key evicted): it no longer counts."""
    engine = create_engine(f"sqlite:///{tmp_path / 'evicted.sqlite3'}")
    reads = count_reads(engine, "cf_rows")
    first = backend.ids().short_id("cf", pool_size=4_000, offset=100)
    model = row_model(first)
    model.metadata.create_all(engine)
    insert_rows(engine, model, 100)
    backend.client.delete(first.bitmap_key)
    insert_rows(engine, row_model(backend.ids().short_id("cf", pool_size=4_000, offset=100)), 100)
    assert reads() == 2
    stored = values_in(engine, model)
    assert len(stored) == len(set(stored)) == 200


class BlockingFloor:
    """A short-ID floor that holds its caller until released, and counts its reads."""

    def __init__(self, values: list[int]):
        self.values = values
        self.reads = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> list[int]:
        self.reads += 1
        self.entered.set()
        assert self.release.wait(30), "never released"
        return self.values


def test_while_one_process_merges_after_a_loss_the_others_wait_for_it(backend: Backend) -> None:
    used = list(range(100, 400))
    floor = BlockingFloor(used)
    merging = backend.ids().short_id("cf", pool_size=1_000, offset=100, floor=floor)
    waiting = backend.ids().short_id("cf", pool_size=1_000, offset=100, floor=floor)
    checks: list[str] = []
    node = waiting._nodes.nodes[0]
    original = node.run

    def recording(name: str, keys: Any, args: Any) -> Any:
        if name == "short_id_floor":
            checks.append(str(args[0]))
        return original(name, keys, args)

    node.run = recording  # type: ignore[method-assign]
    found: dict[str, list[int]] = {}
    first = threading.Thread(target=lambda: found.setdefault("merging", merging.next_ids(200)))
    first.start()
    assert floor.entered.wait(30), "the first process never read its floor"
    second = threading.Thread(target=lambda: found.setdefault("waiting", waiting.next_ids(200)))
    second.start()
    deadline = time.monotonic() + 30
    while checks.count("check") < 3 and time.monotonic() < deadline:  # polled: it waits
        second.join(0.01)
    assert "waiting" not in found and checks.count("check") >= 3
    floor.release.set()
    first.join(30)
    second.join(30)
    assert floor.reads == 1  # the waiting process found the merge recorded: it read nothing
    merged, waited = found["merging"], found["waiting"]
    assert not set(used) & (set(merged) | set(waited))
    assert len(set(merged) | set(waited)) == 400


@pytest.mark.parametrize("persistence", ["aof", "rdb"])
def test_a_restart_that_kept_its_data_keeps_the_short_id_merge(
    persistence: str, tmp_path: Path
) -> None:
    """A clean restart gives the server a new replication ID but keeps the bitmap and its marker:
    the next new process does not read the column again (a promoted replica would)."""
    server = RedisServer(args=PERSISTENCE[persistence]).start()
    try:
        engine = create_engine(f"sqlite:///{tmp_path / 'restart.sqlite3'}")
        reads = count_reads(engine, "cf_rows")

        def process() -> IdGenerator[int]:
            ids = RedisIds.from_url(server.url, prefix="cf")
            generator: IdGenerator[int] = ids.short_id("cf", pool_size=4_000, offset=100)
            return generator

        model = row_model(process())
        model.metadata.create_all(engine)
        insert_rows(engine, model, 50)
        assert reads() == 1
        server.stop()  # SIGTERM: a clean shutdown (the RDB is saved, the AOF is complete)
        server.start()
        insert_rows(engine, row_model(process()), 50)
        assert reads() == 1
        stored = values_in(engine, model)
        assert len(stored) == len(set(stored)) == 100
    finally:
        server.stop()
