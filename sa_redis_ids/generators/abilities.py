"""What a generator can do beyond issuing values, told by its type: abilities as protocols.

Maintenance, reseeding and the command line never ask a generator for its strategy's name; they
ask whether it *has* an ability, with ``isinstance(generator, DayKeyed)``. A strategy of the
library or a user's own (see [`register_strategy`][sa_redis_ids.generators.registry.register_strategy]) gets
the treatment of an ability by defining its members, nothing else:

* [`DayKeyed`][sa_redis_ids.generators.abilities.DayKeyed]: counters per local day; maintenance pre-creates the coming days and purges
  old ones, reseeding walks the days of a table (DatePrefixed, DailyCode);
* [`Pool`][sa_redis_ids.generators.abilities.Pool]: a fixed pool of values; maintenance reports how full it is, reseeding marks a
  table's values taken (ShortId);
* [`Reseedable`][sa_redis_ids.generators.abilities.Reseedable]: counters that can be raised above what a table holds, set-if-greater
  (Sequence, the date-keyed ones);
* [`Parseable`][sa_redis_ids.generators.abilities.Parseable]: a value can be decoded into its parts (Snowflake, Sequence, the date-keyed
  ones); ``sa-redis-ids parse`` offers exactly these strategies.

The protocols are ``runtime_checkable``: ``isinstance`` checks that the members exist (not their
signatures), so keep their signatures as documented here; mypy checks them statically.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date
from typing import Any, Protocol, runtime_checkable
from zoneinfo import ZoneInfo


class ZoneClock(Protocol):
    """The time zone a date-keyed generator counts its days in (its ``clock``)."""

    @property
    def tz(self) -> ZoneInfo:
        """The zone, as Python sees it."""

    @property
    def tz_name(self) -> str:
        """The zone's IANA name (``Asia/Shanghai``): maintenance schedules a run before its midnight."""


NodeChanges = list[tuple[str, int | None, int]]
"""``(node name, counter before or None, counter after)`` per node, as a raise returns it."""


@runtime_checkable
class Reseedable(Protocol):
    """Counters that can be raised above a value already used (``sa-redis-ids reseed``)."""

    @property
    def start(self) -> int:
        """The lowest counter (a counter strategy: its lowest value; a date-keyed one: of a day)."""

    def ensure_at_least(self, value: Any) -> NodeChanges:
        """Make sure no value ``<= value`` is issued again (counters never move backwards);
        [`ConfigError`][sa_redis_ids.ConfigError] before any write when a node records another claim."""
        ...


@runtime_checkable
class DayKeyed(Protocol):
    """A counter per local day, keyed by the day: pre-created, purged, walked day by day."""

    @property
    def clock(self) -> ZoneClock:
        """The generator's time zone: maintenance's *today* is Redis ``TIME`` in it."""

    def precreate(self, day: date) -> bool:
        """Create ``day``'s counter on every node where it is missing (with the floor, if any);
        True if one was created."""
        ...

    def purge_before(self, day: date) -> list[date]:
        """Delete the counters of every day before ``day`` and raise the purge marker to the day
        before it, so they can never be issued again; the days deleted."""
        ...

    def purged_through(self) -> date | None:
        """The purge marker: no day up to it can be issued any more (None: nothing purged)."""
        ...

    def days_present(self) -> list[date]:
        """The days that have a counter on some node."""
        ...

    def day_range(self) -> tuple[date, date]:
        """The first and last day the generator can hold a counter for."""
        ...

    def day_bounds(self, day: date) -> tuple[Any, Any]:
        """The lowest and highest value of ``day`` (what a query per day scans)."""
        ...

    def day_and_counter(self, value: Any) -> tuple[date, int]:
        """The day and counter of one of the generator's values (``ValueError`` otherwise)."""
        ...


class PoolStats(Protocol):
    """How full a pool is."""

    @property
    def issued(self) -> int: ...

    @property
    def free(self) -> int: ...

    @property
    def fill_ratio(self) -> float:
        """``issued / size``, 0.0 to 1.0."""


@runtime_checkable
class Pool(Protocol):
    """A fixed pool of values handed out in any order; freed values come back."""

    @property
    def offset(self) -> int:
        """The lowest value of the pool (the highest is the generator's ``max_value``)."""

    def stats(self) -> PoolStats:
        """How full the pool is, over every node (maintenance reports it)."""
        ...

    def reserve(self, values: Iterable[int]) -> int:
        """Mark ``values`` taken for good; how many were still free (reseeding uses it)."""
        ...

    def release(self, value: int) -> bool:
        """Give ``value`` back to the pool; whether it was taken."""
        ...

    def is_taken(self, value: int) -> bool:
        """Whether ``value`` is issued or reserved."""
        ...


@runtime_checkable
class Parseable(Protocol):
    """Values that decode into parts (a dataclass whose fields ``sa-redis-ids parse`` prints)."""

    def parse(self, value: Any) -> Any:
        """The parts of ``value``; ``ValueError`` when it is not a value of this generator."""
        ...
