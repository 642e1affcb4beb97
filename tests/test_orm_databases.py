"""Every insert path on SQLite, PostgreSQL and MariaDB, with IDs from the real Redis.

Paths: ORM ``add``/``add_all`` with relationships (parent and child IDs both from Redis), ORM bulk
``insert()`` with a list of dicts, ``bulk_insert_mappings``, Core executemany, and
``insert().returning()`` where the dialect has RETURNING. Values at the very top of ``BIGINT`` come
back exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from inspect import signature
from typing import Any

import pytest
import redis
from sqlalchemy import ForeignKey, String, func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship
from sqlalchemy.sql.dml import Insert

from sa_redis_ids import RedisIds, SequenceExhausted, redis_id_column, register
from sa_redis_ids.bounds import BIGINT_MAX
from tests.support.orm import RoundTrips, fresh_base, real_redis_ids


@pytest.fixture
def shared_ids(real_redis: redis.Redis) -> Iterator[RedisIds]:
    yield from real_redis_ids(real_redis)


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


def _models(base: Any, ids: RedisIds) -> tuple[Any, Any]:
    """Customer (sequence, ``redis_id_column``) → Order (snowflake, ``register``) with a daily code."""

    class Customer(base):  # type: ignore[misc, valid-type]
        __tablename__ = "customers"
        id: Mapped[int] = redis_id_column(ids.sequence("customers", start=1000))
        name: Mapped[str] = mapped_column(String(30))
        orders: Mapped[list[Order]] = relationship(back_populates="customer")

    class Order(base):  # type: ignore[misc, valid-type]
        __tablename__ = "orders"
        id: Mapped[int] = redis_id_column(ids.snowflake("orders"))
        code: Mapped[str] = redis_id_column(ids.daily_code("codes", digits=6), primary_key=False)
        customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
        customer: Mapped[Customer] = relationship(back_populates="orders")

    return Customer, Order


def test_orm_add_all_with_relationships(
    shared_ids: RedisIds, base: Any, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    Customer, Order = _models(base, shared_ids)
    create_tables(base.metadata)
    trips = RoundTrips(shared_ids)
    with Session(engine) as session:
        alice = Customer(name="alice", orders=[Order(), Order()])
        bob = Customer(name="bob", orders=[Order()])
        session.add(alice)
        session.add_all([bob])
        session.commit()
        assert trips.take() == {"customers": 1, "orders": 1, "codes": 1}
        assert (alice.id, bob.id) == (1000, 1001)
        rows = session.execute(
            select(Customer.name, Order.id, Order.code).join(Order.customer).order_by(Order.id)
        ).all()
    assert [name for name, _, _ in rows] == ["alice", "alice", "bob"]
    order_ids = [order_id for _, order_id, _ in rows]
    assert order_ids == sorted(set(order_ids)), "snowflake IDs increase, no duplicates"
    codes = [code for _, _, code in rows]
    assert len(set(codes)) == 3 and all(c.startswith("IS") and len(c) == 16 for c in codes)


def test_bulk_insert_paths(
    shared_ids: RedisIds, base: Any, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    Customer, Order = _models(base, shared_ids)
    create_tables(base.metadata)
    trips = RoundTrips(shared_ids)
    with Session(engine) as session:
        session.execute(insert(Customer), [{"name": f"c{i}"} for i in range(50)])
        assert trips.take() == {"customers": 1}
        session.bulk_insert_mappings(Customer, [{"name": f"m{i}"} for i in range(50)])
        assert trips.take() == {"customers": 1}
        session.connection().execute(
            Customer.__table__.insert(), [{"name": f"core{i}"} for i in range(50)]
        )
        assert trips.take() == {"customers": 1}
        multi_values = Customer.__table__.insert().values([{"name": f"v{i}"} for i in range(3)])
        session.connection().execute(multi_values)
        assert trips.take() == {"customers": 1}
        session.execute(insert(Order), [{"customer_id": 1000 + i} for i in range(150)])
        assert trips.take() == {"orders": 1, "codes": 1}
        session.commit()
        customer_ids = list(session.scalars(select(Customer.id).order_by(Customer.id)))
        assert customer_ids == list(range(1000, 1153))
        joined = session.scalar(select(func.count()).select_from(Order).join(Order.customer))
        assert joined == 150
        assert session.scalar(select(func.count(func.distinct(Order.code)))) == 150


def test_insert_returning_where_supported(
    shared_ids: RedisIds, base: Any, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    with engine.connect():  # the dialect learns the server version (MariaDB 10.5+) on connect
        pass
    if not engine.dialect.insert_returning:
        pytest.skip(f"{engine.dialect.name} has no INSERT … RETURNING")
    Customer, _ = _models(base, shared_ids)
    create_tables(base.metadata)
    trips = RoundTrips(shared_ids)
    with Session(engine) as session:
        one = session.execute(insert(Customer).returning(Customer.id), [{"name": "solo"}])
        assert one.scalars().all() == [1000]
        ordered = "sort_by_parameter_order" in signature(Insert.returning).parameters  # 2.0.10+
        options = {"sort_by_parameter_order": True} if ordered else {}
        many = session.scalars(
            insert(Customer).returning(Customer.id, **options),
            [{"name": f"r{i}"} for i in range(20)],
        ).all()
        assert (many if ordered else sorted(many)) == list(range(1001, 1021))
        objects = session.scalars(
            insert(Customer).returning(Customer), [{"name": "x"}, {"name": "y"}]
        ).all()
        assert sorted(c.id for c in objects) == [1021, 1022]
        assert trips.take() == {"customers": 3}
        session.commit()


def test_values_at_the_top_of_bigint_round_trip_exactly(
    shared_ids: RedisIds, base: Any, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    top = shared_ids.sequence("top", start=BIGINT_MAX - 5)

    class Big(base):  # type: ignore[misc, valid-type]
        __tablename__ = "bigs"
        id: Mapped[int] = redis_id_column(top)
        how: Mapped[str] = mapped_column(String(10))

    create_tables(base.metadata)
    with Session(engine) as session:
        session.add_all([Big(how="orm"), Big(how="orm")])
        session.flush()
        session.execute(insert(Big), [{"how": "bulk"}, {"how": "bulk"}])
        session.connection().execute(Big.__table__.insert(), [{"how": "core"}, {"how": "core"}])
        session.commit()
        rows = session.execute(select(Big.id, Big.how).order_by(Big.id)).all()
        assert [tuple(r) for r in rows] == [
            (BIGINT_MAX - 5, "orm"),
            (BIGINT_MAX - 4, "orm"),
            (BIGINT_MAX - 3, "bulk"),
            (BIGINT_MAX - 2, "bulk"),
            (BIGINT_MAX - 1, "core"),
            (9223372036854775807, "core"),
        ]
        assert all(type(value) is int for value, _ in rows)
        assert session.get(Big, 9223372036854775807).how == "core"
        session.add(Big(how="past"))
        with pytest.raises(SequenceExhausted):
            session.commit()
        session.rollback()
        assert session.scalar(select(func.count()).select_from(Big)) == 6


def test_register_on_an_existing_autoincrement_model(
    shared_ids: RedisIds, base: Any, engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    """A model as an existing code base has it (autoincrement BIGINT key), adopted with register()."""
    from sqlalchemy import BigInteger

    class Invoice(base):  # type: ignore[misc, valid-type]
        __tablename__ = "invoices"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
        total: Mapped[int] = mapped_column(default=0)

    register(Invoice, shared_ids.date_prefixed("invoices"))
    create_tables(base.metadata)
    with Session(engine) as session:
        session.add_all([Invoice(total=1), Invoice(total=2)])
        session.execute(insert(Invoice), [{"total": 3}])
        session.commit()
        found = list(session.scalars(select(Invoice.id).order_by(Invoice.id)))
    assert len(found) == 3 and all(len(str(v)) == 19 for v in found)
    assert found[1] - found[0] == 1 and found[2] - found[1] == 1
