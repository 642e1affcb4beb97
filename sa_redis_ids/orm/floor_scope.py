"""Where a floor bound to a column reads its table: the connection of the flush or statement
that asks for IDs.

The ORM hooks and the column default open a ``FloorScope`` (a context variable) while they
take IDs; a generator's column floor (``bound_floor``) that must be read
during that call reads through the scope's connection, so no second engine or pool is needed,
the read sees the transaction's own rows, and it works under ``AsyncSession`` (the scope is
visible on the event loop, which shares the greenlet's context). A scope is closed when the call
ends, so a task or thread that copied the context cannot use the connection later.

A leaf of ``sa_redis_ids.orm``: it knows no generator, mapper or session type.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

from sqlalchemy.engine import Connection, Engine

Connect = Callable[[Any], Connection]
"""The connection on which to read the table of a mapper (or of a table, with no mapper)."""
Bind = Callable[[Any], Engine]
"""The engine that connection belongs to, found without I/O."""


class FloorScope:
    """The connections of one flush or statement, for the floors read during it."""

    def __init__(self, connect: Connect, bind: Bind):
        self._connect = connect
        self._bind = bind
        self._engines: dict[int, Engine | None] = {}
        self.floors: dict[int, Any] = {}
        """What each column floor answered in this scope (it is asked at every call)."""
        self.open = True
        """False once the flush or statement has ended."""
        self._reading: asyncio.Lock | None = None

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[None]:
        """Held while a floor is read through this scope's connections on the event loop: the
        generators of one ``AsyncSession`` flush are awaited together, and a session provisions
        its connection for one of them at a time (SQLAlchemy refuses a second meanwhile)."""
        if self._reading is None:
            self._reading = asyncio.Lock()
        async with self._reading:
            yield

    def connection(self, mapper: Any) -> Connection:
        """The connection on which to read ``mapper``'s table."""
        return self._connect(mapper)

    def engine(self, mapper: Any) -> Engine | None:
        """The engine of ``connection``, found without opening it; None when the session
        has no bind for ``mapper`` (its flush fails by itself)."""
        key = id(mapper)
        if key not in self._engines:
            try:
                self._engines[key] = self._bind(mapper)
            except Exception:  # UnboundExecutionError, or a user's get_bind that refuses
                self._engines[key] = None
        return self._engines[key]


_CURRENT: ContextVar[FloorScope | None] = ContextVar("sa_redis_ids_floor_scope", default=None)


@contextmanager
def reading_through(connect: Connect, bind: Bind) -> Iterator[FloorScope]:
    """Floors read inside this block read through ``connect(mapper)``."""
    scope = FloorScope(connect, bind)
    token = _CURRENT.set(scope)
    try:
        yield scope
    finally:
        scope.open = False
        _CURRENT.reset(token)


def session_scope(session: Any) -> Any:
    """``reading_through`` a ``Session``'s own connections, one per bind of a mapper."""
    return reading_through(
        lambda mapper: session.connection(bind_arguments={"mapper": mapper}),
        lambda mapper: session.get_bind(mapper=mapper),
    )


def connection_scope(connection: Connection) -> Any:
    """``reading_through`` one connection (a Core statement's) for every table."""
    return reading_through(lambda _: connection, lambda _: connection.engine)


def current_scope() -> FloorScope | None:
    """The open scope of the flush or statement running here, if any."""
    scope = _CURRENT.get()
    return scope if scope is not None and scope.open else None
