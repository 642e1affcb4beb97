"""What DatePrefixed and DailyCode share: a counter per local day, keyed by the Redis server's clock.

The day comes from Redis ``TIME`` in a configured time zone (:class:`~sa_redis_ids.generators.day_window.DayClock`);
each call sends the day window and the script picks the day, creates its counter atomically (one
round trip) and increments it. With N nodes, node ``k`` issues counter parts
``start + (c − 1)·N + k`` of its own counter ``c`` (as :mod:`~sa_redis_ids.generators.sequence`).

``floor=``: a callable ``floor(day) -> int`` giving the highest counter part already used that day
(for example read from the database by :func:`~sa_redis_ids.orm.floor.floor_from_column`). With a
floor the script does not create a missing counter; it says so, and the generator takes the Redlock
for ``(namespace, day)``, checks again, seeds the counter above the floor, releases and retries.
So a Redis that lost its data mid-day continues above what the database holds. When the counter
exists the hot path stays one round trip without a lock.

Maintenance (purge, precreate) and reseeding (``ensure_at_least``) live here too. A purge raises a
per-node marker; the scripts refuse any day at or before it, so a purged day is never re-created.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Generic

from sa_redis_ids.errors import (
    ConfigError,
    DayPurged,
    LockNotAcquired,
    RedisUnavailable,
    ScriptError,
)
from sa_redis_ids.generators.base import IdGenerator, V
from sa_redis_ids.generators.day_window import DayClock, day_label, day_start_ms, label_day
from sa_redis_ids.generators.highwater import heal_args, logger
from sa_redis_ids.redis.plans import now, run_plan
from sa_redis_ids.redis.scripts import NeedsFloor, OutOfWindow, check_reply, reply_text
from sa_redis_ids.validation import check_day

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node, NodeSet

Floor = Callable[[date], int]
"""``floor(day)``: the highest counter part already used on ``day`` (0 when none)."""

Locker = Callable[[str, "list[Node]"], AbstractContextManager[Any]]
"""``locker(name, nodes)``: a context manager holding a lock of that name on ``nodes`` (a Redlock)."""

DAY_INIT_LOCK_TTL = 10.0
"""Seconds the first-of-day Redlock is held at most (one floor query and one script call)."""

ATTEMPTS = 6
"""Script calls one take may need: a window rebuilt after a miss, a day seeded from its floor."""

FIRST_LABEL_DAY = date(1000, 1, 1)
LAST_LABEL_DAY = date(9999, 12, 30)
"""Days stored under an 8-digit ``YYYYMMDD`` label whose next day exists (a counter expires then)."""


@dataclass(frozen=True)
class DatedBlock(Generic[V]):
    """Values of one day from one round trip, with the Redis time they were taken at.

    ``day_end_ms`` is the UTC millisecond at which ``day`` ends in the generator's time zone, so a
    buffer can drop what is left of the block at the day change without asking Redis again.
    """

    day: date
    values: list[V]
    redis_now_ms: int
    day_end_ms: int


class DatedGenerator(IdGenerator[V]):
    """A counter per local day (Redis time, ``tz``), with floors, purging and precreation.

    Subclasses say how a day and a counter part make a value (:meth:`compose`), how to read them
    back (:meth:`day_and_counter`), where counters live (``storage``) and the counter's range.
    """

    storage: str
    """``"hash"``: one hash per namespace, a field per day; ``"key"``: one expiring key per day."""

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        tz: str,
        start: int,
        counter_max: int,
        floor: Floor | None = None,
        locker: Locker | None = None,
        grace_ms: int = 0,
        headroom: int | None = None,
    ):
        super().__init__(nodes, prefix, namespace, floor=floor, headroom=headroom)
        self.clock = DayClock(tz)
        self.start: int = start
        self.counter_max: int = counter_max
        self._locker = locker
        self.grace_ms: int = grace_ms
        self.purge_key = self.keys.key(self.strategy, "purged")

    # -- what subclasses define -------------------------------------------------------------

    @abstractmethod
    def compose(self, day: date, counter: int) -> V:
        """The value of counter part ``counter`` on ``day``."""

    def compose_all(self, day: date, counters: range) -> list[V]:
        """The values of ``counters`` on ``day`` (subclasses compute the day's part once)."""
        return [self.compose(day, counter) for counter in counters]

    @abstractmethod
    def day_and_counter(self, value: V) -> tuple[date, int]:
        """The day and counter part of one of this generator's values (``ValueError`` otherwise)."""

    @abstractmethod
    def _store_key(self) -> str:
        """The hash (storage "hash") or the set of day labels (storage "key")."""

    def _day_key(self, label: str) -> str:
        """Storage "key": the counter key of the day labelled ``label``."""
        return self.keys.key(self.strategy, label)

    def _check_day(self, day: date) -> None:
        """Raise if values of ``day`` cannot be composed (a format's date range)."""

    def day_range(self) -> tuple[date, date]:
        """The first and last day this generator can hold a counter for."""
        return FIRST_LABEL_DAY, LAST_LABEL_DAY

    # -- counters and nodes -----------------------------------------------------------------

    def day_bounds(self, day: date) -> tuple[V, V]:
        """The lowest and highest value ``day`` can have (what a floor query scans)."""
        return self.compose(day, 0), self.compose(day, self.counter_max)

    def _expire_at(self, day: date) -> int:
        return day_start_ms(day + timedelta(days=1), self.clock.tz) + self.grace_ms

    # -- taking values ----------------------------------------------------------------------

    def _take(self, n: int) -> list[V]:
        return self._take_block(n).values

    def _take_block(self, n: int) -> DatedBlock[V]:
        """``n`` values of the current day in one round trip (more only on a window miss or seeding)."""
        block: DatedBlock[V] = self._call(lambda node: self._take_on(node, n))
        return block

    def _take_on(self, node: Node, n: int) -> DatedBlock[V]:
        """``n`` values of the day on ``node`` (more round trips to read or seed a floor)."""
        return run_plan(self._with_floor_read_once(node, lambda: now(self._attempt, node, n)))

    def _attempt(self, node: Node, n: int) -> DatedBlock[V]:
        claim = self.claim_for(node)
        limit: int = node.counter_through(self.start, self.counter_max)
        high = self.high
        floor: str = (
            "first" if self._floor is not None and not high.consulted(node.index) else "ask"
        )
        if self._floor is None:
            floor = "none"
        mark: tuple[str, int] = high.mark(node.index) or ("", 0)
        guard_label: str = mark[0]
        guard: int = mark[1]
        days: list[date]
        window: list[str]
        for _ in range(ATTEMPTS):
            days, window = self.clock.snapshot()
            guard_text, heal_text, _ = heal_args(
                guard, self.headroom, limit, ask=False, floor_read=floor == "given"
            )
            keys = [self.purge_key, self.claim_key, self._store_key()]
            if self.storage == "key":
                keys += [self._day_key(day_label(day)) for day in days]
            reply = node.run(
                "dated_take",
                keys=keys,
                args=[
                    n,
                    claim,
                    str(limit),
                    floor,
                    self.storage,
                    self.grace_ms,
                    guard_label,
                    guard_text,
                    heal_text,
                    high.identities[node.index],
                    *window,
                ],
            )
            try:
                label, after, now_ms, end_ms, healed, identity = check_reply(
                    reply, namespace=self.namespace, node=node, claim=claim
                )
            except OutOfWindow as exc:
                self.clock.recenter(exc.now_ms)
                continue
            except NeedsFloor as exc:
                found, current = exc.detail
                day = label_day(found)
                if current:  # the counter exists: read the floor of its day and guard with it
                    seen = guard if found == guard_label else 0
                    guard_label, guard = found, max(seen, self._floor_counter(node, day))
                    floor = "given"
                else:  # the day has no counter: seed it from the floor under the day's lock
                    try:
                        self._seed([node], day)
                    except LockNotAcquired as exc:
                        if len(self._nodes) == 1:
                            raise
                        raise RedisUnavailable(  # another node can answer meanwhile
                            f"another process holds this node's lock of {day} (it is seeding it)",
                            namespace=self.namespace,
                            node=node.name,
                        ) from exc
                    high.set_consulted(node.index)
                    floor = "ask"
                continue
            text = reply_text(label)
            day = label_day(text)
            self._check_day(day)
            counter = int(after)
            if floor == "given":
                high.set_consulted(node.index)
            if healed:
                high.healed(node.name, reply_text(healed), str(counter - n))
            high.answered(node.index, identity, (text, counter))
            values = self.compose_all(day, node.values(self.start, counter, n))
            return DatedBlock(day, values, int(now_ms), int(reply_text(end_ms)))
        raise ScriptError(
            f"no value after {ATTEMPTS} attempts: the Redis clock kept leaving the day window "
            "or the day's counter kept disappearing",
            namespace=self.namespace,
            node=node.name,
        )

    def _floor_counter(self, node: Node, day: date) -> int:
        """The counter of ``node`` above which every value of ``day`` is above the floor."""
        return node.counter_through(self.start, self._read_floor(day))

    # -- first-of-day seeding ----------------------------------------------------------------

    def _lock_name(self, day: date) -> str:
        return f"{self.namespace}.{self.strategy}.{day_label(day)}"

    def _exists(self, node: Node, day: date) -> bool:
        def action(node: Node) -> bool:
            if self.storage == "hash":
                return bool(node.client.hexists(self._store_key(), day_label(day)))
            return bool(node.client.exists(self._day_key(day_label(day))))

        return self._nodes.on(node, self.namespace, action)

    def _seed(self, nodes: list[Node], day: date) -> list[Node]:
        """Create ``day``'s counter on each of ``nodes`` that lacks it; returns the nodes seeded.

        Without a floor the counter starts at 0. With one, each node on its own under the Redlock
        of ``(namespace, day)`` taken on that node alone (node k's counter is node k's: no other
        node need agree, so one node down does not stop the others): check again, read the floor,
        and set the counter so its next value is above the floor (only if still absent: the
        script checks atomically).
        """
        if self._floor is None:
            return [node for node in nodes if self._set(node, day, 0, "init")[0] is None]
        if self._locker is None:
            raise ConfigError(
                "floor= needs a lock for the first-of-day initialisation; build the generator "
                "with RedisIds.date_prefixed or RedisIds.daily_code",
                namespace=self.namespace,
            )
        with self.high.seeding:  # one thread per process goes for the Redlock; the others wait
            return [node for node in nodes if self._seed_from_floor(node, day)]

    def _seed_from_floor(self, node: Node, day: date) -> bool:
        """Seed ``node``'s counter of ``day`` from the floor under the day's lock on ``node``."""
        if self._exists(node, day):
            return False
        assert self._locker is not None
        with self._locker(self._lock_name(day), [node]):
            if self._exists(node, day):
                return False
            self._refuse_purged(node, day)  # a purged day fails here, before a database query
            return self._seed_one(node, day, self._read_floor(day))

    def _seed_one(self, node: Node, day: date, used: int) -> bool:
        """Create ``node``'s counter of ``day`` above the floor ``used`` (plus the headroom when
        the day already has values: they may be followed by values not yet in the database)."""
        limit = node.counter_through(self.start, self.counter_max)
        counter = node.counter_through(self.start, used)
        _, seeded, _ = heal_args(counter, self.headroom, limit, ask=False)
        _, vanished, _ = heal_args(counter, self.headroom, limit, ask=False, floor_read=True)
        return self._set(node, day, int(seeded), "seed", vanished=int(vanished))[0] is None

    def _refuse_purged(self, node: Node, day: date) -> None:
        label = day_label(day)
        marker = self._nodes.on(node, self.namespace, lambda n: n.client.get(self.purge_key))
        if marker is not None and label <= reply_text(marker):
            raise DayPurged(
                f"day {label} is at or before the purge marker {reply_text(marker)}",
                namespace=self.namespace,
                node=node.name,
            )

    def _read_floor(self, day: date) -> int:
        return run_plan(self._highest_used(day, what="the highest counter used that day"))

    def _set(
        self, node: Node, day: date, counter: int, mode: str, *, vanished: int | None = None
    ) -> tuple[int | None, int]:
        """Run ``dated_set`` on ``node`` (mode "init", "seed" or "raise"; ``vanished``: the value
        "seed" sets instead when the day's key vanished); ``(before or None, after)``."""

        def action(node: Node) -> tuple[int | None, int]:
            claim = self.claim_for(node)
            keys = [self.purge_key, self.claim_key, self._store_key()]
            if self.storage == "key":
                keys.append(self._day_key(day_label(day)))
            reply = node.run(
                "dated_set",
                keys=keys,
                args=[
                    claim,
                    day_label(day),
                    self.storage,
                    str(counter),
                    mode,
                    self._expire_at(day),
                    *([] if vanished is None else [str(vanished)]),
                ],
            )
            before, after = check_reply(reply, namespace=self.namespace, node=node, claim=claim)
            text = reply_text(before)
            return (int(text) if text else None), int(reply_text(after))

        return self._nodes.on(node, self.namespace, action)

    # -- maintenance and reseeding -------------------------------------------------------------

    def precreate(self, day: date) -> bool:
        """Create ``day``'s counter on every node now if it is missing (seeded from the floor,
        under the first-of-day lock, when ``floor=`` is set). True if any node's was created.

        A node that cannot be reached (or whose day lock stays held) is skipped with a warning
        on the ``sa_redis_ids`` logger: it creates its counter at its first call of the day.
        Only when no node could be reached does it raise :class:`~sa_redis_ids.RedisUnavailable`
        (with each node's error). Raises :class:`~sa_redis_ids.DayPurged` for a day at or
        before the purge marker, and ``TypeError``/``ValueError`` for what is not a ``date`` of
        :meth:`day_range`.
        """
        first, last_day = self.day_range()
        day = check_day("day", day, first=first, last=last_day)
        created = False
        errors: dict[str, BaseException] = {}
        last: BaseException | None = None
        for node in self._nodes.nodes:
            try:
                created = bool(self._seed([node], day)) or created
            except (RedisUnavailable, LockNotAcquired) as exc:
                errors[node.name] = last = exc
        if last is not None and len(errors) == len(self._nodes):
            if len(errors) == 1:
                raise last
            raise RedisUnavailable(
                f"no node could create the counter of {day}",
                namespace=self.namespace,
                errors=errors,
            ) from last
        for name, error in errors.items():
            logger.warning(
                "precreating %s of %s skipped node %s: %s", day, self.namespace, name, error
            )
        return created

    @staticmethod
    def _purge_day(day: object) -> date:
        """``day`` if ``purge_before`` can take it: a ``date`` from 1000-01-02 to 9999-12-31."""
        return check_day(
            "day",
            day,
            first=FIRST_LABEL_DAY + timedelta(days=1),
            last=LAST_LABEL_DAY + timedelta(1),
        )

    def purge_before(self, day: date) -> list[date]:
        """Delete every day strictly older than ``day`` on every node and raise the purge marker
        to the day before ``day`` (never lower it). Returns the days whose counters were deleted.

        ``day`` is a ``date`` from 1000-01-02 to 9999-12-31 (``TypeError``/``ValueError`` otherwise).
        """
        day = self._purge_day(day)
        last = day_label(day - timedelta(days=1))
        deleted: set[str] = set()
        for labels in self._nodes.each(self.namespace, lambda node: self._purge_on(node, last)):
            deleted.update(labels)
        return sorted(label_day(label) for label in deleted)

    def _purge_on(self, node: Node, last: str) -> list[str]:
        store = self._store_key()
        if self.storage == "hash":
            reply = node.run("dated_purge", keys=[self.purge_key, store], args=[last, "hash"])
            return [
                reply_text(label)
                for label in check_reply(reply, namespace=self.namespace, node=node)[1:]
            ]
        # Raise the marker first: from then on no day <= last is created, so the index is complete.
        check_reply(
            node.run("dated_purge", keys=[self.purge_key, store], args=[last, "key"]),
            namespace=self.namespace,
            node=node,
        )
        members: list[str] = [reply_text(label) for label in node.client.smembers(store)]
        labels: list[str] = sorted(label for label in members if label <= last)
        if not labels:
            return []
        reply = node.run(
            "dated_purge",
            keys=[self.purge_key, store, *map(self._day_key, labels)],
            args=[last, "key", *labels],
        )
        return [
            reply_text(label)
            for label in check_reply(reply, namespace=self.namespace, node=node)[1:]
        ]

    def days_present(self) -> list[date]:
        """The days that have a counter on any node, oldest first."""
        found: set[str] = set()
        for labels in self._nodes.each(self.namespace, self._days_on):
            found.update(labels)
        return sorted(label_day(label) for label in found)

    def _days_on(self, node: Node) -> list[str]:
        if self.storage == "hash":
            return [reply_text(label) for label in node.client.hkeys(self._store_key())]
        labels = [reply_text(label) for label in node.client.smembers(self._store_key())]
        return [label for label in labels if node.client.exists(self._day_key(label))]

    def purged_through(self) -> date | None:
        """The last day purged (the highest purge marker over the nodes), or None."""
        markers = [
            reply_text(marker)
            for marker in self._nodes.each(
                self.namespace, lambda node: node.client.get(self.purge_key)
            )
            if marker is not None
        ]
        return label_day(max(markers)) if markers else None

    def ensure_at_least(self, value: V) -> list[tuple[str, int | None, int]]:
        """Make sure nothing ``<= value`` of ``value``'s day is issued again (counters only rise).

        Used to reseed Redis from a table's current maximum. Every node is raised (all must be
        reachable). Returns ``(node, counter before or None, counter after)`` per node.

        A node that records another claim (other ``fmt``, ``length``, ``start``, ``digits``,
        ``tz``…, another node list) raises :class:`~sa_redis_ids.ConfigError` before any node
        changes; a node without a claim records ours together with the day's counter.
        """
        day, used = self.day_and_counter(value)
        self.check_claims()
        result: list[tuple[str, int | None, int]] = []
        for node in self._nodes.nodes:
            before, after = self._set(node, day, node.counter_through(self.start, used), "raise")
            result.append((node.name, before, after))
        return result
