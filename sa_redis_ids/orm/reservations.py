"""Reserving the IDs of a session's pending objects: one ``next_ids(n)`` per generator.

`pending_targets` counts, per generator, the pending new objects whose bound attribute is
unset; `reserve` takes that many values of each generator (a generator that caps one call,
like ShortId at 50,000 values, takes one call per cap) into a `Reservation` that hands them
out in order. The flush hooks (`sa_redis_ids.orm.events`) reserve before each flush;
`assign_ids` and `assign_ids_async` reserve and assign at once, before the flush.

Generators of the sync ``RedisIds`` are called as they are; an ``AsyncIdGenerator``'s calls are
awaited on the event loop of the ``AsyncSession`` (see `sa_redis_ids.orm.batches`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.orm import InstanceState, Session

from sa_redis_ids.orm.batches import AnyGenerator, take_all, take_all_async
from sa_redis_ids.orm.bindings import Binding, bindings_for
from sa_redis_ids.orm.floor_scope import session_scope

Targets = dict[AnyGenerator, list[tuple[InstanceState[Any], Binding]]]
"""Per generator, the (object state, binding) pairs waiting for one of its values."""


class Reservation:
    """IDs reserved for one flush of one session, handed out per generator in order."""

    def __init__(self) -> None:
        self._values: dict[AnyGenerator, Iterator[Any]] = {}

    def add(self, generator: AnyGenerator, values: list[Any]) -> None:
        """Hand out ``values`` next for ``generator`` (any left from before are dropped: gaps)."""
        self._values[generator] = iter(values)

    def take(self, generator: AnyGenerator) -> Any:
        """The next reserved value of ``generator``, or ``None`` when none is left."""
        values = self._values.get(generator)
        return None if values is None else next(values, None)


def pending_targets(session: Session, objects: Iterable[Any] | None = None) -> Targets:
    """Per generator, the pending new objects (of ``objects``, if given) whose attribute is unset."""
    targets: Targets = {}
    new = session.new
    chosen = new if objects is None else [obj for obj in objects if obj in new]
    for obj in chosen:
        state: InstanceState[Any] = inspect(obj)
        bindings = bindings_for(state.mapper)
        if not bindings:
            continue
        found = state.dict
        for binding in bindings:
            if found.get(binding.key) is None:
                targets.setdefault(binding.generator, []).append((state, binding))
    return targets


def check_dialects(session: Session, targets: Targets) -> None:
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


def counts(targets: Targets) -> dict[AnyGenerator, int]:
    """How many values each generator must give."""
    return {generator: len(pairs) for generator, pairs in targets.items()}


def reserve(session: Session, objects: Iterable[Any] | None = None) -> Reservation:
    """Reserve IDs for every pending object lacking one: one ``next_ids`` per generator."""
    targets = pending_targets(session, objects)
    check_dialects(session, targets)
    reservation = Reservation()
    with session_scope(session):
        taken = take_all(counts(targets))
    for generator, values in taken.items():
        reservation.add(generator, values)
    return reservation


def assign(targets: Targets, taken: dict[AnyGenerator, list[Any]]) -> int:
    """Set each target's attribute to its value (through the instrumented attribute)."""
    for generator, values in taken.items():
        for (state, binding), value in zip(targets[generator], values, strict=True):
            setattr(state.obj(), binding.key, value)
    return sum(len(values) for values in taken.values())


def assign_ids(session: Session) -> int:
    """Give every pending object of ``session`` its IDs now (before the flush); returns how many.

    One ``next_ids`` per generator. Useful to know IDs before the INSERT, e.g. to put them in a
    message; the flush then has nothing left to reserve. All or nothing: every generator's values
    are taken before any object is touched, so an error (say ``SequenceExhausted``) assigns none.
    With an ``AsyncSession``, ``await session.run_sync(assign_ids)`` (or `assign_ids_async`).
    """
    targets = pending_targets(session)
    check_dialects(session, targets)
    with session_scope(session):
        return assign(targets, take_all(counts(targets)))


async def assign_ids_async(session: Any) -> int:
    """Give every pending object of an ``AsyncSession`` (or ``Session``) its IDs; returns how many.

    Not needed to keep the event loop free any more: give ``redis_id()``/``register()`` an
    ``AsyncIdGenerator`` (from ``AsyncRedisIds``) and the flush awaits its reservations on the
    loop by itself. Still useful to know the IDs before the flush, like `assign_ids`.
    An ``AsyncIdGenerator`` is awaited on the loop; a sync generator's call runs in a worker
    thread (``asyncio.to_thread``), as before. All or nothing, like `assign_ids`.
    """
    sync_session = getattr(session, "sync_session", session)
    targets = pending_targets(sync_session)
    check_dialects(sync_session, targets)
    with session_scope(sync_session):
        return assign(targets, await take_all_async(counts(targets)))
