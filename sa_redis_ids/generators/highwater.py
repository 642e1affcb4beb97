"""What a process remembers so that a Redis which forgot cannot make it repeat an ID.

A Redis node can come back empty (a restart without persistence, ``FLUSHALL``, an evicted key) or
rewound (a failover to a replica that had not received the last writes). Its counters then stand
below values already handed out, and without a defence the next calls hand them out again.

Defences, in layers, shared by every strategy:

* **High-water marks.** A `HighWater` remembers, per node, the highest state this process
  received from it (a counter, a day and its counter, a snowflake millisecond and slot, a pool's
  running total). Every issuing script is told that mark as its *guard*: a state that is missing or
  below it is first raised to the guard plus *headroom*, then values are issued. The heal is logged
  as a WARNING on the ``sa_redis_ids.rewinds`` logger and counted (``generator.rewinds``, exported
  as ``sa_redis_ids_rewinds_total`` by `sa_redis_ids.metrics`).
* **Floors.** With ``floor=`` (the database's view, e.g.
  [`floor_from_column`][sa_redis_ids.floor_from_column]), the floor is read once per process and node
  at first use, and again whenever a script finds the state missing or below the guard; the guard
  then is the higher of the mark and the floor.
* **Identity.** Every script checks the node's replication ID, which changes when a replica is
  promoted. A process that finds another ID than it saw last, on a server promoted from a replica,
  treats the state as possibly rewound: it reads the floor (if any) and raises the state to its
  guard plus headroom even when the state is not below it, so a failover to a lagging replica is
  caught also by processes whose marks lie below the lost writes. A server that restarted from its
  own data (AOF or RDB) has a new ID too; ``INFO replication`` tells it apart (no previous ID, or
  a backlog that starts where the previous ID's history ended, however many restarts ago the
  process called) and nothing is healed. The ID is kept in a
  key of the namespace for a second, written neither to replicas nor to the AOF, so the scripts
  read ``INFO`` only when that key is missing or differs (``node_identity_since`` in
  ``common.lua``).
* **Headroom.** A heal sets the state above the guard by ``headroom`` counter steps, because other
  processes may hold values above this process's mark (taken after its last call, or buffered in
  blocks they have not handed out yet). Its default covers 32 processes each holding two blocks of
  the largest block size, or 1,000 values for unbuffered generators, capped at a tenth of what a
  node can issue (a hundredth unbuffered).
* **Drift.** A counter's mark ages: while a process hands out a buffered block or waits between
  calls, the others go on drawing, and after an earlier loss healed by another process (which this
  one never saw) they draw from above *that* heal. A heal from an aged mark alone would land on
  values they already have. So each counter generator also records the node's *pace*: how fast
  the node's counter rose between two of this process's calls (every process's draws included).
  A heal adds `DRIFT_FACTOR` times that pace times the mark's age, at most ten times the
  headroom (and a tenth of what a node can issue): what the others can have drawn since. A mark
  younger than `PACE_SECONDS` counts as current: the headroom covers so short a time.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.validation import check_int_option

logger = logging.getLogger("sa_redis_ids")
rewind_log = logging.getLogger("sa_redis_ids.rewinds")
"""A rewind detected and healed (WARNING, with the namespace, the node and both states)."""

M = TypeVar("M")

HEADROOM_PROCESSES = 32
"""How many processes, each holding two blocks, the default buffered headroom covers."""
UNBUFFERED_HEADROOM = 1000
"""Default headroom of an unbuffered generator, in counter steps of one node."""
DRIFT_FACTOR = 2
"""How many times the pace a node's counter kept up to a mark a heal assumes it kept since."""
PACE_SECONDS = 0.05
"""The shortest interval a node's pace is measured over (shorter ones are merged)."""
DRIFT_HEADROOMS = 10
"""A heal's drift is at most this many headrooms (and a tenth of what a node can issue)."""


