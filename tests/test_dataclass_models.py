"""Dataclass models (``MappedAsDataclass``) and SQLModel models take their IDs from generators.

Warnings are errors here: SQLAlchemy deprecates a callable ``default=`` in a dataclass model ("will
raise an error in a future release"), so the documented forms must not trigger it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sqlmodel
from sqlalchemy import BigInteger, String, create_engine, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import (
    DeclarativeBase,
    Mapped,
    MappedAsDataclass,
    Session,
    mapped_column,
    registry,
)

from sa_redis_ids import RedisIds, redis_id, redis_id_column, register
from tests.conftest import Backend

# Every warning of these tests is an error, but not a resource another test left behind for the
# garbage collector (an unclosed socket collected while one of these runs: in a parallel run,
# what ran before on the same worker varies).
pytestmark = pytest.mark.filterwarnings(
    "error", "ignore::ResourceWarning", "ignore::pytest.PytestUnraisableExceptionWarning"
)


@pytest.fixture
def sqlite() -> Iterator[Engine]:
    engine = create_engine("sqlite://")
    yield engine
    engine.dispose()


def dataclass_models(ids: RedisIds) -> tuple[type[DeclarativeBase], Any, Any, Any]:
    class Base(MappedAsDataclass, DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "dc_orders"
        id: Mapped[int] = redis_id_column(ids.sequence("dc_orders"), init=False)
        code: Mapped[str] = redis_id_column(
            ids.daily_code("dc_codes", code_prefix="DC"), primary_key=False, init=False
        )
        title: Mapped[str] = mapped_column(String(40), default="")

    class Ticket(Base):
        __tablename__ = "dc_tickets"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            insert_default=redis_id(ids.snowflake("dc_tickets")),
            init=False,
        )
        title: Mapped[str] = mapped_column(String(40))

    class Invoice(Base):
        __tablename__ = "dc_invoices"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, init=False)
        title: Mapped[str] = mapped_column(String(40))

    register(Invoice, ids.date_prefixed("dc_invoices"))
    return Base, Order, Ticket, Invoice


def test_dataclass_models_take_ids_on_the_flush_and_bulk_paths(
    backend: Backend, sqlite: Engine
) -> None:
    ids = backend.ids()
    base, Order, Ticket, Invoice = dataclass_models(ids)
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        orders = [Order(title="a"), Order(title="b")]
        session.add_all([*orders, Ticket("t"), Invoice("i")])
        session.commit()
        assert [order.id for order in orders] == [1, 2]
        assert all(order.code.startswith("DC") for order in orders)
        session.execute(insert(Order), [{"title": "c"}, {"title": "d"}])
        session.execute(insert(Ticket), [{"title": "u"}, {"title": "v"}])
        session.commit()
        assert session.scalars(select(Order.id).order_by(Order.id)).all() == [1, 2, 3, 4]
        codes = session.scalars(select(Order.code)).all()
        assert len(set(codes)) == 4
        tickets = session.scalars(select(Ticket.id)).all()
        assert len(set(tickets)) == 3
        assert all(ids.snowflake("dc_tickets").parse(t).ms > 0 for t in tickets)
        invoice = session.scalars(select(Invoice)).one()
        assert ids.date_prefixed("dc_invoices").parse(invoice.id).counter == 1


def test_a_dataclass_model_keeps_an_id_given_after_construction(
    backend: Backend, sqlite: Engine
) -> None:
    base, Order, _, _ = dataclass_models(backend.ids())
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        given = Order(title="given")
        given.id = 1000
        session.add_all([given, Order(title="drawn")])
        session.commit()
        assert session.scalars(select(Order.id).order_by(Order.id)).all() == [1, 1000]


def test_a_callable_default_in_a_dataclass_model_is_what_sqlalchemy_deprecates(
    backend: Backend,
) -> None:
    """The reason ``redis_id_column`` uses ``insert_default``: this is the warning it avoids."""

    class Base(MappedAsDataclass, DeclarativeBase):
        pass

    generator = backend.ids().sequence("dc_deprecated")
    with pytest.warns(Warning, match="future release"):

        class Order(Base):
            __tablename__ = "dc_deprecated"
            id: Mapped[int] = mapped_column(
                BigInteger, primary_key=True, autoincrement=False, default=redis_id(generator)
            )


def test_a_sqlmodel_model_takes_its_ids_from_a_generator(backend: Backend, sqlite: Engine) -> None:
    ids = backend.ids()

    class Base(sqlmodel.SQLModel, registry=registry()):  # this test's own metadata
        pass

    class Hero(Base, table=True):
        id: int | None = sqlmodel.Field(
            default=None,
            primary_key=True,
            sa_type=BigInteger,
            sa_column_kwargs={"autoincrement": False, "default": redis_id(ids.sequence("heroes"))},
        )
        name: str

    Base.metadata.create_all(sqlite)
    with sqlmodel.Session(sqlite) as session:
        heroes = [Hero(name="a"), Hero(name="b"), Hero(id=77, name="given")]
        session.add_all(heroes)
        session.commit()
        assert [hero.id for hero in heroes] == [1, 2, 77]
        session.execute(insert(Hero), [{"name": "c"}])
        session.commit()
        assert session.exec(sqlmodel.select(Hero.id).order_by(Hero.id)).all() == [1, 2, 3, 77]
