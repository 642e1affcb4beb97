"""A new process inserting through the ORM first after ``FLUSHALL``, with no ``floor=`` written
anywhere, repeats no ID on any strategy: counted against the table, on a ``redis-server`` this
test starts (the shared one is never flushed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Integer, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import RedisIds, redis_id
from sa_redis_ids.orm import assign_ids
from tests.support.processes import process_context
from tests.support.servers import RedisServer

COLUMNS = ("seq", "dated", "flake", "short", "code")
BATCHES, BATCH = 10, 50


def model(redis_url: str) -> Any:
    """The table, each column from one strategy bound to it by ``redis_id`` (no ``floor=``)."""
    ids = RedisIds.from_url(redis_url, prefix="cfp")

    class Base(DeclarativeBase):
        pass

    daily = ids.daily_code("code", digits=6, tz="UTC")

    class Row(Base):
        __tablename__ = "cfp_rows"
        id: Mapped[int] = mapped_column(Integer, primary_key=True)
        seq: Mapped[int] = mapped_column(BigInteger, default=redis_id(ids.sequence("seq")))
        dated: Mapped[int] = mapped_column(
            BigInteger, default=redis_id(ids.date_prefixed("dated", length=14))
        )
        flake: Mapped[int] = mapped_column(BigInteger, default=redis_id(ids.snowflake("flake")))
        short: Mapped[int] = mapped_column(
            BigInteger,
            default=redis_id(ids.short_id("short", pool_size=200_000, offset=1_000_000)),
        )
        code: Mapped[str] = mapped_column(String(daily.max_length), default=redis_id(daily))

    return Row


def insert_rows(redis_url: str, db_url: str) -> dict[str, int]:
    """A process's life: insert BATCHES flushes of BATCH rows; per column, how many of the values
    it assigned were already in the table (no unique constraint: every repeat is counted)."""
    engine = create_engine(db_url)
    row = model(redis_url)
    row.metadata.create_all(engine)
    repeated = dict.fromkeys(COLUMNS, 0)
    for _ in range(BATCHES):
        with Session(engine) as session:
            rows = [row() for _ in range(BATCH)]
            session.add_all(rows)
            assign_ids(session)  # the IDs are known before the rows are written
            for name in COLUMNS:
                column = getattr(row, name)
                mine = {getattr(r, name) for r in rows}
                with session.no_autoflush:  # the table as it was, without these rows
                    held = set(session.scalars(select(column).where(column.in_(mine))))
                repeated[name] += len(held) + (BATCH - len(mine))
            session.commit()
    engine.dispose()
    return repeated


def run_process(target: Callable[..., dict[str, int]], *args: Any) -> dict[str, int]:
    with process_context().Pool(1) as pool:
        found: dict[str, int] = pool.apply(target, args)
    return found


def test_a_new_process_first_after_flushall_repeats_no_id(
    redis_servers: Callable[[int], list[RedisServer]], tmp_path: Path
) -> None:
    (server,) = redis_servers(1)
    db_url = f"sqlite:///{tmp_path / 'rows.sqlite3'}"
    assert run_process(insert_rows, server.url, db_url) == dict.fromkeys(COLUMNS, 0)
    server.client().flushall()
    assert run_process(insert_rows, server.url, db_url) == dict.fromkeys(COLUMNS, 0)
    engine = create_engine(db_url)
    with engine.connect() as connection:
        for name in COLUMNS:
            values = connection.scalars(select(getattr(model(server.url), name))).all()
            assert len(values) == len(set(values)) == 2 * BATCHES * BATCH, name
    engine.dispose()
