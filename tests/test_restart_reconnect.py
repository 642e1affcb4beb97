"""Every public method reconnects after a Redis restart, on both front ends.

A server restart closes every connection the clients hold (idle in a pool, kept by a fast lane).
Each method is called as the first call after its own restart (SIGKILL, then a new server on the
same port, with an append-only file so the data survives): it must answer, not raise, and leave
the node up (not marked down for ``retry_after``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, create_engine
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import RedisIds, redis_id
from sa_redis_ids.asyncio import AsyncRedisIds
from tests.support.servers import RedisServer

SHORT = {"pool_size": 1000, "offset": 1000}


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    found = RedisServer(args=["--appendonly", "yes", "--appendfsync", "always"]).start()
    try:
        yield found
    finally:
        found.stop()


def restart(server: RedisServer) -> None:
    server.kill()
    server.start()


def _calls(ids: Any, engine_work: Callable[[], Any]) -> dict[str, Callable[[], Any]]:
    """Each public method that talks to Redis, as a call of no arguments (sync or coroutine)."""
    short = ids.short_id("short", **SHORT)
    users = ids.sequence("users")
    codes = ids.daily_code("codes", code_prefix="C", digits=6)
    return {
        "sequence.next_id": users.next_id,
        "sequence.next_ids": lambda: users.next_ids(3),
        "sequence.ensure_at_least": lambda: users.ensure_at_least(10),
        "short_id.next_id": short.next_id,
        "short_id.next_ids": lambda: short.next_ids(3),
        "short_id.reserve": lambda: short.reserve([1500]),
        "short_id.is_taken": lambda: short.is_taken(1500),
        "short_id.release": lambda: short.release(1500),
        "short_id.stats": short.stats,
        "daily_code.next_id": codes.next_id,
        "snowflake.next_id": ids.snowflake("flakes").next_id,
        "date_prefixed.next_id": ids.date_prefixed("invoices").next_id,
        "orm flush": engine_work,
    }


class Base(DeclarativeBase):
    pass


def _model(ids: Any, name: str) -> Any:
    return type(
        name,
        (Base,),
        {
            "__tablename__": name.lower(),
            "id": mapped_column(
                BigInteger,
                primary_key=True,
                autoincrement=False,
                default=redis_id(ids.sequence(name)),
            ),
            "__annotations__": {"id": Mapped[int]},
        },
    )


def _quiet(caplog: pytest.LogCaptureFixture) -> None:
    downs = [r for r in caplog.records if r.name == "sa_redis_ids.nodes" and "down" in r.message]
    assert not downs, downs[0].message


def test_every_sync_method_reconnects_after_a_restart(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ids = RedisIds.from_url(server.url, prefix="sync")
    Order = _model(ids, "SyncOrder")
    engine = create_engine(f"sqlite:///{tmp_path / 'sync.sqlite3'}")
    Base.metadata.create_all(engine, tables=[Order.__table__])

    def flush() -> int:
        with Session(engine) as session:
            order = Order()
            session.add(order)
            session.commit()
            return int(order.id)

    calls = _calls(ids, flush)
    lock = ids.lock("job", ttl=5, timeout=1)

    def locked() -> bool:
        with lock:
            return True

    calls["lock"] = locked
    for call in calls.values():  # every path has a connection open before the restart
        call()
    caplog.set_level(logging.WARNING, logger="sa_redis_ids.nodes")
    for name, call in calls.items():
        restart(server)
        call()
        assert ids.nodes.nodes[0].down_until == 0.0, name
    _quiet(caplog)
    ids.close()


def test_every_asyncio_method_reconnects_after_a_restart(
    server: RedisServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        ids = AsyncRedisIds.from_url(server.url, prefix="async")
        Order = _model(ids, "AsyncOrder")
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path / 'async.sqlite3'}")
        async with engine.begin() as connection:
            await connection.run_sync(Base.metadata.create_all, tables=[Order.__table__])
        sessions = async_sessionmaker(engine, expire_on_commit=False)

        async def flush() -> int:
            async with sessions() as session:
                order = Order()
                session.add(order)
                await session.commit()
                return int(order.id)

        calls: dict[str, Callable[[], Awaitable[Any]]] = _calls(ids, flush)

        async def locked() -> bool:
            async with ids.lock("job", ttl=5, timeout=1):
                return True

        calls["lock"] = locked
        for call in calls.values():
            await call()
        caplog.set_level(logging.WARNING, logger="sa_redis_ids.nodes")
        for name, call in calls.items():
            restart(server)
            await asyncio.sleep(0.05)  # the loop sees the closed connections, as in a live app
            await call()
            assert ids.nodes.nodes[0].down_until == 0.0, name
        await engine.dispose()
        await ids.aclose()

    asyncio.run(main())
    _quiet(caplog)
