"""``register()``, ``redis_id_column()`` and the ``redis_id`` default: what gets filled, what is refused.

These run on the embedded Redis and an in-memory SQLite: they are about the mapping, not the servers
(tests/test_orm_databases.py covers those).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
from sqlalchemy import (
    BigInteger,
    Column,
    ForeignKey,
    Integer,
    String,
    Table,
    create_engine,
    insert,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    Session,
    column_property,
    configure_mappers,
    mapped_column,
    registry,
    relationship,
)

from sa_redis_ids import ConfigError, RedisIds, redis_id_column, register
from tests.support.orm import RoundTrips, fresh_base


@pytest.fixture
def ids() -> RedisIds:
    return RedisIds.embedded()


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


@pytest.fixture
def sqlite() -> Iterator[Engine]:
    engine = create_engine("sqlite://")
    yield engine
    engine.dispose()


def _user_model(base: Any) -> Any:
    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        number: Mapped[int | None] = mapped_column(BigInteger, unique=True)
        name: Mapped[str] = mapped_column(String(30), default="")

    return User


def test_register_fills_an_unset_primary_key_and_keeps_an_explicit_one(
    ids: RedisIds, base: Any, sqlite: Engine
) -> None:
    User = _user_model(base)
    register(User, ids.sequence("users", start=10))
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        given, filled = User(id=5, name="given"), User(name="filled")
        session.add_all([given, filled])
        session.commit()
        assert (given.id, filled.id) == (5, 10)
        rows = session.execute(select(User.name, User.id).order_by(User.id)).all()
    assert [tuple(r) for r in rows] == [("given", 5), ("filled", 10)]


def test_register_can_fill_a_named_attribute(ids: RedisIds, base: Any, sqlite: Engine) -> None:
    User = _user_model(base)
    register(User, ids.sequence("users"))
    register(User, ids.sequence("numbers", start=700), attr="number")
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        users = [User(), User(number=5)]
        session.add_all(users)
        session.commit()
        assert [(u.id, u.number) for u in users] == [(1, 700), (2, 5)]


def test_registering_twice_is_config_error(ids: RedisIds, base: Any) -> None:
    User = _user_model(base)
    register(User, ids.sequence("users"))
    with pytest.raises(ConfigError, match=r"User\.id is already registered"):
        register(User, ids.sequence("users"))
    with pytest.raises(ConfigError, match="already registered"):
        register(User, ids.sequence("other"), attr="id")


def test_a_class_that_is_not_mapped_is_config_error(ids: RedisIds) -> None:
    class Plain:
        id = None

    with pytest.raises(ConfigError, match="Plain is not a mapped class"):
        register(Plain, ids.sequence("x"))
    with pytest.raises(ConfigError, match="needs a mapped class"):
        register(Plain(), ids.sequence("x"))


def test_an_attribute_that_is_not_a_column_is_config_error(ids: RedisIds, base: Any) -> None:
    class Parent(base):  # type: ignore[misc, valid-type]
        __tablename__ = "parents"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
        name: Mapped[str] = mapped_column(String(30))
        children: Mapped[list[Child]] = relationship()

    class Child(base):  # type: ignore[misc, valid-type]
        __tablename__ = "children"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
        parent_id: Mapped[int] = mapped_column(ForeignKey("parents.id"))

    Parent.upper_name = column_property(Parent.__table__.c.name + "!")
    generator = ids.sequence("parents")
    with pytest.raises(ConfigError, match=r"Parent\.children is a relationship"):
        register(Parent, generator, attr="children")
    with pytest.raises(ConfigError, match="no mapped attribute 'missing'"):
        register(Parent, generator, attr="missing")
    with pytest.raises(ConfigError, match="not a table column"):
        register(Parent, generator, attr="upper_name")
    with pytest.raises(TypeError, match="needs an ID generator"):
        register(Parent, "users")  # type: ignore[arg-type]


def test_a_composite_primary_key_needs_the_attribute_named(ids: RedisIds, base: Any) -> None:
    class Line(base):  # type: ignore[misc, valid-type]
        __tablename__ = "lines"
        order_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
        line_no: Mapped[int] = mapped_column(Integer, primary_key=True)

    with pytest.raises(ConfigError, match="composite primary key"):
        register(Line, ids.sequence("lines"))
    register(Line, ids.sequence("orders"), attr="order_id")


def test_default_and_register_on_one_column_is_config_error_not_double_allocation(
    ids: RedisIds, base: Any, sqlite: Engine
) -> None:
    users = ids.sequence("users")

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = redis_id_column(users)

    trips = RoundTrips(ids)
    with pytest.raises(ConfigError, match="already has default=redis_id"):
        register(User, users)
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        session.add_all([User(), User()])
        session.commit()
        assert sorted(session.scalars(select(User.id))) == [1, 2]
    assert trips.take() == {"users": 1}, "one reservation for the flush, nothing more"


def test_a_column_with_another_python_default_is_refused(ids: RedisIds, base: Any) -> None:
    class Thing(base):  # type: ignore[misc, valid-type]
        __tablename__ = "things"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, default=42)

    with pytest.raises(ConfigError, match="already has a Python-side default"):
        register(Thing, ids.sequence("things"))


def test_register_does_not_configure_mappers(ids: RedisIds, base: Any, sqlite: Engine) -> None:
    """register() right after a class whose relationship names a class not defined yet."""

    class Author(base):  # type: ignore[misc, valid-type]
        __tablename__ = "authors"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        books: Mapped[list[Book]] = relationship(back_populates="author")

    register(Author, ids.sequence("authors"))

    class Book(base):  # type: ignore[misc, valid-type]
        __tablename__ = "books"
        id: Mapped[int] = redis_id_column(ids.sequence("books", start=100))
        author_id: Mapped[int] = mapped_column(ForeignKey("authors.id"))
        author: Mapped[Author] = relationship(back_populates="books")

    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        author = Author(books=[Book(), Book()])
        session.add(author)
        session.commit()
        assert author.id == 1
        assert sorted((b.id, b.author_id) for b in author.books) == [(100, 1), (101, 1)]


def test_redis_id_column_picks_the_type_and_sets_the_default(ids: RedisIds, base: Any) -> None:
    codes = ids.daily_code("codes", code_prefix="IS", digits=4)

    class Order(base):  # type: ignore[misc, valid-type]
        __tablename__ = "orders"
        id: Mapped[int] = redis_id_column(ids.sequence("orders"))
        code: Mapped[str] = redis_id_column(codes, primary_key=False)

    table = Order.__table__
    assert isinstance(table.c.id.type, BigInteger)
    assert table.c.id.primary_key and table.c.id.autoincrement is False
    assert table.c.id.default.arg.generator is ids.sequence("orders")
    assert isinstance(table.c.code.type, String)
    assert table.c.code.type.length == codes.max_length == 14
    assert table.c.code.unique and not table.c.code.nullable and not table.c.code.primary_key


def test_subclasses_get_ids_from_the_base_registration(
    ids: RedisIds, base: Any, sqlite: Engine
) -> None:
    class Employee(base):  # type: ignore[misc, valid-type]
        __tablename__ = "employees"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        kind: Mapped[str] = mapped_column(String(20))
        __mapper_args__: ClassVar[dict[str, Any]] = {
            "polymorphic_on": "kind",
            "polymorphic_identity": "employee",
        }

    class Engineer(Employee):
        __tablename__ = "engineers"
        id: Mapped[int] = mapped_column(ForeignKey("employees.id"), primary_key=True)
        __mapper_args__: ClassVar[dict[str, Any]] = {"polymorphic_identity": "engineer"}

    class Manager(Employee):  # single-table
        __mapper_args__: ClassVar[dict[str, Any]] = {"polymorphic_identity": "manager"}

    with pytest.raises(ConfigError, match=r"register the base class instead: register\(Employee"):
        register(Engineer, ids.sequence("staff"))
    register(Employee, ids.sequence("staff"))
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        people = [Employee(), Engineer(), Manager(), Engineer()]
        session.add_all(people)
        session.commit()
        assert sorted(p.id for p in people) == [1, 2, 3, 4]
        engineer_ids = session.scalars(select(Engineer.__table__.c.id)).all()
        assert sorted(engineer_ids) == sorted(p.id for p in people if isinstance(p, Engineer))


def test_imperative_mapping_and_core_table_work_too(ids: RedisIds, sqlite: Engine) -> None:
    mapper_registry = registry()
    table = Table(
        "events",
        mapper_registry.metadata,
        Column("id", BigInteger, primary_key=True, autoincrement=False),
        Column("name", String(20)),
    )

    class Event:
        def __init__(self, name: str) -> None:
            self.name = name

    try:
        mapper_registry.map_imperatively(Event, table)
        register(Event, ids.sequence("events"))
        configure_mappers()
        mapper_registry.metadata.create_all(sqlite)
        with Session(sqlite) as session:
            session.add_all([Event("a"), Event("b")])
            session.flush()
            session.execute(insert(table), [{"name": "c"}, {"name": "d"}])
            with_core = session.execute(select(table.c.name, table.c.id).order_by(table.c.id))
            assert [tuple(r) for r in with_core] == [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    finally:
        mapper_registry.dispose()
