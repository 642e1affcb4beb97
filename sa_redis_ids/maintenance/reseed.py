"""Reseeding: raise a generator's Redis counters above what a database table already holds.

After Redis lost its data, or when a table that had IDs before adopts a generator, the counters
must start above the values in the table. `reseed_from_table` reads the table and calls the
generator's set-if-greater ``ensure_at_least`` (counters never move backwards, so running it twice,
or while the application runs, is safe):

Which treatment a generator gets depends on its abilities
([`abilities`][sa_redis_ids.generators.abilities]), not its strategy's name:

* a **counter** ([`Reseedable`][sa_redis_ids.generators.abilities.Reseedable]: Sequence, a user's
  counter strategy): ``MAX(column)`` once, over the values from its ``start`` to its ``max_value``;
* a **date-keyed** generator (``DayKeyed`` and ``Reseedable``: DatePrefixed, DailyCode): the maximum of every day in the table,
  newest first. Each day is one indexed ``MAX`` query below the previous day's lowest value, so only
  the days actually present are visited. Days at or before the purge marker are skipped: maintenance
  removed them for good and no generator can issue them again. Values that hide their counters
  (``secret=``) are all read for each day (streamed) to find the day's highest counter;
* a **pool** (``Pool``: ShortId): every value is marked taken, in chunks.

The generator must have the application's options: a node that records another claim for the
namespace (other options, another node list) stops the reseed with ``ConfigError`` before anything
is written. A node without a claim records the generator's together with its counters.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from sqlalchemy import BigInteger, Column, MetaData, Table, and_, func, literal, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import NoSuchTableError

from sa_redis_ids.errors import ConfigError, DayPurged
from sa_redis_ids.generators.abilities import DayKeyed, Pool, Reseedable
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.permute import HiddenCounters, check_key, hides_counters
from sa_redis_ids.maintenance.job import strategy_name
from sa_redis_ids.orm.floor import hidden_day_floor

RESERVE_CHUNK = 10_000
"""Values per ``reserve`` call when reseeding a ShortId pool."""


@dataclass(frozen=True)
class NodeChange:
    """One node's counter before and after (``before`` None: the counter did not exist)."""

    node: str
    before: int | None
    after: int

    @property
    def raised(self) -> bool:
        return self.before is None or self.after > self.before


@dataclass(frozen=True)
class ReseedStep:
    """One ``ensure_at_least`` call: the table's maximum (of one day, for date-keyed ones)."""

    day: date | None
    table_max: Any
    nodes: list[NodeChange]
    skipped: str = ""
    """Why nothing was done (a purged day), else empty."""

    @property
    def raised(self) -> bool:
        return any(change.raised for change in self.nodes)

    def describe(self) -> str:
        where = f"day {self.day}: " if self.day is not None else ""
        if self.skipped:
            return f"{where}max {self.table_max}: skipped ({self.skipped})"
        changes = ", ".join(
            f"{c.node} {'-' if c.before is None else c.before} -> {c.after}"
            + ("" if c.raised else " (unchanged)")
            for c in self.nodes
        )
        return f"{where}max {self.table_max}: counter {changes}"


@dataclass
class ReseedReport:
    """What `reseed_from_table` did."""

    namespace: str
    strategy: str
    table: str
    column: str
    kind: str = "counter"
    """``counter`` (one maximum), ``days`` (one maximum per day) or ``pool`` (values reserved)."""
    steps: list[ReseedStep] = field(default_factory=list)
    reserved: int = 0
    """Pools: how many values of the table were read and marked taken."""
    newly_taken: int = 0
    """Pools: how many of those were still free in Redis (the ones reseeding saved)."""
    note: str = ""
    """Why the walk stopped early, else empty."""
    rows: int = 0
    """Values (not NULL) the column holds."""
    skipped: int = 0
    """Values this generator cannot have made (outside its range, or not a value of a day):
    left out, the rest reseeded."""

    @property
    def empty_handed(self) -> bool:
        """The table has values but none could be used: Redis was not raised at all."""
        return self.rows > 0 and not self.steps and not self.reserved

    @property
    def raised(self) -> int:
        """How many steps raised at least one node's counter."""
        return sum(1 for step in self.steps if step.raised)

    def describe(self) -> str:
        head = f"{self.namespace} ({self.strategy}) from {self.table}.{self.column}"
        if self.kind == "pool":
            text = (
                f"{head}: {self.reserved} values marked taken, {self.newly_taken} of them were free"
            )
        elif not self.steps:
            text = f"{head}: no values, nothing to do"
        elif self.kind == "days":
            text = f"{head}: {len(self.steps)} days read, {self.raised} raised"
        else:
            top = self.steps[0]
            text = f"{head}: max {top.table_max}, " + (
                "counter raised" if top.raised else "counter already above it"
            )
        if self.skipped:
            text += f"; {self.skipped} values skipped: not values of this generator"
        return text + (f"; {self.note}" if self.note else "")


