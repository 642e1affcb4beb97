"""``redis_id(generator)`` as a column default, on every insert path, and when Redis fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, String, Table, func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable, redis_id
from tests.support.servers import RedisServer


def make_models(ids: RedisIds) -> tuple[type[DeclarativeBase], Any, Table]:
    class Base(DeclarativeBase):
        pass

    class Thing(Base):
        __tablename__ = "cd_things"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.sequence("things")),
        )
        name: Mapped[str] = mapped_column(String(40))

    rows = Table(
        "cd_rows",
        Base.metadata,
        Column(
            "id",
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.sequence("rows")),
        ),
        Column("name", String(40)),
    )
    return Base, Thing, rows


@pytest.fixture
def models(
    create_tables: Callable[[Any], Engine],
) -> Iterator[tuple[Engine, RedisIds, Any, Table]]:
    ids = RedisIds.embedded()
    base, thing, rows = make_models(ids)
    engine = create_tables(base.metadata)
    yield engine, ids, thing, rows


def test_orm_add_and_add_all_take_ids(models: tuple[Engine, RedisIds, Any, Table]) -> None:
    engine, _, Thing, _ = models
    with Session(engine) as session:
        one = Thing(name="one")
        session.add(one)
        session.flush()
        assert one.id == 1
        many = [Thing(name=f"n{i}") for i in range(5)]
        session.add_all(many)
        session.commit()
        assert [t.id for t in many] == [2, 3, 4, 5, 6]
        assert session.scalar(select(func.count()).select_from(Thing)) == 6


def test_orm_bulk_insert_with_dicts_takes_ids(models: tuple[Engine, RedisIds, Any, Table]) -> None:
    engine, _, Thing, _ = models
    with Session(engine) as session:
        session.execute(insert(Thing), [{"name": f"b{i}"} for i in range(4)])
        session.commit()
        assert sorted(session.scalars(select(Thing.id))) == [1, 2, 3, 4]


def test_core_executemany_takes_ids(models: tuple[Engine, RedisIds, Any, Table]) -> None:
    engine, _, _, rows = models
    with engine.begin() as conn:
        conn.execute(rows.insert(), [{"name": f"r{i}"} for i in range(3)])
        conn.execute(rows.insert().values(name="single"))
    with engine.connect() as conn:
        assert sorted(conn.scalars(select(rows.c.id))) == [1, 2, 3, 4]


def test_an_explicit_value_is_left_alone(models: tuple[Engine, RedisIds, Any, Table]) -> None:
    engine, ids, Thing, rows = models
    with Session(engine) as session:
        session.add(Thing(id=777, name="mine"))
        session.execute(insert(Thing), [{"id": 778, "name": "also mine"}])
        session.commit()
        assert sorted(session.scalars(select(Thing.id))) == [777, 778]
    with engine.begin() as conn:
        conn.execute(rows.insert(), [{"id": 5, "name": "x"}])
    assert ids.sequence("things").next_id() == 1, "no ID was drawn for explicit values"


def test_insert_from_select_is_refused_not_given_one_id_for_every_row(
    models: tuple[Engine, RedisIds, Any, Table],
) -> None:
    # SQLAlchemy calls a Python default once for a whole INSERT ... SELECT: every row would get
    # the same ID (silent duplicates in a column without a unique constraint).
    engine, _, Thing, rows = models
    with Session(engine) as session:
        session.add_all([Thing(id=10 + i, name=f"s{i}") for i in range(3)])
        session.commit()
        with pytest.raises(ConfigError, match="SELECT"):
            session.execute(insert(Thing).from_select(["name"], select(Thing.name)))
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Thing)) == 3
    with pytest.raises(ConfigError, match="SELECT"), engine.begin() as conn:
        conn.execute(rows.insert().from_select(["name"], select(Thing.name)))
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rows)) == 0


def test_redis_down_fails_the_flush_writes_nothing_and_the_session_goes_on(
    create_tables: Callable[[Any], Engine],
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    (server,) = redis_servers(1)
    ids = RedisIds.from_url(server.url)
    base, Thing, rows = make_models(ids)
    engine = create_tables(base.metadata)
    with Session(engine) as session:
        session.add(Thing(name="before"))
        session.commit()
        server.stop()
        session.add_all([Thing(name="lost 1"), Thing(name="lost 2")])
        with pytest.raises(RedisUnavailable):
            session.commit()
        session.rollback()
        with pytest.raises(RedisUnavailable):
            session.execute(insert(Thing), [{"name": "bulk lost"}])
        session.rollback()
        assert session.scalars(select(Thing.name)).all() == ["before"]
        server.start()  # a restart without persistence: the counter is gone, so reseed it
        ids.nodes.nodes[0].down_until = 0.0
        ids.sequence("things").ensure_at_least(session.scalar(select(func.max(Thing.id))))
        session.add(Thing(name="after"))
        session.commit()
        assert sorted(session.scalars(select(Thing.name))) == ["after", "before"]
    with pytest.raises(RedisUnavailable), engine.begin() as conn:
        server.stop()
        conn.execute(rows.insert(), [{"name": "core lost"}])
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(rows)) == 0