@dataclass
class Pace:
    """How fast one node's counter rose, as one process saw it (see *Drift* above)."""

    period: str
    """The counter it is about (a day's label for date-keyed generators; "" otherwise)."""
    counter: int
    """The counter at the start of the interval being measured."""
    since: float
    """When (``time.monotonic()``) the interval started."""
    last: float
    """When this process last received the counter (the age of its mark counts from there)."""
    rate: float = 0.0
    """Counter steps per second over the last whole interval."""


def default_headroom(capacity: int, max_block: int | None) -> int:
    """The headroom a generator gets when ``headroom=`` is not given.

    ``capacity`` is how many counter steps one node can take (per day for date-keyed ones);
    ``max_block`` the largest block a buffered generator takes (None: unbuffered).
    """
    if max_block is None:
        return min(UNBUFFERED_HEADROOM, capacity // 100)
    return min(2 * HEADROOM_PROCESSES * max_block, capacity // 10)


def drift_cap(headroom: int, capacity: int) -> int:
    """The most a heal adds for a mark's age: `DRIFT_HEADROOMS` headrooms, at most a
    tenth of ``capacity`` (how many counter steps a node can take)."""
    return min(DRIFT_HEADROOMS * headroom, capacity // 10)


def check_headroom(headroom: object) -> int | None:
    """Validate ``headroom=``: None (the default) or an int from 0 to 2^62."""
    if headroom is None:
        return None
    return check_int_option("headroom", headroom, low=0, high=2**62)


def check_floor(floor: object) -> Any:
    """Validate ``floor=``: None or a callable."""
    if floor is not None and not callable(floor):
        raise ConfigError(f"floor must be a callable (see floor_from_column), not {floor!r}")
    return floor


def check_floor_arguments(floor: Any, arguments: tuple[str, ...], *, namespace: str) -> None:
    """Raise `ConfigError` naming ``floor=`` when it cannot be called with ``arguments``
    (a date-keyed generator calls it with the day, the others with nothing). A callable without
    a readable signature is judged when called."""
    try:
        signature = inspect.signature(floor)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*arguments)
    except TypeError as exc:
        wanted = f"one argument ({arguments[0]})" if arguments else "no argument"
        raise ConfigError(
            f"floor={floor!r} must take {wanted}, as this generator calls it: {exc}",
            namespace=namespace,
        ) from None


class HighWater(Generic[M]):
    """Per node of one generator: the highest mark received and whether the floor was read.

    Marks are compared with ``>``; a mark only ever rises. Thread-safe; a forked child inherits
    the parent's marks, which are still true lower bounds for it, and gets new locks (a lock some
    thread of the parent held at the fork would stay held in the child for good).
    """

    def __init__(self, count: int, namespace: str):
        self.namespace = namespace
        self._marks: list[M | None] = [None] * count
        self._consulted = [False] * count
        self.identities = [""] * count
        """Per node: the identity (replication ID) it answered with last; "" before any."""
        self._paces: list[Pace | None] = [None] * count
        self._new_locks()
        self.rewinds = 0
        """Rewinds detected and healed in this process (a node's state below what it had issued)."""
        _LIVE.add(self)

    def _new_locks(self) -> None:
        self._first_use = [threading.Lock() for _ in self._marks]
        self._lock = threading.Lock()
        self.seeding = threading.Lock()
        """Held by the one thread of the process that seeds a day from its floor."""
        self.records = threading.Lock()
        """Guards a generator's own records of what it issued (a short-ID pool's positions)."""

    def mark(self, index: int) -> M | None:
        """The highest mark received from node ``index`` (None: nothing yet)."""
        return self._marks[index]

    def saw(self, index: int, mark: M) -> None:
        """Record that node ``index`` answered with ``mark`` (kept if higher)."""
        with self._lock:
            known = self._marks[index]
            if known is None or mark > known:  # type: ignore[operator]
                self._marks[index] = mark

    def seen_with(self, index: int, claim: str) -> str:
        """The issuing scripts' "identity claim" argument for node ``index``: the identity this
        process saw last, a space and the node's claim, the form of the namespace's identity
        marker (``node_identity_since`` in ``common.lua``), so one read of it checks both."""
        return f"{self.identities[index]} {claim}"

    def answered(self, index: int, identity: object, mark: M) -> None:
        """Record a node's reply: its identity and the mark it gave (kept if higher)."""
        self.identities[index] = identity.decode() if isinstance(identity, bytes) else str(identity)
        self.saw(index, mark)

    def pace(self, index: int, counter: int, period: str = "") -> None:
        """Record that node ``index``'s counter (of ``period``) stood at ``counter`` just now."""
        now = time.monotonic()
        found = self._paces[index]
        if found is None or found.period != period or counter < found.counter:
            self._paces[index] = Pace(period, counter, now, now)
            return
        found.last = now
        if now - found.since >= PACE_SECONDS:
            found.rate = (counter - found.counter) / (now - found.since)
            found.counter, found.since = counter, now

    def drift(self, index: int, most: int, period: str = "") -> int:
        """Counter steps node ``index``'s counter (of ``period``) may have risen since this
        process's mark, by its pace: at most ``most``; 0 when nothing is known or the mark is
        younger than `PACE_SECONDS` (the headroom covers what others draw in so short a time)."""
        found = self._paces[index]
        if found is None or found.period != period or found.rate <= 0 or most <= 0:
            return 0
        age = time.monotonic() - found.last
        if age < PACE_SECONDS:
            return 0
        return min(most, math.ceil(DRIFT_FACTOR * found.rate * age))

    def consulted(self, index: int) -> bool:
        """Whether the floor was read for node ``index`` in this process."""
        return self._consulted[index]

    def set_consulted(self, index: int) -> None:
        self._consulted[index] = True

    def first_use(self, index: int) -> threading.Lock:
        """The lock under which one thread makes the first call on node ``index`` that reads the
        floor; the others wait, then find it read (so it is read once per process and node)."""
        return self._first_use[index]

    def healed(self, node: str, before: str, after: str, *, why: str = "") -> None:
        """Count and log a heal: the node's state was ``before`` ("" or "-": missing), now
        ``after``."""
        with self._lock:
            self.rewinds += 1
        rewind_log.warning(
            "sa_redis_ids: namespace %s on node %s: state %s was below what was already issued "
            "(%s); raised to %s before issuing",
            self.namespace,
            node,
            "missing" if before in ("", "-") else before,
            why or "a data loss, an eviction or a failover to a replica that was behind",
            after,
        )


def heal_args(
    guard: int, headroom: int, limit: int, *, ask: bool, floor_read: bool = False
) -> list[str]:
    """The ``guard, heal, ask`` arguments of a counter script (see ``sequence.lua``).

    ``guard``: the counter the node must already have reached; ``heal``: what a missing or lower
    counter is set to, ``guard + headroom`` but at most ``limit`` (0 when there is no guard and
    no floor was read, so a missing counter starts fresh); ``ask``: report instead of healing
    (the floor is unread). A guard above ``limit`` (a floor past the strategy's last value) heals
    to ``limit``: the counter is used up, the script answers "exhausted", and no value past the
    limit (which Redis may not even hold as an integer) is ever stored.
    """
    heal = min(guard + headroom, limit) if guard > 0 or floor_read else 0
    return [str(guard), str(heal), "1" if ask else "0"]


def checked_floor(value: object, *, call: str, what: str, namespace: str) -> int:
    """A floor's answer if it is a non-negative int, else [`ConfigError`][sa_redis_ids.ConfigError] saying what fits."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"{call} returned {value!r}; it must return {what} as a non-negative int (0 when none)",
            namespace=namespace,
        )
    return value


_LIVE: weakref.WeakSet[HighWater[Any]] = weakref.WeakSet()


def _new_locks_in_child() -> None:
    for high in list(_LIVE):
        high._new_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_locks_in_child)
