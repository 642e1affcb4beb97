"""Column checks: a generator whose values a column cannot hold is refused before any insert.

Mapping time (``configure_mappers``) catches what holds everywhere; the width of a plain ``Integer``
depends on the database (64 bits on SQLite, 32 elsewhere), so it is judged before the first insert on
each dialect, and by ``check_columns(engine)`` on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Integer,
    MetaData,
    Numeric,
    SmallInteger,
    String,
    Table,
    Text,
    create_engine,
    func,
    select,
)
from sqlalchemy.dialects import mysql, postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    configure_mappers,
    mapped_column,
    mapperlib,
)
from sqlalchemy.types import TypeDecorator

from sa_redis_ids import ConfigError, RedisIds, redis_id, register
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.orm import check_column, check_columns
from tests.support.orm import fresh_base

MARIADB = create_engine("mariadb+pymysql://root@127.0.0.1/none").dialect
POSTGRESQL = postgresql.dialect()
SQLITE = sqlite.dialect()
MYSQL = mysql.dialect()


@pytest.fixture
def ids() -> RedisIds:
    return RedisIds.embedded()


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


@contextmanager
def configuring_alone() -> Iterator[None]:
    """Hold SQLAlchemy's configure lock while a test maps a model and configures it: a thread
    another test left running (a buffer's refill reading a column floor through the ORM) could
    otherwise configure the new mapper first, and the check would raise in that thread."""
    with mapperlib._CONFIGURE_MUTEX:
        yield


def _model(base: Any, type_: Any, generator: IdGenerator[Any], *, use_default: bool) -> Any:
    class Thing(base):  # type: ignore[misc, valid-type]
        __tablename__ = "things"
        id: Mapped[Any] = mapped_column(
            type_,
            primary_key=True,
            autoincrement=False,
            **({"default": redis_id(generator)} if use_default else {}),
        )

    if not use_default:
        register(Thing, generator)
    return Thing


@pytest.mark.parametrize("use_default", [True, False], ids=["redis_id", "register"])
def test_a_too_narrow_column_is_refused_when_mappers_configure(
    ids: RedisIds, base: Any, use_default: bool
) -> None:
    short = ids.short_id("short", pool_size=10_000_000, offset=10_000_000)
    with configuring_alone(), pytest.raises(ConfigError) as caught:
        _model(base, SmallInteger, short, use_default=use_default)
        configure_mappers()
    message = str(caught.value)
    assert "Thing.id" in message and "column things.id" in message, "model and column"
    assert "SMALLINT" in message and "32767" in message, "the column type and what it holds"
    assert "ShortIdGenerator('short'" in message and "19999999" in message, "the generator"
    assert "a column that fits: Integer or BigInteger" in message
    assert caught.value.namespace == "short"


def test_a_code_generator_needs_a_long_enough_string_column(ids: RedisIds, base: Any) -> None:
    codes = ids.daily_code("codes", code_prefix="IS", digits=4)
    assert codes.max_length == 14
    check_column(codes, Column("code", String(14)))
    check_column(codes, Column("code", Text))
    check_column(codes, Column("code", String()))
    with pytest.raises(
        ConfigError,
        match=r"up to 14 characters long but VARCHAR\(12\) holds at most 12.*String\(14\)",
    ):
        check_column(codes, Column("code", String(12)))
    with pytest.raises(ConfigError, match=r"values are strings .* BIGINT is not a string type"):
        check_column(codes, Column("code", BigInteger))


def test_the_python_type_must_match(ids: RedisIds) -> None:
    numbers = ids.sequence("numbers")
    with pytest.raises(
        ConfigError, match=r"values are integers but VARCHAR\(30\) is not an integer"
    ):
        check_column(numbers, Column("id", String(30)))
    with pytest.raises(ConfigError, match="FLOAT is not an integer type"):
        check_column(numbers, Column("id", Float))


def test_integer_widths_per_dialect(ids: RedisIds) -> None:
    numbers = ids.sequence("numbers")  # up to 2^63 - 1
    small = ids.short_id("small", pool_size=10_000_000, offset=10_000_000)  # up to 19999999
    integer = Column("id", Integer)
    check_column(numbers, integer)  # mapping time: depends on the dialect, not judged
    check_column(numbers, integer, SQLITE)  # SQLite INTEGER is 64-bit
    for dialect in (POSTGRESQL, MYSQL, MARIADB):
        with pytest.raises(ConfigError, match="holds at most 2147483647"):
            check_column(numbers, integer, dialect)
        check_column(small, integer, dialect)
    check_column(numbers, Column("id", BigInteger), POSTGRESQL)
    check_column(numbers, Column("id", mysql.BIGINT(unsigned=True)), MARIADB)
    with pytest.raises(ConfigError, match="MEDIUMINT"):
        check_column(small, Column("id", mysql.MEDIUMINT()))
    with pytest.raises(ConfigError, match="holds at most 16777215"):
        check_column(small, Column("id", mysql.MEDIUMINT(unsigned=True)), MARIADB)
    with pytest.raises(ConfigError, match="holds at most 4294967295"):
        check_column(numbers, Column("id", mysql.INTEGER(unsigned=True)), MARIADB)
    with pytest.raises(ConfigError, match="holds at most 32767"):
        check_column(small, Column("id", SmallInteger), SQLITE)


def test_numeric_precision_and_defaults(ids: RedisIds) -> None:
    numbers = ids.sequence("numbers")
    check_column(numbers, Column("id", Numeric(19, 0)))
    with pytest.raises(ConfigError, match=r"NUMERIC\(18, 0\) holds at most 999999999999999999\b"):
        check_column(numbers, Column("id", Numeric(18, 0)))
    with pytest.raises(ConfigError, match=r"NUMERIC\(20, 2\) holds at most 999999999999999999\b"):
        check_column(numbers, Column("id", Numeric(20, 2)))
    check_column(numbers, Column("id", Numeric()))  # mapping time: depends on the dialect
    check_column(numbers, Column("id", Numeric()), POSTGRESQL)
    with pytest.raises(ConfigError, match="holds at most 9999999999;"):
        check_column(numbers, Column("id", Numeric()), MARIADB)


def test_variants_and_type_decorators_are_resolved(ids: RedisIds) -> None:
    numbers = ids.sequence("numbers")
    portable = BigInteger().with_variant(Integer(), "sqlite")
    for dialect in (None, SQLITE, POSTGRESQL, MARIADB):
        check_column(numbers, Column("id", portable), dialect)
    narrow_on_pg = BigInteger().with_variant(Integer(), "postgresql")
    check_column(numbers, Column("id", narrow_on_pg), MARIADB)
    with pytest.raises(ConfigError, match="on postgresql"):
        check_column(numbers, Column("id", narrow_on_pg), POSTGRESQL)

    class Wrapped(TypeDecorator[int]):
        impl = SmallInteger
        cache_ok = True

    with pytest.raises(ConfigError, match="SMALLINT"):
        check_column(numbers, Column("id", Wrapped()))


def test_integer_column_on_each_database_is_judged_before_the_first_insert(
    ids: RedisIds, base: Any, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    """A plain Integer takes 64-bit IDs on SQLite only; elsewhere the flush fails before any row."""
    numbers = ids.sequence("numbers", start=2**40)
    Thing = _model(base, Integer, numbers, use_default=False)
    configure_mappers()
    create_tables(base.metadata)
    with Session(engine) as session:
        session.add(Thing())
        if engine.dialect.name == "sqlite":
            session.commit()
            assert session.scalars(select(Thing.id)).one() == 2**40
            check_columns(engine)
            return
        with pytest.raises(ConfigError, match="holds at most 2147483647"):
            session.commit()
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Thing)) == 0
    assert numbers.next_id() == 2**40, "nothing was reserved for the refused flush"
    with pytest.raises(ConfigError):
        check_columns(engine)


def test_a_core_table_with_a_redis_id_default_is_checked_on_its_dialect(
    ids: RedisIds, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    metadata = MetaData()
    table = Table(
        "core_things",
        metadata,
        Column(
            "id",
            Integer,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.sequence("core", start=2**40)),
        ),
        Column("name", String(10)),
    )
    create_tables(metadata)
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(table.insert(), [{"name": "a"}])
            assert conn.scalar(select(table.c.id)) == 2**40
            return
        with pytest.raises(ConfigError, match=r"column core_things\.id"):
            conn.execute(table.insert(), [{"name": "a"}])
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(table)) == 0


def test_check_columns_checks_live_models_only(ids: RedisIds) -> None:
    short = ids.short_id("short", pool_size=10_000_000, offset=10_000_000)
    with fresh_base() as base, configuring_alone():
        _model(base, SmallInteger, short, use_default=True)
        with pytest.raises(ConfigError):
            configure_mappers()
    check_columns(SQLITE)  # the failed model's registry is disposed: nothing left to refuse
    with fresh_base() as base:
        # Held: a class nothing refers to may be garbage collected (mapped classes are cycles).
        Thing = _model(base, Integer, ids.sequence("numbers"), use_default=False)
        check_columns(SQLITE)
        with pytest.raises(ConfigError, match=r"Thing\.id .* on postgresql"):
            check_columns(POSTGRESQL)
        assert Thing.__tablename__ == "things"
