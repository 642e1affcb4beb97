"""The SQLAlchemy event listeners: one Redis round trip per generator per flush.

``before_flush`` reserves the IDs of the session's pending new objects whose bound attribute is
unset, one ``next_ids(n)`` per generator (`reserve`). The
reservation belongs to that session and that flush (``Session.info``); the ``before_insert`` hook
assigns from it in insert order. After the flush, or when the session rolls back, the reservation
is dropped: IDs a failed flush did not use are gaps, never handed to another flush or session. An
object the count could not see (added by another listener during the flush) makes the hook top the
reservation up once for every object still waiting, again in one call. ``mapper_configured``
checks each binding's column against its generator.

Under ``AsyncSession`` these hooks run in SQLAlchemy's greenlet; an ``AsyncIdGenerator``'s
reservation is awaited there on the event loop, so the loop keeps serving other tasks while Redis
answers (see `sa_redis_ids.orm.batches`).

`sa_redis_ids.orm` calls `install` when it is imported (``import sa_redis_ids`` does),
so the hooks are in place before any model uses ``redis_id()`` or ``register()``; on flushes
without such models they cost a dictionary lookup per new object.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import InstanceState, Mapper, Session

from sa_redis_ids.orm.batches import take
from sa_redis_ids.orm.bindings import Binding, bindings_for
from sa_redis_ids.orm.floor_scope import connection_scope, session_scope
from sa_redis_ids.orm.reservations import Reservation, pending_targets, reserve

FLUSH_RESERVATION = "sa_redis_ids.reservation"
"""``Session.info`` key of the current flush's `Reservation`."""

_installed = False
_install_lock = threading.Lock()


def _before_flush(session: Session, flush_context: Any, instances: Any) -> None:
    session.info.pop(FLUSH_RESERVATION, None)
    session.info[FLUSH_RESERVATION] = reserve(session, instances)


def _drop(session: Session, *_: Any) -> None:
    session.info.pop(FLUSH_RESERVATION, None)


def _before_insert(mapper: Mapper[Any], connection: Any, state: InstanceState[Any]) -> None:
    bindings = bindings_for(mapper)
    if not bindings:
        return
    found = state.dict
    for binding in bindings:
        if found.get(binding.key) is None:
            setattr(state.obj(), binding.key, _take(state, binding, connection))


def _take(state: InstanceState[Any], binding: Binding, connection: Any) -> Any:
    session = state.session
    if session is None:
        with connection_scope(connection):
            return take(binding.generator, 1)[0]
    reservation: Reservation | None = session.info.get(FLUSH_RESERVATION)
    if reservation is None:
        reservation = session.info[FLUSH_RESERVATION] = Reservation()
    value = reservation.take(binding.generator)
    if value is None:
        # Not counted by before_flush (added during the flush): top up for all still unset.
        targets = pending_targets(session)
        waiting = len(targets.get(binding.generator, ())) or 1
        with session_scope(session):
            reservation.add(binding.generator, take(binding.generator, waiting))
        value = reservation.take(binding.generator)
    return value


def _mapper_configured(mapper: Mapper[Any], class_: Any) -> None:
    for binding in bindings_for(mapper):
        binding.check()


def install() -> None:
    """Install the listeners (idempotent; `sa_redis_ids.orm` calls it on import)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        event.listen(Session, "before_flush", _before_flush)
        event.listen(Session, "after_flush_postexec", _drop)
        event.listen(Session, "after_soft_rollback", _drop)
        event.listen(Mapper, "before_insert", _before_insert, raw=True)
        event.listen(Mapper, "mapper_configured", _mapper_configured)
        _installed = True
