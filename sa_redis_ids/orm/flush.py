"""One Redis round trip per generator per flush: the session and mapper event listeners.

``before_flush`` counts the pending new objects whose bound attribute is unset, per generator, and
reserves that many IDs with one ``next_ids(n)`` each (a generator that caps one call, like ShortId
at 50,000 values, takes one call per cap). The reservation belongs to that session and that flush
(``Session.info``); the ``before_insert`` hook assigns from it in insert order. After the
flush, or when the session rolls back, the reservation is dropped: IDs a failed flush did not use
are gaps, never handed to another flush or session. An object the count could not see (added by
another listener during the flush) makes the hook top the reservation up once for every object
still waiting, again in one call.

The listeners are installed once per process, the first time ``redis_id()`` or ``register()`` is
used; on other models they cost a dictionary lookup per flushed object.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Mapper, Session, configure_mappers
from sqlalchemy.orm.state import InstanceState

from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.orm.batches import take
from sa_redis_ids.orm.bindings import Binding, all_bindings, bindings_for

FLUSH_RESERVATION = "sa_redis_ids.reservation"
"""``Session.info`` key of the current flush's :class:`Reservation`."""

_installed = False
_install_lock = threading.Lock()

Targets = dict[IdGenerator[Any], list[tuple[InstanceState[Any], Binding]]]


class Reservation:
    """IDs reserved for one flush of one session, handed out per generator in order."""

    def __init__(self) -> None:
        self._values: dict[IdGenerator[Any], Any] = {}

    def add(self, generator: IdGenerator[Any], values: list[Any]) -> None:
        """Hand out ``values`` next for ``generator`` (any left from before are dropped: gaps)."""
        self._values[generator] = iter(values)

    def take(self, generator: IdGenerator[Any]) -> Any:
        """The next reserved value of ``generator``, or ``None`` when none is left."""
        values = self._values.get(generator)
        return None if values is None else next(values, None)


def pending_targets(session: Session, objects: Iterable[Any] | None = None) -> Targets:
    """Per generator, the pending new objects (of ``objects``, if given) whose attribute is unset."""
    targets: Targets = {}
    new = session.new
    chosen = new if objects is None else [obj for obj in objects if obj in new]
    for obj in chosen:
        state: InstanceState[Any] = obj._sa_instance_state
        bindings = bindings_for(state.mapper)
        if not bindings:
            continue
        found = state.dict
        for binding in bindings:
            if found.get(binding.key) is None:
                targets.setdefault(binding.generator, []).append((state, binding))
    return targets


def _check_dialect(session: Session, targets: Targets) -> None:
    """Check each binding against the dialect it will insert on (once per dialect)."""
    seen: set[int] = set()
    for pairs in targets.values():
        for _, binding in pairs:
            if id(binding) in seen:
                continue
            seen.add(id(binding))
            try:
                bind = session.get_bind(mapper=binding.mapper)
            except Exception:  # no bind: the flush itself reports that
                continue
            binding.check(bind.dialect)


def reserve(session: Session, objects: Iterable[Any] | None = None) -> Reservation:
    """Reserve IDs for every pending object lacking one: one ``next_ids`` per generator."""
    targets = pending_targets(session, objects)
    _check_dialect(session, targets)
    reservation = Reservation()
    for generator, pairs in targets.items():
        reservation.add(generator, take(generator, len(pairs)))
    return reservation


def assign(targets: Targets, generator: IdGenerator[Any], values: list[Any]) -> None:
    """Set each target's attribute to its value (through the instrumented attribute)."""
    for (state, binding), value in zip(targets[generator], values, strict=True):
        setattr(state.obj(), binding.key, value)


def assign_ids(session: Session) -> int:
    """Give every pending object of ``session`` its IDs now (before the flush); returns how many.

    One ``next_ids`` per generator. Useful to know IDs before the INSERT, e.g. to put them in a
    message; the flush then has nothing left to reserve. All or nothing: every generator's values
    are taken before any object is touched, so an error (say ``SequenceExhausted``) assigns none.
    """
    targets = pending_targets(session)
    _check_dialect(session, targets)
    taken = {generator: take(generator, len(pairs)) for generator, pairs in targets.items()}
    for generator, values in taken.items():
        assign(targets, generator, values)
    return sum(len(pairs) for pairs in targets.values())


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
            setattr(state.obj(), binding.key, _take(state, binding))


def _take(state: InstanceState[Any], binding: Binding) -> Any:
    session = state.session
    if session is None:
        return binding.generator.next_id()
    reservation: Reservation | None = session.info.get(FLUSH_RESERVATION)
    if reservation is None:
        reservation = session.info[FLUSH_RESERVATION] = Reservation()
    value = reservation.take(binding.generator)
    if value is None:
        # Not counted by before_flush (added during the flush): top up for all still unset.
        targets = pending_targets(session)
        waiting = len(targets.get(binding.generator, ())) or 1
        reservation.add(binding.generator, take(binding.generator, waiting))
        value = reservation.take(binding.generator)
    return value


def _mapper_configured(mapper: Mapper[Any], class_: Any) -> None:
    for binding in bindings_for(mapper):
        binding.check()


def install() -> None:
    """Install the listeners (idempotent; called by ``redis_id()`` and ``register()``)."""
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


def check_columns(bind: Any) -> None:
    """Check every bound column against ``bind``'s dialect now (an Engine, Connection or Dialect).

    The same checks run by themselves before the first insert on each dialect; call this at start-up
    to fail there instead. Configures the mappers first.
    """
    configure_mappers()
    dialect = getattr(bind, "dialect", bind)
    for binding in all_bindings():
        binding.check()
        binding.check(dialect)