Progress = Callable[[ReseedStep, int], None]
"""``progress(step, done)``: called after each step with the number of steps done so far."""


def _column(bind: Engine | Connection, table: str | Table, column: str) -> Column[Any]:
    if isinstance(table, Table):
        found = table
    else:
        schema, _, name = table.rpartition(".")
        try:
            found = Table(name, MetaData(), schema=schema or None, autoload_with=bind)
        except NoSuchTableError as exc:
            raise ConfigError(f"the database has no table {table!r}") from exc
    if column not in found.c:
        raise ConfigError(f"table {found.fullname} has no column {column!r}")
    return found.c[column]


def _changes(result: Any) -> list[NodeChange]:
    return [NodeChange(str(node), before, int(after)) for node, before, after in result]


def reseed_from_table(
    generator: IdGenerator[Any],
    bind: Engine | Connection,
    table: str | Table,
    column: str = "id",
    *,
    since: date | None = None,
    progress: Progress | None = None,
    rows_progress: Callable[[int, int], None] | None = None,
    days_progress: Callable[[int, int], None] | None = None,
) -> ReseedReport:
    """Raise ``generator``'s counters above every value of ``table.column`` (see the module doc).

    ``table`` is a ``Table`` or a name (``schema.name`` allowed) reflected from ``bind``.
    ``since``: date-keyed generators only visit days from it on (the newest days matter most).
    ``rows_progress(done, total)``: pools, after each chunk of values marked taken.
    ``days_progress(done, total)``: date-keyed generators, after each day: the days walked so far
    and the days from the newest value's to the oldest's (or ``since``).
    """
    col = _column(bind, table, column)
    generator.check_claims()  # another node list or other options: refused before any query
    check_key(generator)  # values that hide their counters are read with the key only
    report = ReseedReport(
        generator.namespace, strategy_name(generator), col.table.fullname, col.name, steps=[]
    )
    opened: AbstractContextManager[Connection] = (
        bind.connect() if isinstance(bind, Engine) else nullcontext(bind)
    )
    with opened as conn:
        within = _within(generator, col)
        report.rows = int(conn.execute(select(func.count(col))).scalar() or 0)
        report.skipped = report.rows - int(
            conn.execute(select(func.count(col)).where(within)).scalar() or 0
        )
        if isinstance(generator, DayKeyed) and isinstance(generator, Reseedable):
            report.kind = "days"
            walk = _DayWalk(progress, days_progress)
            _reseed_days(generator, generator, conn, col, within, report, since, walk)
        elif isinstance(generator, Reseedable):
            top = conn.execute(select(func.max(col)).where(within)).scalar()
            if top is not None:
                step = ReseedStep(None, top, _changes(generator.ensure_at_least(top)))
                report.steps.append(step)
                if progress:
                    progress(step, 1)
        elif isinstance(generator, Pool):
            report.kind = "pool"
            _reserve_all(generator, conn, col, within, report, rows_progress)
        else:
            raise ConfigError(
                f"a {generator.strategy} generator has no counter to reseed",
                namespace=generator.namespace,
            )
    return report


def _within(generator: IdGenerator[Any], col: Column[Any]) -> Any:
    """The condition on ``col`` that holds for every value ``generator`` can make (indexable: a
    range, plus a length for codes); the rest of the column is skipped and counted."""
    low: Any
    high: Any
    if isinstance(generator, DayKeyed):
        first, last = generator.day_range()
        low, high = generator.day_bounds(first)[0], generator.day_bounds(last)[1]
    elif isinstance(generator, Pool):
        low, high = generator.offset, generator.max_value
    elif isinstance(generator, Reseedable):
        low, high = generator.start, generator.max_value
    else:  # checked by the caller
        raise ConfigError(
            f"a {generator.strategy} generator has no counter to reseed",
            namespace=generator.namespace,
        )
    if isinstance(low, str):
        return and_(col.between(low, high), func.length(col) == len(low))
    # Bounds as BIGINT: an INTEGER column's own type cannot hold 2^63 − 1 (PostgreSQL refuses).
    return col.between(literal(low, BigInteger()), literal(high, BigInteger()))


