"""``AsyncIdGenerator`` under ``AsyncSession``: reservations awaited on the event loop, no thread.

``redis_id(async_generator)`` and ``register(Model, async_generator)`` fill IDs on the flush path
(``add_all`` + ``commit``/``flush``) and the bulk path (``execute(insert(Model), rows)``); the
flush hooks and the column default await ``next_ids(n)`` on the loop from SQLAlchemy's greenlet.
Drivers: aiosqlite, asyncpg, and aiomysql on MariaDB. Each test drives its own loop with
``asyncio.run``, and makes its ``AsyncRedisIds`` inside it.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import BigInteger, Column, ForeignKey, Integer, SmallInteger, String, insert, select
from sqlalchemy import create_engine as create_sync_engine
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    configure_mappers,
    mapped_column,
    relationship,
)
from sqlalchemy.pool import AsyncAdaptedQueuePool

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable, redis_id_column, register
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.orm import assign_ids_async, check_column
from sa_redis_ids.redis.connect import fail_fast_options
from tests.support.orm import STRATEGIES, STRATEGY_IDS, RoundTrips, Strategy, fresh_base
from tests.support.servers import RedisServer
from tests.support.services import REDIS_URL, missing


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


@pytest.fixture(params=["sqlite", "postgresql", "mariadb"])
def async_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'async.sqlite3'}"
    if request.param == "mariadb":
        pytest.importorskip("aiomysql", reason="aiomysql is in the test extra")
    sync_url = make_url(request.getfixturevalue(f"{request.param}_url"))
    driver = {"postgresql": "postgresql+asyncpg", "mariadb": "mysql+aiomysql"}[request.param]
    return sync_url.set(drivername=driver).render_as_string(hide_password=False)


@pytest.fixture
def no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any ``asyncio.to_thread`` fails the test: the reservations must not use a thread."""

    async def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("asyncio.to_thread was used for a reservation")

    monkeypatch.setattr(asyncio, "to_thread", forbidden)


