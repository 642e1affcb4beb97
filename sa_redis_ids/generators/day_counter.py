"""What DatePrefixed and DailyCode share: a counter per local day, keyed by the Redis server's clock.

The day comes from Redis ``TIME`` in a configured time zone (`DayClock`);
each call sends the day window and the script picks the day, creates its counter atomically (one
round trip) and increments it. With N nodes, node ``k`` issues counter parts
``start + (c − 1)·N + k`` of its own counter ``c`` (as `sequence`).

``floor=``: a callable ``floor(day) -> int`` giving the highest counter part already used that day
(for example read from the database by [`floor_from_column`][sa_redis_ids.floor_from_column]). With a
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
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sa_redis_ids.errors import (
    ConfigError,
    DayPurged,
    LockNotAcquired,
    RedisUnavailable,
    ScriptError,
)
from sa_redis_ids.generators.base import IdGenerator, V
from sa_redis_ids.generators.day_window import (
    DayClock,
    DayWindow,
    day_label,
    day_start_ms,
    label_day,
)
from sa_redis_ids.generators.highwater import heal_args, logger
from sa_redis_ids.generators.permute import CounterPermutation, require_key
from sa_redis_ids.redis.plans import Command, Plan, Run, planned, run_plan
from sa_redis_ids.redis.scripts import NeedsFloor, OutOfWindow, check_reply, reply_text
from sa_redis_ids.validation import check_day

if TYPE_CHECKING:
    from sa_redis_ids.lock import Redlock
    from sa_redis_ids.redis.nodes import Node, NodeSet

P = TypeVar("P")

Floor = Callable[[date], int]
"""``floor(day)``: the highest counter part already used on ``day`` (0 when none)."""

Locker = Callable[[str, "list[Node]"], "Redlock"]
"""``locker(name, nodes)``: a new [`Redlock`][sa_redis_ids.Redlock] of that name on ``nodes``
(seeding holds it with its plans, so it works on the sync and the asyncio driver alike)."""

DAY_INIT_LOCK_TTL = 10.0
"""Seconds the first-of-day Redlock is held at most (one floor query and one script call)."""

ATTEMPTS = 6
"""Script calls one take may need: a window rebuilt after a miss, a day seeded from its floor."""

FLOOR_NONE, FLOOR_ASK, FLOOR_FIRST, FLOOR_GIVEN = "none", "ask", "first", "given"
"""What ``dated_take`` is told about the floor (its ARGV[4])."""
FLOOR_LATER = "later"
"""A floor that cannot be read yet (a direct draw before the process's first flush): as
``none``, but a claim the call records is recorded unjudged (see ``dated_take.lua``)."""

MAX_CACHED_DAYS = 64
"""Days whose value part (prefix number, code head) a generator keeps; more clear the cache."""

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


EXACT = 2**53
"""Counters below this are exact as Lua numbers: the limit ``dated_fast`` compares against."""


class _Day(Generic[P]):
    """A day of a window: its label, the UTC ms it ends, its value part (see ``_day_part``), and
    what ``dated_fast`` is told about it (None: its bounds are not 10-digit whole seconds, and
    its calls go to ``dated_take``)."""

    __slots__ = ("day", "end_ms", "fast", "label", "part")

    def __init__(
        self, day: date, label: str, start_ms: int, end_ms: int, part: P, counter_key: bytes
    ):
        self.day = day
        self.label = label
        self.end_ms = end_ms
        self.part = part
        self.fast: tuple[bytes, tuple[bytes, bytes, bytes]] | None = None
        """``dated_fast``'s day key (KEYS[3]) and its label and bounds (ARGV[3], ARGV[5..6])."""
        start, end = divmod(start_ms, 1000), divmod(end_ms, 1000)
        if start[1] == end[1] == 0 and len(str(start[0])) == len(str(end[0])) == 10:
            self.fast = (
                counter_key,
                (label.encode(), str(start[0]).encode(), str(end[0]).encode()),
            )


class _Window(Generic[P]):
    """A day window prepared for ``dated_take``: KEYS, the window's ARGV and its days, built once
    per window (every call of the window reuses them)."""

    __slots__ = ("args", "days", "fast_keys", "keys", "last", "middle", "positions", "window")

    def __init__(self, generator: DatedGenerator[Any], window: DayWindow):
        self.window = window
        keys = [
            generator.purge_key,
            generator.claim_key,
            generator.identity_key,
            generator._store_key(),
        ]
        if generator.storage == "key":
            keys += [generator._day_key(label) for label in window.labels]
        else:
            keys.append(generator.days_key)
        self.keys: list[bytes] = [key.encode() for key in keys]
        self.args: tuple[bytes, ...] = tuple(arg.encode() for arg in window.args)
        self.days: tuple[_Day[P], ...] = tuple(
            _Day(
                day,
                label,
                window.bounds[i],
                window.bounds[i + 1],
                generator._part(day),
                self.keys[3] if generator.storage == "hash" else self.keys[4 + i],
            )
            for i, (day, label) in enumerate(zip(window.days, window.labels, strict=True))
        )
        positions: dict[str | bytes, int] = {}
        for i, label in enumerate(window.labels):
            positions[label] = positions[label.encode()] = i
        self.positions = positions
        """The window position of a day label, as text or as the bytes a reply holds."""
        self.last = len(window.days) - 1
        self.middle: _Day[P] = self.days[len(self.days) // 2]
        """The day the Redis time lies in on most calls (today, between yesterday and tomorrow)."""
        self.fast_keys: tuple[bytes, bytes] = (self.keys[2], self.keys[0])
        """``dated_fast``'s identity and purge markers (KEYS[1], KEYS[2])."""


class _NodeArgs:
    """What ``dated_take`` is told about one node on every call: its claim and counter limit."""

    __slots__ = ("claim", "fast", "limit", "limit_text", "storage", "storage_timed")

    def __init__(self, claim: str, limit: int, storage: tuple[bytes, bytes]):
        self.claim = claim
        self.limit = limit
        self.limit_text = str(limit).encode()
        self.storage = storage
        self.storage_timed = (storage[0] + b"!", storage[1])
        """The storage arguments of a call that needs the Redis time (``"hash!"``/``"key!"``)."""
        self.fast = limit < EXACT
        """Whether ``dated_fast`` can serve this node (it compares counters as Lua numbers)."""


_Taken = tuple[list[V], _Day[Any], int | None]
"""What one node's take answers: the values, their day, and the Redis time they were taken at."""


class DatedGenerator(IdGenerator[V]):
    """A counter per local day (Redis time, ``tz``), with floors, purging and precreation.

    Subclasses say how a day and a counter part make a value (`compose`), how to read them
    back (`day_and_counter`), where counters live (``storage``) and the counter's range.
    """

    floor_arguments = ("day",)
    storage: str
    """``"hash"``: one hash per namespace, a field per day; ``"key"``: one expiring key per day."""
    _cipher: CounterPermutation | None = None
    """The permutation of a day's counters (``secret=``; see `permute`), or None."""

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
        self.days_key = (
            self._store_key() if self.storage == "key" else self.keys.key(self.strategy, "days")
        )
        """The set of day labels that have had a counter: a day in it whose counter is missing
        (and not purged) vanished, evicted or deleted, and is never re-created at 0 unseen."""
        self._storage_args = (self.storage.encode(), str(grace_ms).encode())
        self._per_node: list[_NodeArgs | None] = [None] * len(nodes)
        self._prepared: _Window[Any] | None = None
        self._today: list[str] = [""] * len(nodes)
        """Per node, the label of the day its last call was answered for: ``dated_fast`` asks
        for it (nodes whose clocks straddle midnight answer different days)."""
        self._parts: dict[date, Any] = {}

    # -- what subclasses define -------------------------------------------------------------

    @abstractmethod
    def compose(self, day: date, counter: int) -> V:
        """The value of counter part ``counter`` on ``day``."""

    def compose_all(self, day: date, counters: range) -> list[V]:
        """The values of ``counters`` on ``day`` (subclasses compute the day's part once)."""
        return [self.compose(day, counter) for counter in counters]

    def _day_part(self, day: date) -> Any:
        """What `_compose` needs of ``day`` (a prefix number, a code's head), computed once
        per day; by default the day itself."""
        return day

    def _compose(self, part: Any, first: int, n: int, step: int) -> list[V]:
        """The values of counter parts ``first, first + step, …`` (``n`` of them) of the day
        whose `_day_part` is ``part``."""
        return self.compose_all(part, range(first, first + n * step, step))

    def _part(self, day: date) -> Any:
        """`_day_part` of ``day``, cached."""
        parts = self._parts
        found = parts.get(day, parts)
        if found is parts:
            if len(parts) >= MAX_CACHED_DAYS:
                parts.clear()
            found = parts[day] = self._day_part(day)
        return found

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

    def _take_plan(self, n: int) -> Plan[list[V]]:
        return self._spread_plan(n, self._values_on)

    def _values_on(self, node: Node, n: int) -> Plan[list[V]]:
        taken = yield from self._take_on(node, n)
        return taken[0]

    def _take_block(self, n: int) -> DatedBlock[V]:
        """``n`` values of the current day in one round trip (more only on a window miss or seeding)."""
        return run_plan(self._take_block_plan(n))

    def _take_block_plan(self, n: int) -> Plan[DatedBlock[V]]:
        """The plan of `_take_block` (for a buffer on the asyncio driver)."""
        values, day, now_ms = yield from self._call_plan(
            lambda node: self._take_on(node, n, timed=True)
        )
        if now_ms is None:  # pragma: no cover - a timed call always answers the Redis time
            raise ScriptError("dated_take answered no Redis time", namespace=self.namespace)
        return DatedBlock(day.day, values, now_ms, day.end_ms)

    def _take_on(self, node: Node, n: int, *, timed: bool = False) -> Plan[_Taken[V]]:
        """``n`` values of the day on ``node`` (more round trips to read or seed a floor);
        ``timed``: the Redis time is needed too (else it may be None). A generator that knows
        only its secret's fingerprint is refused before any counter is taken."""
        require_key(self._cipher, self.namespace)
        return self._with_floor_read_once(node, lambda: self._attempt(node, n, timed))

    def _node_args(self, node: Node) -> _NodeArgs:
        """What ``dated_take`` is told about ``node`` on every call (built once per node)."""
        found = self._per_node[node.index]
        if found is None:
            claim = self.claim_for(node)
            limit = node.counter_through(self.start, self.counter_max)
            found = self._per_node[node.index] = _NodeArgs(claim, limit, self._storage_args)
        return found

    def _window(self) -> _Window[Any]:
        """The current day window with its keys, arguments and days (built once per window)."""
        window = self.clock.window
        prepared = self._prepared
        if prepared is None or prepared.window is not window:
            prepared = self._prepared = _Window(self, window)
        return prepared

    def _attempt(self, node: Node, n: int, timed: bool = False) -> Plan[_Taken[V]]:
        index = node.index
        fixed: _NodeArgs = self._node_args(node)
        limit = fixed.limit
        high = self.high
        floor = FLOOR_NONE if self.implied_floor is None else FLOOR_LATER
        if self._floor is not None:
            floor = FLOOR_ASK if high.consulted(index) else FLOOR_FIRST
        mark: tuple[str, int] | None = high.mark(index)
        guard_label, guard = ("", 0) if mark is None else mark
        if fixed.fast and not timed and floor != FLOOR_FIRST and high.identities[index]:
            taken = yield from self._short_call(node, fixed, n, floor, mark)
            if taken is not None:
                return taken
        for _ in range(ATTEMPTS):
            window: _Window[Any] = self._window()
            guard_text, heal_text, _ = heal_args(
                guard,
                self.headroom + high.drift(index, self.drift_most, guard_label),
                limit,
                ask=False,
                floor_read=floor == FLOOR_GIVEN,
            )
            reply = yield Run(
                node,
                "dated_take",
                window.keys,
                [
                    n,
                    high.seen_with(index, fixed.claim),
                    fixed.limit_text,
                    floor,
                    *(fixed.storage_timed if timed else fixed.storage),
                    guard_label,
                    guard_text,
                    heal_text,
                    *window.args,
                ],
            )
            if type(reply) is int:  # (counter * days + day) of a sound counter
                counter, position = divmod(reply, len(window.days))
                day = window.days[position]
                self._today[index] = day.label
                high.saw(index, (day.label, counter))
                return self._taken(node, n, day, counter, floor, None)
            if isinstance(reply, (bytes, str)):  # the ok reply (``ok_reply``): its parts
                label, after, now_text, _end, healed, identity = check_reply(
                    reply, namespace=self.namespace, node=node
                )
                answered = window.positions.get(label)
                if answered is None:  # pragma: no cover - the script picks one of the window's days
                    raise ScriptError(
                        f"dated_take answered the day {label!r}, not one of the window's",
                        namespace=self.namespace,
                        node=node.name,
                    )
                counter, now_ms = int(after), int(now_text)
                self._today[index] = window.days[answered].label
                if healed:
                    high.healed(node.name, reply_text(healed), str(counter - n))
                high.answered(index, identity, (window.days[answered].label, counter))
                if answered == window.last:  # the day changed: move the window on with it
                    self.clock.recenter(now_ms)
                return self._taken(node, n, window.days[answered], counter, floor, now_ms)
            try:
                check_reply(
                    reply, namespace=self.namespace, node=node, claim=fixed.claim, limit=limit
                )
            except OutOfWindow as exc:
                self.clock.recenter(exc.now_ms)
                continue
            except NeedsFloor as exc:
                found, current = exc.detail
                day_found = label_day(found)
                if current:  # the counter exists: read the floor of its day and guard with it
                    seen = guard if found == guard_label else 0
                    read = yield from self._floor_counter(node, day_found)
                    guard_label, guard = found, max(seen, read)
                    floor = FLOOR_GIVEN
                else:  # the day has no counter: seed it from the floor under the day's lock
                    try:
                        yield from self._seed([node], day_found)
                    except LockNotAcquired as exc:
                        if len(self._nodes) == 1:
                            raise
                        raise RedisUnavailable(  # another node can answer meanwhile
                            f"another process holds this node's lock of {day_found} (it is "
                            "seeding it)",
                            namespace=self.namespace,
                            node=node.name,
                        ) from exc
                    high.set_consulted(index)
                    floor = FLOOR_ASK
                continue
            raise ScriptError(  # pragma: no cover - check_reply raises for every other reply
                f"unexpected dated_take reply {reply!r}", namespace=self.namespace, node=node.name
            )
        raise ScriptError(
            f"no value after {ATTEMPTS} attempts: the Redis clock kept leaving the day window "
            "or the day's counter kept disappearing",
            namespace=self.namespace,
            node=node.name,
        )

    def _short_call(
        self, node: Node, fixed: _NodeArgs, n: int, floor: str, mark: tuple[str, int] | None
    ) -> Plan[_Taken[V] | None]:
        """``n`` values of the day the last call was answered for, by ``dated_fast`` (few
        arguments); None when it missed (nothing taken: `_attempt` calls ``dated_take``).

        Only for a node whose identity this process knows (else no marker can match), a floor
        that needs no first reading, and a call that needs no Redis time: the script takes only
        a sound counter, which ``dated_take`` would take alike with floor "none", "ask" or "given".
        ``mark``: the highest (day label, counter) this process received from the node.
        """
        index = node.index
        high = self.high
        window: _Window[Any] = self._window()
        day = window.middle
        today = self._today[index]
        if today != day.label:
            position = window.positions.get(today)
            if position is not None:
                day = window.days[position]
        if day.fast is None:
            return None
        counter_key, (label, start, end) = day.fast
        guard = mark[1] if mark is not None and mark[0] == day.label else 0
        if self.storage == "hash":  # a field that was missing (or 0) ends at n: never taken
            guard = max(guard, 1)
        reply = yield Run(
            node,
            "dated_fast",
            (*window.fast_keys, counter_key),
            [
                n,
                high.seen_with(index, fixed.claim),
                label,
                fixed.storage[0],
                start,
                end,
                n + guard,
                fixed.limit_text,
            ],
        )
        if type(reply) is not int:
            return None
        high.saw(index, (day.label, reply))
        return self._taken(node, n, day, reply, floor, None)

    def _taken(
        self, node: Node, n: int, day: _Day[Any], counter: int, floor: str, now_ms: int | None
    ) -> _Taken[V]:
        """The ``n`` values of ``day`` below ``counter`` (after taking them) on ``node``."""
        self._check_day(day.day)
        if floor == FLOOR_GIVEN:
            self.high.set_consulted(node.index)
        self.high.pace(node.index, counter, day.label)
        step = node.count
        first = self.start + (counter - n) * step + node.index
        return self._compose(day.part, first, n, step), day, now_ms

    def _floor_counter(self, node: Node, day: date) -> Plan[int]:
        """The counter of ``node`` above which every value of ``day`` is above the floor."""
        used = yield from self._read_floor(day)
        return node.counter_through(self.start, used)

    # -- first-of-day seeding ----------------------------------------------------------------

    def _lock_name(self, day: date) -> str:
        return f"{self.namespace}.{self.strategy}.{day_label(day)}"

    def _exists(self, node: Node, day: date) -> Plan[bool]:
        label = day_label(day)

        def action(node: Node) -> Plan[bool]:
            if self.storage == "hash":
                found = yield Command(node, "hexists", self._store_key(), label)
            else:
                found = yield Command(node, "exists", self._day_key(label))
            return bool(found)

        return self._nodes.on_plan(node, self.namespace, action)

    def _seed(self, nodes: list[Node], day: date) -> Plan[list[Node]]:
        """Create ``day``'s counter on each of ``nodes`` that lacks it; returns the nodes seeded.

        Without a floor the counter starts at 0. With one, each node on its own under the Redlock
        of ``(namespace, day)`` taken on that node alone (node k's counter is node k's: no other
        node need agree, so one node down does not stop the others): check again, read the floor,
        and set the counter so its next value is above the floor (only if still absent: the
        script checks atomically).
        """
        seeded: list[Node] = []
        if self._floor is None:
            for node in nodes:
                before, _ = yield from self._set(node, day, 0, "init")
                if before is None:
                    seeded.append(node)
            return seeded
        if self._locker is None:
            raise ConfigError(
                "floor= needs a lock for the first-of-day initialisation; build the generator "
                "with RedisIds.date_prefixed or RedisIds.daily_code",
                namespace=self.namespace,
            )
        if self._nodes.asynchronous:  # no thread lock across a yield on the asyncio driver
            for node in nodes:
                if (yield from self._seed_from_floor(node, day)):
                    seeded.append(node)
            return seeded
        with self.high.seeding:  # one thread per process goes for the Redlock; the others wait
            for node in nodes:
                if (yield from self._seed_from_floor(node, day)):
                    seeded.append(node)
        return seeded

    def _seed_from_floor(self, node: Node, day: date) -> Plan[bool]:
        """Seed ``node``'s counter of ``day`` from the floor under the day's lock on ``node``."""
        if (yield from self._exists(node, day)):
            return False
        assert self._locker is not None
        lock = self._locker(self._lock_name(day), [node])
        return (yield from lock.holding(lambda: self._seed_locked(node, day)))

    def _seed_locked(self, node: Node, day: date) -> Plan[bool]:
        """Under the day's lock: check again, then seed ``node``'s counter of ``day``."""
        if (yield from self._exists(node, day)):
            return False
        yield from self._refuse_purged(node, day)  # a purged day fails here, before a query
        used = yield from self._read_floor(day)
        return (yield from self._seed_one(node, day, used))

    def _seed_one(self, node: Node, day: date, used: int) -> Plan[bool]:
        """Create ``node``'s counter of ``day`` above the floor ``used`` (plus the headroom when
        the day already has values: they may be followed by values not yet in the database).

        After a loss the counter is healed as the script heals one below this process's mark:
        above the floor and the mark of the day, by the headroom plus the mark's drift. The
        floor alone does not hold what was drawn after an earlier heal and not committed yet
        (those values lie a headroom above it), so a second loss soon after a first would
        otherwise seed below them."""
        limit = node.counter_through(self.start, self.counter_max)
        counter = node.counter_through(self.start, used)
        label = day_label(day)
        room = self.headroom
        mark: tuple[str, int] | None = self.high.mark(node.index)
        if mark is not None and mark[0] == label:
            counter = max(counter, mark[1])
            room += self.high.drift(node.index, self.drift_most, label)
        _, seeded, _ = heal_args(counter, room, limit, ask=False)
        _, vanished, _ = heal_args(counter, room, limit, ask=False, floor_read=True)
        before, _ = yield from self._set(node, day, int(seeded), "seed", vanished=int(vanished))
        return before is None

    def _refuse_purged(self, node: Node, day: date) -> Plan[None]:
        label = day_label(day)

        def action(node: Node) -> Plan[Any]:
            return (yield Command(node, "get", self.purge_key))

        marker = yield from self._nodes.on_plan(node, self.namespace, action)
        if marker is not None and label <= reply_text(marker):
            raise DayPurged(
                f"day {label} is at or before the purge marker {reply_text(marker)}",
                namespace=self.namespace,
                node=node.name,
            )

    def _read_floor(self, day: date) -> Plan[int]:
        return self._highest_used(day, what="the highest counter used that day")

    def _set(
        self, node: Node, day: date, counter: int, mode: str, *, vanished: int | None = None
    ) -> Plan[tuple[int | None, int]]:
        """Run ``dated_set`` on ``node`` (mode "init", "seed" or "raise"; ``vanished``: the value
        "seed" sets instead when the day's key vanished); ``(before or None, after)``."""

        def action(node: Node) -> Plan[tuple[int | None, int]]:
            claim = self.claim_for(node)
            keys = [self.purge_key, self.claim_key, self.identity_key, self._store_key()]
            keys.append(self._day_key(day_label(day)) if self.storage == "key" else self.days_key)
            reply = yield Run(
                node,
                "dated_set",
                keys,
                [
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

        return self._nodes.on_plan(node, self.namespace, action)

    # -- maintenance and reseeding -------------------------------------------------------------

    @planned
    def precreate(self, day: date) -> Plan[bool]:
        """Create ``day``'s counter on every node now if it is missing (seeded from the floor,
        under the first-of-day lock, when ``floor=`` is set). True if any node's was created.

        A node that cannot be reached (or whose day lock stays held) is skipped with a warning
        on the ``sa_redis_ids`` logger: it creates its counter at its first call of the day.
        Only when no node could be reached does it raise [`RedisUnavailable`][sa_redis_ids.RedisUnavailable]
        (with each node's error). Raises [`DayPurged`][sa_redis_ids.DayPurged] for a day at or
        before the purge marker, and ``TypeError``/``ValueError`` for what is not a ``date`` of
        [`day_range`][sa_redis_ids.generators.day_counter.DatedGenerator.day_range].
        """
        first, last_day = self.day_range()
        return self._precreate(check_day("day", day, first=first, last=last_day))

    def _precreate(self, day: date) -> Plan[bool]:
        created = False
        errors: dict[str, BaseException] = {}
        last: BaseException | None = None
        for node in self._nodes.nodes:
            try:
                created = bool((yield from self._seed([node], day))) or created
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

    @planned
    def purge_before(self, day: date) -> Plan[list[date]]:
        """Delete every day strictly older than ``day`` on every node and raise the purge marker
        to the day before ``day`` (never lower it). Returns the days whose counters were deleted.

        ``day`` is a ``date`` from 1000-01-02 to 9999-12-31 (``TypeError``/``ValueError`` otherwise).
        """
        day = self._purge_day(day)
        return self._purge(day_label(day - timedelta(days=1)))

    def _purge(self, last: str) -> Plan[list[date]]:
        deleted: set[str] = set()
        for labels in (
            yield from self._nodes.each_plan(
                self.namespace, lambda node: self._purge_on(node, last)
            )
        ):
            deleted.update(labels)
        return sorted(label_day(label) for label in deleted)

    def _purge_on(self, node: Node, last: str) -> Plan[list[str]]:
        store = self._store_key()
        if self.storage == "hash":
            reply = yield Run(
                node, "dated_purge", [self.purge_key, store, self.days_key], [last, "hash"]
            )
            return [
                reply_text(label)
                for label in check_reply(reply, namespace=self.namespace, node=node)[1:]
            ]
        # Raise the marker first: from then on no day <= last is created, so the index is complete.
        check_reply(
            (yield Run(node, "dated_purge", [self.purge_key, store], [last, "key"])),
            namespace=self.namespace,
            node=node,
        )
        members: list[str] = [
            reply_text(label) for label in (yield Command(node, "smembers", store))
        ]
        labels: list[str] = sorted(label for label in members if label <= last)
        if not labels:
            return []
        reply = yield Run(
            node,
            "dated_purge",
            [self.purge_key, store, *map(self._day_key, labels)],
            [last, "key", *labels],
        )
        return [
            reply_text(label)
            for label in check_reply(reply, namespace=self.namespace, node=node)[1:]
        ]

    @planned
    def days_present(self) -> Plan[list[date]]:
        """The days that have a counter on any node, oldest first."""
        found: set[str] = set()
        for labels in (yield from self._nodes.each_plan(self.namespace, self._days_on)):
            found.update(labels)
        return sorted(label_day(label) for label in found)

    def _days_on(self, node: Node) -> Plan[list[str]]:
        if self.storage == "hash":
            return [
                reply_text(label) for label in (yield Command(node, "hkeys", self._store_key()))
            ]
        labels = [
            reply_text(label) for label in (yield Command(node, "smembers", self._store_key()))
        ]
        present: list[str] = []
        for label in labels:
            if (yield Command(node, "exists", self._day_key(label))):
                present.append(label)
        return present

    @planned
    def purged_through(self) -> Plan[date | None]:
        """The last day purged (the highest purge marker over the nodes), or None."""

        def action(node: Node) -> Plan[Any]:
            return (yield Command(node, "get", self.purge_key))

        found = yield from self._nodes.each_plan(self.namespace, action)
        markers = [reply_text(marker) for marker in found if marker is not None]
        return label_day(max(markers)) if markers else None

    @planned
    def ensure_at_least(self, value: V) -> Plan[list[tuple[str, int | None, int]]]:
        """Make sure nothing ``<= value`` of ``value``'s day is issued again (counters only rise).

        Used to reseed Redis from a table's current maximum. Every node is raised (all must be
        reachable). Returns ``(node, counter before or None, counter after)`` per node.

        A node that records another claim (other ``fmt``, ``length``, ``start``, ``digits``,
        ``tz``…, another node list) raises [`ConfigError`][sa_redis_ids.ConfigError] before any node
        changes; a node without a claim records ours together with the day's counter.
        """
        day, used = self.day_and_counter(value)
        return self._raise_to(day, used)

    def _raise_to(self, day: date, used: int) -> Plan[list[tuple[str, int | None, int]]]:
        yield from self._check_claims()
        result: list[tuple[str, int | None, int]] = []
        for node in self._nodes.nodes:
            counter = node.counter_through(self.start, used)
            limit = node.counter_through(self.start, self.counter_max)
            # a day whose counter vanished is raised above the value by the headroom, as a heal
            _, vanished, _ = heal_args(counter, self.headroom, limit, ask=False)
            before, after = yield from self._set(
                node, day, counter, "raise", vanished=int(vanished)
            )
            if before is None and after > counter:
                self.high.healed(node.name, "", str(after), why="the day's counter vanished")
            result.append((node.name, before, after))
        return result
