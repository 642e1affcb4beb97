"""Redis failing in the middle of the work: a typed error, a rollback, no row, and a working retry.

Each test runs its own ``redis-server`` (``redis_servers`` fixture), stops it by its process id and
starts it again on the same port. The server keeps no data across the restart; the tests do not
depend on the values, only on what reaches the database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import BigInteger, ForeignKey, String, func, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship

from sa_redis_ids import RedisIds, RedisUnavailable, redis_id_column, register
from tests.support.orm import fresh_base
from tests.support.servers import RedisServer


@pytest.fixture
def base() -> Iterator[type[DeclarativeBase]]:
    with fresh_base() as found:
        yield found


def _models(base: Any, ids: RedisIds) -> tuple[Any, Any]:
    class Account(base):  # type: ignore[misc, valid-type]
        __tablename__ = "accounts"
        id: Mapped[int] = redis_id_column(ids.sequence("accounts"))
        name: Mapped[str] = mapped_column(String(30))
        entries: Mapped[list[Entry]] = relationship()

    class Entry(base):  # type: ignore[misc, valid-type]
        __tablename__ = "entries"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        account_id: Mapped[int] = mapped_column(ForeignKey("accounts.id"))

    register(Entry, ids.snowflake("entries"))
    return Account, Entry


def _count(session: Session, model: Any) -> int:
    found: int = session.scalar(select(func.count()).select_from(model))
    return found


def test_redis_stopped_mid_transaction_rolls_back_and_the_same_session_retries(
    redis_servers: Callable[[int], list[RedisServer]],
    base: Any,
    engine: Engine,
    create_tables: Callable[[Any], Engine],
) -> None:
    (server,) = redis_servers(1)
    ids = RedisIds.from_url(server.url, socket_timeout=1, connect_timeout=1)
    Account, Entry = _models(base, ids)
    create_tables(base.metadata)
    with Session(engine) as session:
        session.add(Account(name="first", entries=[Entry()]))
        session.flush()  # rows written inside the open transaction
        server.stop()
        session.add(Account(name="second", entries=[Entry(), Entry()]))
        with pytest.raises(RedisUnavailable) as caught:
            session.commit()
        assert caught.value.namespace in {"accounts", "entries"}
        assert [type(e).__name__ for e in caught.value.errors.values()] == ["ConnectionError"]
        session.rollback()
        assert _count(session, Account) == 0 and _count(session, Entry) == 0, "nothing written"

        server.start()
        session.add(Account(name="again", entries=[Entry(), Entry()]))
        session.commit()
        assert [a.name for a in session.scalars(select(Account))] == ["again"]
        assert _count(session, Entry) == 2


def test_redis_down_during_a_bulk_insert_raises_the_typed_error_and_writes_nothing(
    redis_servers: Callable[[int], list[RedisServer]],
    base: Any,
    engine: Engine,
    create_tables: Callable[[Any], Engine],
) -> None:
    (server,) = redis_servers(1)
    ids = RedisIds.from_url(server.url, socket_timeout=1, connect_timeout=1)
    Account, _ = _models(base, ids)
    create_tables(base.metadata)
    with Session(engine) as session:
        session.execute(insert(Account), [{"name": "kept?"}])
        server.stop()
        with pytest.raises(RedisUnavailable):
            session.execute(insert(Account), [{"name": f"n{i}"} for i in range(10)])
        session.rollback()
        with pytest.raises(RedisUnavailable), engine.begin() as conn:
            conn.execute(Account.__table__.insert(), [{"name": "core"}] * 3)
        assert _count(session, Account) == 0
        server.start()
        session.execute(insert(Account), [{"name": f"n{i}"} for i in range(10)])
        session.commit()
        assert _count(session, Account) == 10
