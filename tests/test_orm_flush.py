"""One Redis round trip per generator per flush (and per bulk statement), for every strategy.

Round trips are counted by wrapping the node set's ``call_plan``/``each`` (tests/support/orm.py). The
reservation belongs to one flush of one session: IDs a failed flush did not use are gaps.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import BigInteger, ForeignKey, String, create_engine, event, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship
from sqlalchemy.pool import StaticPool

from sa_redis_ids import RedisIds, SequenceExhausted, redis_id_column, register
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.orm import assign_ids
from sa_redis_ids.orm.batches import batch_limit
from sa_redis_ids.orm.events import FLUSH_RESERVATION
from tests.conftest import Backend
from tests.support.orm import (
    STRATEGIES,
    STRATEGY_IDS,
    RoundTrips,
    Strategy,
    fresh_base,
    real_redis_ids,
)


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[Engine]:
    engine = create_engine(f"sqlite:///{tmp_path / 'flush.sqlite3'}")
    yield engine
    engine.dispose()


@pytest.fixture
def shared_ids(real_redis: redis.Redis) -> Iterator[RedisIds]:
    yield from real_redis_ids(real_redis)


def _parent_child(base: Any, parent_ids: IdGenerator[Any], child_ids: IdGenerator[Any]) -> Any:
    """Parent (ID from ``redis_id_column``) and Child (ID from ``register``), one-to-many."""

    class Parent(base):  # type: ignore[misc, valid-type]
        __tablename__ = "parents"
        id: Mapped[Any] = redis_id_column(parent_ids)
        name: Mapped[str] = mapped_column(String(30), default="")
        children: Mapped[list[Child]] = relationship(back_populates="parent")

    class Child(base):  # type: ignore[misc, valid-type]
        __tablename__ = "children"
        id: Mapped[Any] = mapped_column(
            redis_id_column(child_ids).column.type, primary_key=True, autoincrement=False
        )
        parent_id: Mapped[Any] = mapped_column(ForeignKey("parents.id"))
        parent: Mapped[Parent] = relationship(back_populates="children")

    register(Child, child_ids)
    return Parent, Child


@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_one_round_trip_per_generator_per_flush_on_every_backend(
    strategy: Strategy, backend: Backend, base: Any, sqlite: Engine
) -> None:
    ids = backend.ids()
    parents, children = strategy.make(ids, "parents"), strategy.make(ids, "children")
    Parent, Child = _parent_child(base, parents, children)
    base.metadata.create_all(sqlite)
    trips = RoundTrips(ids)
    with Session(sqlite) as session:
        session.add_all([Parent(children=[Child(), Child()]) for _ in range(100)])
        session.commit()
        assert trips.take() == {"parents": 1, "children": 1}
        pairs = session.execute(select(Child.id, Child.parent_id)).all()
        parent_ids = set(session.scalars(select(Parent.id)))
    assert len(pairs) == 200 and len({child for child, _ in pairs}) == 200
    assert len(parent_ids) == 100 and {parent for _, parent in pairs} == parent_ids


@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_a_flush_of_10000_objects_is_one_round_trip(
    strategy: Strategy, shared_ids: RedisIds, base: Any
) -> None:
    generator = strategy.make(shared_ids, "items")
    sqlite = create_engine("sqlite://", poolclass=StaticPool)

    class Item(base):  # type: ignore[misc, valid-type]
        __tablename__ = "items"
        id: Mapped[Any] = redis_id_column(generator)

    base.metadata.create_all(sqlite)
    trips = RoundTrips(shared_ids)
    # (not expired on commit: reading 10,000 expired IDs back would be 10,000 SELECTs)
    with Session(sqlite, expire_on_commit=False) as session:
        items = [Item() for _ in range(10_000)]
        session.add_all(items)
        session.commit()
        assert trips.take() == {"items": 1}
        assert len({item.id for item in items}) == 10_000
        assert session.query(Item).count() == 10_000
    sqlite.dispose()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_bulk_paths_take_one_reservation_per_statement(
    strategy: Strategy, shared_ids: RedisIds, base: Any, sqlite: Engine
) -> None:
    parents, children = strategy.make(shared_ids, "parents"), strategy.make(shared_ids, "children")
    Parent, Child = _parent_child(base, parents, children)
    base.metadata.create_all(sqlite)
    trips = RoundTrips(shared_ids)
    with Session(sqlite) as session:
        session.execute(insert(Parent), [{"name": f"p{i}"} for i in range(400)])
        assert trips.take() == {"parents": 1}
        parent_id = session.scalars(select(Parent.id).limit(1)).one()
        session.bulk_insert_mappings(Child, [{"parent_id": parent_id} for _ in range(300)])
        assert trips.take() == {"children": 1}
        session.connection().execute(Child.__table__.insert(), [{"parent_id": parent_id}] * 200)
        assert trips.take() == {"children": 1}
        session.commit()
        assert session.query(Parent).count() == 400
        assert len(set(session.scalars(select(Child.id)))) == 500


def test_only_objects_without_an_id_are_counted(base: Any, sqlite: Engine) -> None:
    ids = RedisIds.embedded()
    users = ids.sequence("users")

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = redis_id_column(users)

    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        session.add_all([User(id=1000), User(), User(id=2000), User()])
        session.commit()
    assert users.next_id() == 3, "two IDs were reserved for the two objects without one"


def test_each_session_and_flush_has_its_own_reservation(base: Any) -> None:
    ids = RedisIds.embedded()
    # One shared in-memory connection, so two open write transactions do not lock each other.
    sqlite = create_engine("sqlite://", poolclass=StaticPool)

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = redis_id_column(ids.sequence("users"))

    base.metadata.create_all(sqlite)
    one, two = Session(sqlite), Session(sqlite)
    try:
        first = [User() for _ in range(3)]
        one.add_all(first)
        one.flush()
        second = [User() for _ in range(3)]
        two.add_all(second)
        two.flush()
        third = [User() for _ in range(2)]
        one.add_all(third)
        one.flush()
        assert [u.id for u in first] == [1, 2, 3]
        assert [u.id for u in second] == [4, 5, 6]
        assert [u.id for u in third] == [7, 8]
        assert FLUSH_RESERVATION not in one.info and FLUSH_RESERVATION not in two.info
        one.commit()
    finally:
        two.close()
        one.close()
        sqlite.dispose()


def test_ids_reserved_by_a_failed_flush_are_gaps_never_reused(base: Any, sqlite: Engine) -> None:
    ids = RedisIds.embedded()

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = redis_id_column(ids.sequence("users"))
        email: Mapped[str] = mapped_column(String(30), unique=True)

    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        session.add(User(email="taken"))
        session.commit()
        # Four IDs are reserved (2..5); the duplicate e-mail fails the flush part-way.
        session.add_all([User(email=e) for e in ("a", "taken", "b", "c")])
        with pytest.raises(IntegrityError):
            session.flush()
        session.rollback()
        assert FLUSH_RESERVATION not in session.info
        retried = [User(email=e) for e in ("a", "b", "c")]
        session.add_all(retried)
        session.commit()
        assert [u.id for u in retried] == [6, 7, 8]
        assert sorted(session.scalars(select(User.id))) == [1, 6, 7, 8]


def test_objects_added_during_the_flush_are_topped_up_in_one_call(
    base: Any, sqlite: Engine
) -> None:
    """Another before_flush listener adding rows after ours ran costs one more call, not one per row."""
    ids = RedisIds.embedded()

    class Order(base):  # type: ignore[misc, valid-type]
        __tablename__ = "orders"
        id: Mapped[int] = redis_id_column(ids.sequence("orders"))

    class Audit(base):  # type: ignore[misc, valid-type]
        __tablename__ = "audits"
        id: Mapped[int] = redis_id_column(ids.sequence("audits"))
        what: Mapped[str] = mapped_column(String(30))

    def audit_new_orders(session: Session, context: Any, instances: Any) -> None:
        for obj in list(session.new):
            if isinstance(obj, Order):
                session.add(Audit(what="order created"))

    base.metadata.create_all(sqlite)
    trips = RoundTrips(ids)
    with Session(sqlite) as session:
        event.listen(session, "before_flush", audit_new_orders)
        session.add_all([Order() for _ in range(50)])
        session.commit()
        assert trips.take() == {"orders": 1, "audits": 1}
        assert sorted(session.scalars(select(Audit.id))) == list(range(1, 51))


def test_autoflush_reserves_like_an_explicit_flush(base: Any, sqlite: Engine) -> None:
    ids = RedisIds.embedded()

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = redis_id_column(ids.sequence("users"))
        name: Mapped[str] = mapped_column(String(30))

    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        session.add_all([User(name="auto"), User(name="other")])
        assert session.scalars(select(User.id).where(User.name == "auto")).one() == 1
        later = User(name="later")
        session.add(later)
        assert later.id is None
        session.commit()
        assert later.id == 3


def test_assign_ids_gives_ids_before_the_flush(base: Any, sqlite: Engine) -> None:
    ids = RedisIds.embedded()
    parents, children = ids.sequence("parents"), ids.sequence("children", start=50)
    Parent, Child = _parent_child(base, parents, children)
    base.metadata.create_all(sqlite)
    trips = RoundTrips(ids)
    with Session(sqlite) as session:
        parent = Parent(children=[Child(), Child()])
        session.add(parent)
        assert assign_ids(session) == 3
        assert parent.id == 1 and sorted(c.id for c in parent.children) == [50, 51]
        assert trips.take() == {"parents": 1, "children": 1}
        session.commit()
        assert trips.take() == {}, "the flush had nothing left to reserve"
        assert sorted(session.scalars(select(Child.parent_id))) == [1, 1]


def test_assign_ids_assigns_nothing_when_a_generator_comes_short(base: Any, sqlite: Engine) -> None:
    ids = RedisIds.embedded()
    parents, children = ids.sequence("parents"), ids.sequence("children", start=50)
    children.next_ids = lambda n: list(range(50, 50 + n - 1))  # type: ignore[method-assign]
    Parent, Child = _parent_child(base, parents, children)
    base.metadata.create_all(sqlite)
    with Session(sqlite) as session:
        parent = Parent(children=[Child(), Child()])
        session.add(parent)
        with pytest.raises(SequenceExhausted, match="gave 1 values for 2 objects"):
            assign_ids(session)
        assert parent.id is None and [c.id for c in parent.children] == [None, None]


def test_a_session_subclass_and_sessionmaker_get_the_listeners(base: Any, sqlite: Engine) -> None:
    from sqlalchemy.orm import sessionmaker

    ids = RedisIds.embedded()

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)

    register(User, ids.sequence("users"))

    class MySession(Session):
        pass

    base.metadata.create_all(sqlite)
    trips = RoundTrips(ids)
    for make in (sessionmaker(sqlite), sessionmaker(sqlite, class_=MySession)):
        with make() as session:
            session.add_all([User(), User()])
            session.commit()
    assert trips.take() == {"users": 2}
    with Session(sqlite) as session:
        assert sorted(session.scalars(select(User.id))) == [1, 2, 3, 4]


def test_a_generator_that_caps_one_call_takes_one_call_per_cap(base: Any, sqlite: Engine) -> None:
    """ShortId takes at most 50,000 values per call; a bigger flush takes ceil(n / cap) calls."""
    ids = RedisIds.embedded()
    users = ids.sequence("users")
    users.max_batch = 3  # type: ignore[attr-defined]
    assert batch_limit(users) == 3
    assert batch_limit(ids.short_id("short")) == 50_000

    class User(base):  # type: ignore[misc, valid-type]
        __tablename__ = "users"
        id: Mapped[int] = redis_id_column(users)

    base.metadata.create_all(sqlite)
    trips = RoundTrips(ids)
    with Session(sqlite) as session:
        session.add_all([User() for _ in range(7)])
        session.commit()
        assert trips.take() == {"users": 3}
        session.execute(insert(User), [{}] * 4)
        assert trips.take() == {"users": 2}
        assert sorted(session.scalars(select(User.id))) == list(range(1, 12))
