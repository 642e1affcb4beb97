"""An ``AsyncSession`` flush that fills several generators' columns reads their floors in turn.

The generators of one flush are awaited together (one round trip in time), and each reads its
column floor through the session's own connection at its first use. A session provisions its
connection for one caller at a time: the reads take turns, so the flush succeeds on its first
call as on every later one.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sqlalchemy import BigInteger, String, create_engine, select
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sa_redis_ids import redis_id
from sa_redis_ids.asyncio import AsyncRedisIds
from tests.support.servers import RedisServer


def test_a_first_async_flush_with_two_generator_columns_reads_both_floors(
    server: RedisServer, tmp_path: Path
) -> None:
    path = tmp_path / "two.sqlite3"
    ids = AsyncRedisIds.from_url(server.url, prefix="two")
    first, second, codes = (
        ids.sequence("first"),
        ids.sequence("second"),
        ids.short_id("codes", pool_size=10_000, offset=10_000),
    )

    class Base(DeclarativeBase):
        pass

    class Row(Base):
        __tablename__ = "rows"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(first)
        )
        other: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(second))
        code: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(codes))
        note: Mapped[str] = mapped_column(String(10))

    sync_engine = create_engine(f"sqlite:///{path}")
    Base.metadata.create_all(sync_engine)
    with sync_engine.begin() as connection:  # rows from before: the floors must see them
        connection.execute(
            Row.__table__.insert(), [{"id": 500, "other": 700, "code": 10_000, "note": "old"}]
        )

    async def insert() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{path}")
        try:
            async with AsyncSession(engine) as session:
                session.add_all([Row(note="a"), Row(note="b")])
                await session.commit()
        finally:
            await engine.dispose()
            await ids.aclose()

    asyncio.run(insert())
    with sync_engine.connect() as connection:
        rows = sorted(connection.execute(select(Row.id, Row.other, Row.code, Row.note)))
    sync_engine.dispose()
    assert [row.note for row in rows] == ["old", "a", "b"]
    new = rows[1:]
    assert all(row.id > 500 and row.other > 700 for row in new), "both floors were read"
    assert len({row.code for row in rows}) == 3
