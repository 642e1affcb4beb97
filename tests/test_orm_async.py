"""Generators of the sync ``RedisIds`` under ``AsyncSession`` on the real Redis: the flush
reservation is a sync call inside the greenlet (it holds the loop for that call), and
``assign_ids_async`` reserves in a worker thread before the flush. ``AsyncIdGenerator``, awaited on
the loop, is tested in test_orm_async_native.py.

Drivers: aiosqlite (always) and asyncpg on the session's PostgreSQL database. The tests drive
their own event loop with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import ForeignKey, String, insert, select
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from sa_redis_ids import RedisIds, redis_id_column, register
from sa_redis_ids.orm import assign_ids_async
from tests.support.orm import RoundTrips, fresh_base, real_redis_ids


@pytest.fixture
def shared_ids(real_redis: redis.Redis) -> Iterator[RedisIds]:
    yield from real_redis_ids(real_redis)


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


@pytest.fixture(params=["sqlite", "postgresql"])
def async_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'async.sqlite3'}"
    sync_url = make_url(request.getfixturevalue("postgres_url"))
    return sync_url.set(drivername="postgresql+asyncpg").render_as_string(hide_password=False)


def _models(base: Any, ids: RedisIds) -> tuple[Any, Any]:
    class Author(base):  # type: ignore[misc, valid-type]
        __tablename__ = "async_authors"
        id: Mapped[int] = redis_id_column(ids.sequence("authors", start=10))
        name: Mapped[str] = mapped_column(String(30))
        posts: Mapped[list[Post]] = relationship(lazy="selectin")

    class Post(base):  # type: ignore[misc, valid-type]
        __tablename__ = "async_posts"
        id: Mapped[int] = redis_id_column(ids.snowflake("posts"))
        author_id: Mapped[int] = mapped_column(ForeignKey("async_authors.id"))

    return Author, Post


async def _scenario(url: str, base: Any, ids: RedisIds, Author: Any, Post: Any) -> None:
    engine = create_async_engine(url)
    trips = RoundTrips(ids)
    try:
        async with engine.begin() as conn:
            await conn.run_sync(base.metadata.drop_all)
            await conn.run_sync(base.metadata.create_all)
        make = async_sessionmaker(engine, expire_on_commit=False)
        async with make() as session:
            # 1. Plain commit: the flush reserves inside the greenlet (one sync call each).
            session.add(Author(name="greenlet", posts=[Post(), Post()]))
            await session.commit()
            assert trips.take() == {"authors": 1, "posts": 1}

            # 2. assign_ids_async: IDs known before the flush, reserved off the event loop.
            author = Author(name="ahead", posts=[Post() for _ in range(3)])
            session.add(author)
            assert await assign_ids_async(session) == 4
            assert author.id == 11 and all(post.id for post in author.posts)
            assert trips.take() == {"authors": 1, "posts": 1}
            await session.commit()
            assert trips.take() == {}, "the flush had nothing left to reserve"

            # 3. ORM bulk insert through the AsyncSession: one reservation per statement.
            await session.execute(insert(Author), [{"name": f"bulk{i}"} for i in range(5)])
            await session.commit()
            assert trips.take() == {"authors": 1}

            authors = (await session.scalars(select(Author).order_by(Author.id))).all()
            assert [a.id for a in authors] == list(range(10, 17))
            assert [len(a.posts) for a in authors[:2]] == [2, 3]
            post_ids = (await session.scalars(select(Post.author_id))).all()
            assert sorted(post_ids) == [10, 10, 11, 11, 11]
        async with engine.begin() as conn:
            await conn.run_sync(base.metadata.drop_all)
    finally:
        await engine.dispose()


def test_async_session_gets_ids_on_every_path(
    async_url: str, shared_ids: RedisIds, base: Any
) -> None:
    Author, Post = _models(base, shared_ids)
    asyncio.run(_scenario(async_url, base, shared_ids, Author, Post))


def test_assign_ids_async_takes_a_plain_session_too(shared_ids: RedisIds, base: Any) -> None:
    from sqlalchemy import BigInteger
    from sqlalchemy.orm import Session

    class Note(base):  # type: ignore[misc, valid-type]
        __tablename__ = "notes"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)

    register(Note, shared_ids.sequence("notes"))
    session = Session()
    notes = [Note(), Note(id=99), Note()]
    session.add_all(notes)
    assert asyncio.run(assign_ids_async(session)) == 2
    assert [n.id for n in notes] == [1, 99, 2]
    assert isinstance(session, Session) and not isinstance(session, AsyncSession)