MAX_UNREADABLE = 10_000
"""Values in a date-keyed generator's range that are not values of a day (an impossible date)
skipped one by one before the walk gives up with a note."""


class _DayWalk:
    """Reports a walk over the days of a table, newest first, to the callbacks given."""

    def __init__(self, progress: Progress | None, days_progress: Callable[[int, int], None] | None):
        self.progress = progress
        self.days_progress = days_progress
        self.newest: date | None = None
        self.total = 0

    def walked(
        self,
        step: ReseedStep,
        steps: int,
        generator: DayKeyed,
        conn: Connection,
        col: Column[Any],
        within: Any,
        since: date | None,
    ) -> None:
        if self.progress:
            self.progress(step, steps)
        if self.days_progress is None or step.day is None:
            return
        if self.newest is None:  # the first day walked is the newest: count the days to go
            self.newest = step.day
            self.total = (step.day - _oldest_day(generator, conn, col, within, since)).days + 1
        done = (self.newest - step.day).days + 1
        self.days_progress(done, max(done, self.total))


def _oldest_day(
    generator: DayKeyed, conn: Connection, col: Column[Any], within: Any, since: date | None
) -> date:
    """The day of the column's lowest value of ``generator`` (not before ``since``)."""
    oldest = generator.day_range()[0]
    low = conn.execute(select(func.min(col)).where(within)).scalar()
    if low is not None:
        with suppress(ValueError):  # an impossible date in the range: count from its start
            oldest = generator.day_and_counter(low)[0]
    return oldest if since is None else max(oldest, since)


def _reseed_days(
    generator: DayKeyed,
    counters: Reseedable,
    conn: Connection,
    col: Column[Any],
    within: Any,
    report: ReseedReport,
    since: date | None,
    walk: _DayWalk,
) -> None:
    marker: date | None = generator.purged_through()
    below: Any = None
    unreadable = 0
    while True:
        query = select(func.max(col)).where(within)
        if below is not None:
            query = query.where(col < below)
        top = conn.execute(query).scalar()
        if top is None:
            return
        try:
            day, _counter = generator.day_and_counter(top)
        except ValueError:
            unreadable += 1
            report.skipped += 1
            if unreadable >= MAX_UNREADABLE:
                report.note = f"gave up below {top!r}: {unreadable} values in a row were not values"
                return
            below = top  # skip it and go on below
            continue
        unreadable = 0
        if since is not None and day < since:
            return
        if marker is not None and day <= marker:
            step = ReseedStep(day, top, [], skipped=f"purged through {marker}")
        elif (top := _day_top(generator, counters, conn, col, day, top)) is None:
            step = ReseedStep(day, None, [], skipped="no value of this generator that day")
        else:
            try:
                step = ReseedStep(day, top, _changes(counters.ensure_at_least(top)))
            except DayPurged as exc:
                step = ReseedStep(day, top, [], skipped=str(exc))
        report.steps.append(step)
        walk.walked(step, len(report.steps), generator, conn, col, within, since)
        below = generator.day_bounds(day)[0]


def _day_top(
    generator: DayKeyed,
    counters: Reseedable,
    conn: Connection,
    col: Column[Any],
    day: date,
    top: Any,
) -> Any:
    """The value to raise ``day``'s counters to: its maximum ``top``, or when the values hide
    their counters (``secret=``) the value of the day's highest counter, found by reading every
    value of the day; None when the day holds none of the generator's values."""
    if not (isinstance(generator, HiddenCounters) and hides_counters(generator)):
        return top
    used = hidden_day_floor(conn, generator, col, day)
    return None if used < counters.start else generator.compose(day, used)


def _reserve_all(
    generator: Pool,
    conn: Connection,
    col: Column[Any],
    within: Any,
    report: ReseedReport,
    rows_progress: Callable[[int, int], None] | None = None,
) -> None:
    # Options on the statement, not the connection: Connection.execution_options() would change a
    # connection the caller (an Alembic migration) goes on using.
    query = select(col).where(within)
    result = conn.execute(query.execution_options(stream_results=True, yield_per=RESERVE_CHUNK))
    for chunk in result.scalars().partitions(RESERVE_CHUNK):
        report.newly_taken += int(generator.reserve(list(chunk)))
        report.reserved += len(chunk)
        if rows_progress:
            rows_progress(report.reserved, report.rows - report.skipped)