@asynccontextmanager
async def async_ids(url: str = REDIS_URL, **options: Any) -> AsyncIterator[AsyncRedisIds]:
    """An ``AsyncRedisIds`` on ``url`` under a private prefix; its keys are deleted and its
    clients closed afterwards."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    ids = AsyncRedisIds.from_url(url, prefix=prefix, **options)
    client = ids.nodes.nodes[0].client
    try:
        await client.ping()
    except (redis.ConnectionError, OSError):
        await ids.aclose()
        missing(f"no Redis server at {url}")
    try:
        yield ids
    finally:
        async for key in client.scan_iter(match=f"{prefix}:*"):
            await client.delete(key)
        await ids.aclose()


class Calls:
    """Wraps generators' ``next_ids``: where each call ran, how many overlapped."""

    def __init__(self) -> None:
        self.where: list[tuple[int, asyncio.AbstractEventLoop]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.started = asyncio.Event()

    def watch(self, generator: AsyncIdGenerator[Any]) -> AsyncIdGenerator[Any]:
        original = generator.next_ids

        async def next_ids(n: int) -> list[Any]:
            self.where.append((threading.get_ident(), asyncio.get_running_loop()))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.started.set()
            try:
                return await original(n)
            finally:
                self.in_flight -= 1

        generator.next_ids = next_ids  # type: ignore[method-assign]
        return generator

    def assert_on(self, loop: asyncio.AbstractEventLoop) -> None:
        assert self.where, "no reservation was made"
        assert {w for w in self.where} == {(threading.get_ident(), loop)}, (
            "every reservation was awaited on the session's event loop, in its thread"
        )


async def _reset(engine: AsyncEngine, base: Any) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(base.metadata.drop_all)
        await conn.run_sync(base.metadata.create_all)


async def _drop(engine: AsyncEngine, base: Any) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(base.metadata.drop_all)


def _authors_and_posts(base: Any, authors: Any, posts: Any) -> tuple[Any, Any]:
    class Author(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_authors"
        id: Mapped[int] = redis_id_column(authors)
        name: Mapped[str] = mapped_column(String(30))
        posts: Mapped[list[Post]] = relationship(lazy="selectin")

    class Post(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_posts"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        author_id: Mapped[int] = mapped_column(ForeignKey("native_authors.id"))

    register(Post, posts)
    return Author, Post


@pytest.mark.usefixtures("no_threads")
def test_async_generators_fill_the_flush_and_the_bulk_path(async_url: str, base: Any) -> None:
    async def scenario() -> None:
        async with async_ids() as ids:
            calls = Calls()
            authors = calls.watch(ids.sequence("authors", start=10))
            posts = calls.watch(ids.sequence("posts"))
            Author, Post = _authors_and_posts(base, authors, posts)
            trips = RoundTrips(ids)
            engine = create_async_engine(async_url)
            try:
                await _reset(engine, base)
                sessions = async_sessionmaker(engine, expire_on_commit=False)
                async with sessions() as session:
                    # add_all + commit: one awaited reservation per generator for the flush
                    session.add_all([Author(name="a", posts=[Post(), Post()]), Author(name="b")])
                    await session.commit()
                    assert trips.take() == {"authors": 1, "posts": 1}

                    # an explicit flush; a value set by hand is kept
                    author = Author(name="c", posts=[Post(), Post(id=500)])
                    session.add(author)
                    await session.flush()
                    assert author.id == 12 and [p.id for p in author.posts] == [3, 500]
                    await session.commit()
                    assert trips.take() == {"authors": 1, "posts": 1}

                    # bulk ORM insert: one awaited reservation per statement
                    await session.execute(insert(Author), [{"name": f"x{i}"} for i in range(5)])
                    await session.execute(insert(Post), [{"author_id": 11} for _ in range(3)])
                    await session.commit()
                    assert trips.take() == {"authors": 1, "posts": 1}

                    # assign_ids_async: awaited on the loop too, the flush has nothing left
                    late = Author(name="late", posts=[Post()])
                    session.add(late)
                    assert await assign_ids_async(session) == 2
                    assert (late.id, late.posts[0].id) == (18, 7)
                    await session.commit()
                    assert trips.take() == {"authors": 1, "posts": 1}

                    # Core executemany on the AsyncSession's connection: the column default
                    conn = await session.connection()
                    await conn.execute(Author.__table__.insert(), [{"name": "k1"}, {"name": "k2"}])
                    await session.commit()
                    assert trips.take() == {"authors": 1}

                    found = (await session.scalars(select(Author).order_by(Author.id))).all()
                    assert [a.id for a in found] == list(range(10, 21))
                    assert [len(a.posts) for a in found[:3]] == [2, 3, 2]
                    post_ids = (await session.scalars(select(Post.id).order_by(Post.id))).all()
                    assert post_ids == [*range(1, 8), 500]
                await _drop(engine, base)
            finally:
                await engine.dispose()
            calls.assert_on(asyncio.get_running_loop())

    asyncio.run(scenario())


@pytest.mark.usefixtures("no_threads")
@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_every_strategy_fills_both_paths(strategy: Strategy, base: Any, tmp_path: Path) -> None:
    """Each strategy of ``AsyncRedisIds`` under ``AsyncSession`` (aiosqlite, the real Redis): one
    awaited round trip per flush and per bulk statement, values unique and the strategy's own."""

    async def scenario() -> None:
        async with async_ids() as ids:
            generator = strategy.make(ids, "items")  # type: ignore[arg-type]

            class Item(base):  # type: ignore[misc, valid-type]
                __tablename__ = "native_items"
                id: Mapped[Any] = redis_id_column(generator)
                n: Mapped[int] = mapped_column(Integer)

            trips = RoundTrips(ids)
            engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'items.sqlite3'}")
            try:
                await _reset(engine, base)
                async with async_sessionmaker(engine, expire_on_commit=False)() as session:
                    items = [Item(n=i) for i in range(20)]
                    session.add_all(items)
                    await session.commit()
                    assert trips.take() == {"items": 1}
                    await session.execute(insert(Item), [{"n": 20 + i} for i in range(30)])
                    await session.commit()
                    assert trips.take() == {"items": 1}
                    rows = (await session.execute(select(Item.id, Item.n))).all()
            finally:
                await engine.dispose()
            values = [row.id for row in rows]
            assert sorted(row.n for row in rows) == list(range(50))
            assert len(set(values)) == 50, "unique"
            assert {item.id for item in items} <= set(values)
            core = generator.generator
            for value in values:
                if hasattr(core, "parse"):
                    core.parse(value)  # raises unless the strategy made it
                else:  # ShortId: a position of its pool
                    assert core.offset <= value <= core.max_value

    asyncio.run(scenario())


def _rows_model(base: Any, generator: Any) -> Any:
    class Row(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_rows"
        id: Mapped[int] = redis_id_column(generator)
        task: Mapped[int] = mapped_column(Integer)
        n: Mapped[int] = mapped_column(Integer)

    return Row


TASKS, ROUNDS, PER_ROUND = 12, 4, 7


@pytest.mark.usefixtures("no_threads")
def test_many_concurrent_tasks_get_unique_ids(async_url: str, base: Any) -> None:
    """Tasks insert at once on both paths; each reservation overlaps the others on the loop and
    every ID is there exactly once."""

    async def scenario() -> None:
        async with async_ids() as ids:
            calls = Calls()
            Row = _rows_model(base, calls.watch(ids.sequence("rows")))
            options: dict[str, Any] = {}
            if async_url.startswith("sqlite"):  # one writer at a time; the tasks queue for it
                options = {
                    "poolclass": AsyncAdaptedQueuePool,
                    "pool_size": 1,
                    "max_overflow": 0,
                    "pool_timeout": 120,
                }
            engine = create_async_engine(async_url, **options)
            try:
                await _reset(engine, base)
                sessions = async_sessionmaker(engine, expire_on_commit=False)

                async def worker(task: int) -> None:
                    async with sessions() as session:
                        for r in range(ROUNDS):
                            values = [
                                {"task": task, "n": r * PER_ROUND + i} for i in range(PER_ROUND)
                            ]
                            if r % 2:
                                await session.execute(insert(Row), values)
                            else:
                                session.add_all(Row(**value) for value in values)
                            await session.commit()

                await asyncio.gather(*(worker(task) for task in range(TASKS)))
                async with sessions() as session:
                    rows = (await session.execute(select(Row.id, Row.task, Row.n))).all()
                await _drop(engine, base)
            finally:
                await engine.dispose()
            total = TASKS * ROUNDS * PER_ROUND
            assert len(rows) == total
            assert sorted(row.id for row in rows) == list(range(1, total + 1)), "unique, no gap"
            assert {(row.task, row.n) for row in rows} == {
                (task, n) for task in range(TASKS) for n in range(ROUNDS * PER_ROUND)
            }
            assert calls.most_in_flight > 1, "reservations of several tasks overlapped"
            calls.assert_on(asyncio.get_running_loop())

    asyncio.run(scenario())


STALL_TICKS = 25
"""Ticks of ``asyncio.sleep(0.01)`` the ticker must make while a reservation waits on a paused
Redis. Counted, not timed: on a slow machine they take longer, never fewer happen."""


def _things_model(base: Any, generator: Any) -> Any:
    class Thing(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_things"
        id: Mapped[int] = redis_id_column(generator)

    return Thing


class Ticker:
    """Counts ticks of ``asyncio.sleep(0.01)``: it can only tick while the loop runs."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            self.ticks += 1

    async def until(self, ticks: int, *, while_pending: asyncio.Task[Any]) -> None:
        while self.ticks < ticks:
            assert not while_pending.done(), "the reservation finished while Redis was paused"
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


def test_the_event_loop_runs_while_a_reservation_waits_for_redis(
    redis_servers: Callable[[int], list[RedisServer]], base: Any, tmp_path: Path
) -> None:
    """Redis paused (SIGSTOP) while a flush awaits its reservation: the loop keeps ticking; once
    Redis answers (SIGCONT) the flush completes with its IDs."""
    (server,) = redis_servers(1)

    async def scenario() -> None:
        # A generous socket timeout: the stall ends when the test resumes Redis, not before.
        async with async_ids(server.url, socket_timeout=60) as ids:
            calls = Calls()
            Thing = _things_model(base, calls.watch(ids.sequence("stalled")))
            engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'stall.sqlite3'}")
            try:
                await _reset(engine, base)
                async with async_sessionmaker(engine, expire_on_commit=False)() as session:
                    session.add(Thing())  # warm up: connection made, script loaded
                    await session.commit()
                    calls.started.clear()
                    ticker = Ticker()
                    server.pause()
                    try:
                        things = [Thing() for _ in range(3)]
                        session.add_all(things)
                        commit = asyncio.get_running_loop().create_task(session.commit())
                        await asyncio.wait_for(calls.started.wait(), 120)
                        at_start = ticker.ticks
                        await ticker.until(at_start + STALL_TICKS, while_pending=commit)
                        assert not commit.done(), "Redis is paused: the reservation still waits"
                    finally:
                        server.resume()
                    await commit
                    await ticker.stop()
                    assert [thing.id for thing in things] == [2, 3, 4]
                    assert sorted((await session.scalars(select(Thing.id))).all()) == [1, 2, 3, 4]
            finally:
                await engine.dispose()

    asyncio.run(scenario())


def test_a_sync_generator_under_async_session_blocks_the_loop_as_before(
    redis_servers: Callable[[int], list[RedisServer]], base: Any, tmp_path: Path
) -> None:
    """The control of the test above: a generator of the sync RedisIds still works under
    ``AsyncSession`` but holds the loop for its call, so the ticker makes no tick during it (the
    method above does tell a blocked loop from a free one)."""
    (server,) = redis_servers(1)
    client = redis.Redis(
        host="127.0.0.1", port=server.port, **fail_fast_options(socket_timeout=0.5)
    )
    generator = RedisIds(client, prefix=f"t{uuid.uuid4().hex[:12]}").sequence("blocking")
    Thing = _things_model(base, generator)
    seen: dict[str, int] = {}

    async def scenario() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'blocking.sqlite3'}")
        ticker = Ticker()
        original = generator.next_ids

        def next_ids(n: int) -> list[Any]:
            seen["before"] = ticker.ticks
            try:
                return original(n)
            finally:
                seen["after"] = ticker.ticks

        generator.next_ids = next_ids  # type: ignore[method-assign]
        try:
            await _reset(engine, base)
            async with async_sessionmaker(engine, expire_on_commit=False)() as session:
                session.add(Thing())
                await session.commit()  # the first call also reads the column floor (awaited)
                session.add(Thing())
                await session.commit()  # works as before, on a running Redis
                assert seen["after"] == seen["before"], "the loop did not run during the call"
                server.pause()
                try:
                    session.add(Thing())
                    with pytest.raises(RedisUnavailable):
                        await session.commit()
                    await session.rollback()
                finally:
                    server.resume()
                assert seen["after"] == seen["before"], "no tick while the call waited on Redis"
        finally:
            await ticker.stop()
            await engine.dispose()

    try:
        asyncio.run(scenario())
    finally:
        client.close()


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_an_async_generator_under_a_sync_session_is_a_config_error(
    base: Any, tmp_path: Path
) -> None:
    """Nothing drives an event loop under a plain Session: the flush and the statement are
    refused before any Redis call, and no coroutine is left un-awaited."""
    ids = AsyncRedisIds.from_url(REDIS_URL, prefix=f"t{uuid.uuid4().hex[:12]}")  # no I/O yet
    trips = RoundTrips(ids)
    Thing = _things_model(base, ids.sequence("sync"))
    engine = create_sync_engine(f"sqlite:///{tmp_path / 'sync.sqlite3'}")
    base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            session.add(Thing())
            with pytest.raises(ConfigError, match="sync RedisIds") as caught:
                session.commit()
            assert "AsyncSession" in str(caught.value) and "redis.asyncio" in str(caught.value)
            session.rollback()
        with engine.begin() as conn, pytest.raises(ConfigError, match="sync RedisIds"):
            conn.execute(insert(Thing), [{}, {}])
        with Session(engine) as session:
            assert session.scalars(select(Thing.id)).all() == []
        gc.collect()
        assert trips.take() == {}, "no Redis call was made"
    finally:
        engine.dispose()


def test_column_checks_read_the_wrapped_generator(base: Any) -> None:
    """The bounds of an AsyncIdGenerator are its wrapped generator's: a column too narrow is
    refused when mappers configure, and ``redis_id_column`` picks the type that fits."""
    ids = AsyncRedisIds.embedded()
    generator = ids.sequence("checks")
    codes = ids.daily_code("codes", code_prefix="IS", digits=4)

    class Coded(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_coded"
        code: Mapped[str] = redis_id_column(codes)

    assert Coded.__table__.c.code.type.length == 14

    class Wide(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_wide"
        id: Mapped[int] = redis_id_column(generator)

    assert isinstance(Wide.__table__.c.id.type, BigInteger)

    class Narrow(base):  # type: ignore[misc, valid-type]
        __tablename__ = "native_narrow"
        id: Mapped[int] = mapped_column(SmallInteger, primary_key=True, autoincrement=False)

    with pytest.raises(ConfigError, match=r"Narrow\.id .*SMALLINT.*SequenceGenerator\('checks'"):
        register(Narrow, generator)
    with pytest.raises(ConfigError, match="holds at most 32767"):
        check_column(generator, Column("id", SmallInteger))
    check_column(generator, Column("id", Integer), "sqlite")
    with pytest.raises(ConfigError, match="on postgresql"):
        check_column(generator, Column("id", Integer), "postgresql")
    with pytest.raises(TypeError, match="register\\(\\) needs an ID generator"):
        register(Narrow, object())  # type: ignore[arg-type]
    configure_mappers()
