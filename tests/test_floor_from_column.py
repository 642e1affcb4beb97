"""``floor_from_column`` for the strategies without days: Sequence, Snowflake and ShortId read the
table on SQLite, PostgreSQL and MariaDB, and Redis (fakeredis, a real server, a real Cluster)
continues above it or around it."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, MetaData, Table, insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from sa_redis_ids import SequenceExhausted, floor_from_column
from tests.conftest import Backend


def table_with(engine: Engine, create_tables: Any, values: list[int]) -> Table:
    metadata = MetaData()
    table = Table(
        "ffc_rows", metadata, Column("id", BigInteger, primary_key=True, autoincrement=False)
    )
    create_tables(metadata)
    if values:
        with engine.begin() as connection:
            connection.execute(insert(table), [{"id": v} for v in values])
    return table


def test_a_sequence_continues_above_the_tables_maximum(
    backend: Backend, engine: Engine, create_tables: Any
) -> None:
    table = table_with(engine, create_tables, [3, 70, 12])
    users = backend.ids().sequence("users", floor=floor_from_column(engine, table.c.id), headroom=0)
    assert users.next_ids(2) == [71, 72]


def test_a_sequence_on_an_empty_table_starts_at_its_start(
    backend: Backend, engine: Engine, create_tables: Any
) -> None:
    table = table_with(engine, create_tables, [])
    users = backend.ids().sequence(
        "users", floor=floor_from_column(sessionmaker(engine), table.c.id)
    )
    assert users.next_id() == 1
    assert users.rewinds == 0


def test_a_snowflake_continues_above_the_tables_highest_id(
    backend: Backend, engine: Engine, create_tables: Any
) -> None:
    probe = backend.ids().snowflake("probe")
    ahead = probe.layout.compose(probe.parse(probe.next_id()).ms + 30_000, 0, 9)
    table = table_with(engine, create_tables, [ahead - 5, ahead])
    orders = backend.ids().snowflake("orders", floor=floor_from_column(engine, lambda: table.c.id))
    assert orders.next_id() > ahead


def test_a_short_id_pool_never_issues_the_tables_values(
    backend: Backend, engine: Engine, create_tables: Any
) -> None:
    used = [*range(500, 560), 10, 99_999]  # values outside the pool are ignored
    table = table_with(engine, create_tables, used)
    pool = backend.ids().short_id(
        "codes", pool_size=100, offset=500, floor=floor_from_column(engine, table.c.id)
    )
    assert sorted(pool.next_ids(40)) == list(range(560, 600))
    with pytest.raises(SequenceExhausted):
        pool.next_id()
