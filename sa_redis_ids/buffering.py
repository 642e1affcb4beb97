"""Segment buffering: take IDs from Redis in blocks, hand them out from memory, prefetch the next block.

A per-ID round trip costs about as much as the INSERT it serves. With ``block=`` a generator takes a
*segment* of values in one call (``INCRBY block`` for a sequence, ``HINCRBY`` for a day's counter) and
``next_id()`` then only takes the next value of an in-memory iterator: no Redis, millions of IDs per
second in one process. With the GIL, ``next()`` on a ``range``/``list`` iterator is atomic, so the hot
path takes no lock; the lock guards everything else (switching segments, fetching, statistics), and a
free-threaded build takes it on every call.

Double buffering (Meituan Leaf's segment mode): once ``prefetch`` (default 10%) of the current segment
is used, a background thread fetches the next one, so in steady state no caller waits on Redis. At
most one fetch per buffer is in flight, and a fetched segment is only ever handed out, never replaced,
so no block is lost and threads never see the same value.

Block-size rule: when the prefetch point is reached, the consumption rate of the segment so far gives
how long a block of the current size would last. If under ``target_seconds`` the next request is
doubled; if over twice ``target_seconds`` it is halved; always within ``[min_block, max_block]``.

Expiry: a segment may carry a deadline on the buffer's clock (a date-prefixed segment expires when its
day ends by the Redis clock, translated to local time with the Redis-vs-local offset seen at fetch,
counted from the send of the request and shortened by `CLOCK_RATE_MARGIN`, so early rather
than late). An expired segment is dropped, so a block never spans two days. Each fetch reads the
Redis clock again: a block of a later day drops an earlier day's block at once, and a block of the
same day moves the deadline earlier if the Redis clock stepped forward. So a step of the Redis clock
(not a rate difference) is noticed at the next fetch, at the latest. `SegmentBuffer.end_periods`
drops the blocks of days a purge retired, including one still in flight.

Gaps: values still buffered when a process exits (or that expire, or that a forked child drops) are
never issued by anyone: they become gaps in the sequence, never duplicates.

Asyncio: `AsyncSegmentBuffer` follows the same rules on an event loop (the state and its
bookkeeping are shared, `_SegmentState`): a fetch is a plan (see `sa_redis_ids.redis.plans`)
awaited by an ``asyncio`` task, the tasks that find the buffer dry await the one fetch in flight, and
no thread is involved. `asyncio_buffer` gives one to a buffered generator on ``redis.asyncio``
clients, with the options of its thread buffer.

Floors: a block fetched where the generator's column floor could not be read (a process's first
draw outside any flush, before a flush told it the engine) may lie below values the table already
holds after a loss. The buffer remembers it (``floorless``), and `drop_floorless` drops such blocks
(gaps) when a flush, which can read the floor, is about to take values: the flush's values then
come from a fetch that reads the floor. Direct draws outside a flush keep using them, as a direct
call without a buffer would.

Fork safety: after ``os.fork()`` a child drops every buffer it inherited (its parent keeps handing
those values out) and starts with no fetch in flight, as happens under gunicorn ``--preload`` or
``multiprocessing`` with the ``fork`` start method.
"""

from __future__ import annotations

import asyncio
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from itertools import islice
from operator import length_hint
from typing import Any, Generic

from sa_redis_ids.errors import ConfigError, SequenceExhausted
from sa_redis_ids.generators.base import IdGenerator, V, check_count
from sa_redis_ids.redis.plans import Plan, now, run_plan, run_plan_async
from sa_redis_ids.validation import check_int_option, check_seconds, check_share

DEFAULT_PREFETCH = 0.1
DEFAULT_TARGET_SECONDS = 60.0
DEFAULT_MAX_BLOCK = 100_000
"""Default ceiling of the adapted block size (also bounded to 0.1% of the generator's capacity)."""
RANGE_MAX_BLOCK = 1_000_000
"""Default ceiling for strategies whose blocks are ``range`` objects (no memory per value)."""
CLOCK_RATE_MARGIN = 0.001
"""Share of a segment's lifetime its local deadline comes early: the local monotonic clock and the
Redis server's clock may run at slightly different rates (quartz drifts ~0.01 %, NTP slews at most
0.05 %), so a deadline a day away could otherwise be seconds late."""


@dataclass(frozen=True)
class Buffering:
    """Options of a segment buffer; ``block=1000`` on a factory means ``Buffering(1000)``.

    ``block`` is the first block size; it adapts between ``min_block`` (default: ``block``) and
    ``max_block`` (default: the larger of ``block`` and the strategy's ceiling, 1,000,000 for a
    sequence whose blocks are ``range`` objects and 100,000 otherwise, but at most 0.1% of what the
    generator can ever issue, so one process cannot swallow a small day's counter). ``prefetch`` is
    the share of a segment used before the next one is fetched in the background (``None``: only
    fetch when empty, and the block size stays as it is, since it adapts at the prefetch point).
    ``target_seconds`` is how long a block should last (see the module doc).
    ``clock`` (monotonic seconds) is a test seam for rate measurement and expiry.
    """

    block: int = 1000
    min_block: int | None = None
    max_block: int | None = None
    prefetch: float | None = DEFAULT_PREFETCH
    target_seconds: float = DEFAULT_TARGET_SECONDS
    clock: Callable[[], float] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Check what needs no generator: ints >= 1, a share in (0, 1), finite seconds > 0.

        The bounds that depend on the generator (at most its capacity) are checked by
        [`resolved`][sa_redis_ids.Buffering.resolved] when a generator is built with these options.
        """
        for name in ("block", "min_block", "max_block"):
            value = getattr(self, name)
            if value is not None or name == "block":
                check_int_option(name, value, low=1, high=2**63 - 1)
        if self.prefetch is not None:
            check_share("prefetch", self.prefetch, low=0.0, high=1.0, low_open=False)
        check_seconds("target_seconds", self.target_seconds)
        if self.clock is not None and not callable(self.clock):
            raise ConfigError(f"clock must be a callable returning seconds, not {self.clock!r}")

    @classmethod
    def of(cls, block: int | Buffering | None) -> Buffering | None:
        """The options a factory's ``block=`` argument stands for (``None``: no buffering)."""
        if block is None or isinstance(block, Buffering):
            return block
        return cls(block=block)

    def resolved(self, capacity: int, *, default_max: int = DEFAULT_MAX_BLOCK) -> Buffering:
        """These options validated for a generator that can issue ``capacity`` values, bounds filled."""
        capacity = max(1, capacity)
        block = _positive_int("block", self.block, capacity)
        low = block if self.min_block is None else _positive_int("min_block", self.min_block, block)
        default_high = max(block, min(default_max, capacity // 1000))
        high = default_high if self.max_block is None else self.max_block
        high = _positive_int("max_block", high, capacity)
        if high < block:
            raise ConfigError(f"max_block={high} is below block={block}")
        prefetch = self.prefetch
        if prefetch is not None and (
            isinstance(prefetch, bool)
            or not isinstance(prefetch, (int, float))
            or not 0 < prefetch < 1
        ):
            raise ConfigError(f"prefetch={prefetch!r} must be a share between 0 and 1, or None")
        target = self.target_seconds
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not target > 0:
            raise ConfigError(f"target_seconds={target!r} must be a positive number of seconds")
        return replace(
            self,
            block=block,
            min_block=low,
            max_block=high,
            prefetch=None if prefetch is None else float(prefetch),
            target_seconds=float(target),
        )

    def describe(self) -> str:
        """A short text of the options (part of a generator's ``local_config``).

        Of resolved options, equal options give equal texts (``target_seconds=60`` and ``60.0``):
        [`resolved`][sa_redis_ids.Buffering.resolved] makes the numbers floats.
        """
        return (
            f"block={self.block}[{self.min_block}..{self.max_block}],"
            f"prefetch={self.prefetch},target={self.target_seconds}s"
        )


def _positive_int(name: str, value: object, most: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an int, not {type(value).__name__}")
    if not 1 <= value <= most:
        raise ConfigError(f"{name}={value} is out of range; it must be from 1 to {most}")
    return value


@dataclass(frozen=True)
class Segment(Generic[V]):
    """Values taken from Redis in one call, and how long they stay valid.

    ``lifetime`` is in seconds from the moment the request was sent (``None``: forever). Counting
    from the send makes the local deadline early rather than late: Redis read its clock after that.
    ``period_end`` is where the segment's period ends on the source's clock (a day's block: the UTC
    ms its day ends by Redis); a segment of a later period proves that earlier periods are over.
    """

    values: Sequence[V]
    lifetime: float | None = None
    period_end: int | None = None


@dataclass(frozen=True)
class _Held(Generic[V]):
    """A fetched segment with its deadline on the buffer's clock (``inf``: none) and period."""

    values: Sequence[V]
    deadline: float
    period_end: int | None = None


@dataclass(frozen=True)
class BufferStats:
    """What a buffer did so far (in this process; a forked child starts from zero)."""

    block_size: int
    """Size of the next block it will ask for (after adaptation)."""
    ids_left: int
    """Values buffered now (current segment plus a prefetched one)."""
    blocks_taken: int
    ids_taken: int
    prefetches: int
    """Blocks fetched in the background before the buffer ran dry."""
    waits: int
    """Times a caller found nothing buffered and waited for Redis (the first call is one)."""
    blocks_dropped: int
    """Segments dropped because they expired (a date-prefixed segment at its day's end) or were
    fetched without the floor a flush then could read (see *Floors* in the module doc)."""
    ids_dropped: int
    fetch_errors: int
    """Background fetches that failed (the next caller to need values retries in the foreground)."""
    refill_ms_last: float
    refill_ms_mean: float
    refill_ms_max: float

    @property
    def ids_issued(self) -> int:
        """Values handed out so far: taken from Redis, minus those still buffered or dropped."""
        return self.ids_taken - self.ids_left - self.ids_dropped


_EMPTY: Iterator[Any] = iter(())
GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()
"""False on a free-threaded CPython build, where every draw takes the lock."""
_LIVE: weakref.WeakSet[_SegmentState[Any]] = weakref.WeakSet()

_DONE, _DIRECT, _REFILL = 0, 1, 2
"""What `_SegmentState._gather` found: the values are taken; a block or more is missing (fetch
it directly); the current segment is used up (refill, then gather again)."""


class _SegmentState(Generic[V]):
    """The bookkeeping both buffers share: segments, the prefetch claim, block-size adaptation,
    deadlines and periods, drops and statistics. No I/O and no waiting happen here.

    `SegmentBuffer` calls these methods with its lock held (``_guard`` is that lock);
    `AsyncSegmentBuffer` calls them between two ``await`` (one event loop: no lock,
    ``_guard`` does nothing). Each buffer adds only how it waits: a condition and a prefetch thread,
    or a task other tasks await. A fetch is the plan `_fetch_plan` over the buffer's
    ``_source(n)``, run by `run_plan` or ``run_plan_async``.
    """

    _guard: AbstractContextManager[Any]

    def __init__(
        self,
        options: Buffering,
        *,
        namespace: str | None,
        clock: Callable[[], float] | None,
        expiring: bool,
        floor_unread: Callable[[], bool] | None = None,
    ):
        self.options = options
        self.namespace = namespace
        self._floor_unread = floor_unread
        """Asked after each fetch, where it ran: True when it could not read a floor the
        generator is bound to (see *Floors* in the module doc)."""
        self._clock = options.clock or clock or time.monotonic
        self.expiring = expiring
        self._size = options.block
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        """Forget every buffered value and fetch; used at construction and in a forked child."""
        self._it: Iterator[V] = _EMPTY
        self._tail: Sequence[V] | None = None
        self._deadline = math.inf
        self._period_end: int | None = None
        self._ended = -math.inf
        """Periods ending at or before this were retired (`end_periods`)."""
        self._head_size = 0
        self._started = 0.0
        self._next: _Held[V] | None = None
        self._fetching = False
        self._generation = 0
        self._blocks = self._ids = self._prefetches = self._waits = 0
        self._dropped_blocks = self._dropped_ids = self._errors = 0
        self._refills = 0
        self._refill_last = self._refill_total = self._refill_max = 0.0
        self.floorless_fetches = 0
        """How many blocks were ever fetched without the floor: a flush compares it before and
        after it takes its values (`floorless` ends with whichever flush drops first)."""
        self._floorless_dropped = 0
        """`floorless_fetches` when `drop_floorless` last dropped."""

    @property
    def floorless(self) -> bool:
        """A block buffered now (or fetched since the last drop) was fetched without the floor."""
        return self.floorless_fetches != self._floorless_dropped

    def _source(self, n: int) -> Plan[Segment[V]]:
        """The plan taking one segment of up to ``n`` values (one Redis call)."""
        raise NotImplementedError

    # -- taking values ----------------------------------------------------------------------------

    def _expire(self) -> None:
        """Drop the current segment if its deadline passed."""
        if self.expiring and self._clock() >= self._deadline:
            self._drop_current()

    def _gather(self, out: list[V], n: int, prefetch: int, direct: bool) -> tuple[int, int]:
        """Move values of the current segment into ``out`` until it holds ``n``.

        Running off a head enters its tail and claims the prefetch (its size is returned, to be
        started once the lock is released; 0: none). Returns what happened and the prefetch: ``_DONE``;
        ``_DIRECT`` when ``direct`` and a block or more is missing with nothing prefetched (fetch it
        directly, handed out at once); ``_REFILL`` when the segment is used up (then gather again).
        """
        while True:
            out.extend(islice(self._it, n - len(out)))
            if len(out) >= n:
                return _DONE, prefetch
            if self._tail is not None:
                prefetch = prefetch or self._enter_tail()
            elif direct and n - len(out) >= self._size and self._next is None:
                return _DIRECT, prefetch
            else:
                if prefetch:  # the fetch claimed above has not started: the refill does it
                    self._fetching, prefetch = False, 0
                return _REFILL, prefetch

    def _install_next(self) -> bool:
        """Make the prefetched segment current (dropping it if it expired); False if none is."""
        held = self._next
        if held is None:
            return False
        self._next = None
        if self._clock() >= held.deadline:
            self._count_dropped(len(held.values))
        else:
            self._install(held)
        return True

    def _enter_tail(self) -> int:
        """Switch to the current segment's tail; adapt the block size and claim the prefetch."""
        assert self._tail is not None
        self._it = iter(self._tail)
        self._tail = None
        self._adapt()
        if self._fetching or self._next is not None:
            return 0
        self._fetching = True
        return self._size

    def _adapt(self) -> None:
        """Double or halve the next block size from the rate at which the head was used."""
        elapsed = self._clock() - self._started
        size, opts = self._size, self.options
        lasts = math.inf if self._head_size == 0 else elapsed * size / self._head_size
        if lasts < opts.target_seconds:
            size = min(size * 2, opts.max_block or size)
        elif lasts > 2 * opts.target_seconds:
            size = max(size // 2, opts.min_block or size)
        self._size = size

    def _land(self, held: _Held[V], generation: int) -> None:
        """Keep a fetched segment as the next one, unless `drop` ran since its fetch started
        or its period was retired: then it is dropped too (gaps), so no value fetched before a drop
        is handed out after it. Its fresh reading of the source's clock ends the current segment
        if that one's period is over, or moves its deadline earlier if the clock stepped forward.
        """
        end = held.period_end
        if generation != self._generation or (end is not None and end <= self._ended):
            self._count_dropped(len(held.values))
            return
        if end is not None and self._period_end is not None:
            if self._period_end < end:
                self._drop_current()
            elif self._period_end == end:
                self._deadline = min(self._deadline, held.deadline)
        self._next = held

    def _landed(self, held: _Held[V] | None, generation: int) -> None:
        """A background fetch ended: keep its segment, or count its failure (``held`` None)."""
        self._fetching = False
        if held is None:
            self._errors += 1
        else:
            self._land(held, generation)
            self._prefetches += 1

    def _install(self, held: _Held[V]) -> None:
        values = held.values
        if not isinstance(values, (range, list, tuple)):  # their iterators are C, one step each
            values = list(values)
        count = len(values)
        share = self.options.prefetch
        head = count if share is None else min(count, max(1, math.ceil(count * share)))
        if head < count:
            self._it = iter(values[:head])
            self._tail = values[head:]
        else:
            self._it = iter(values)
            self._tail = None
        self._head_size = head
        self._started = self._clock()
        self._deadline = held.deadline
        self._period_end = held.period_end

    def _drop_current(self) -> int:
        left = length_hint(self._it) + (len(self._tail) if self._tail is not None else 0)
        self._it = _EMPTY
        self._tail = None
        self._deadline = math.inf
        self._period_end = None
        self._count_dropped(left)
        return left

    def _count_dropped(self, count: int) -> None:
        if not count:
            return
        self._dropped_blocks += 1
        self._dropped_ids += count

    # -- fetching ---------------------------------------------------------------------------------

    def _fetch_plan(self, n: int, *, exact: bool = False) -> Plan[_Held[V]]:
        """One segment of up to ``n`` values; near the end of a counter, smaller ones are tried
        (``exact``: ``n`` values or [`SequenceExhausted`][sa_redis_ids.SequenceExhausted], for a batch handed out at once).
        Runs with the lock released; takes it only to record the fetch."""
        started = time.perf_counter()
        # Asked before the fetch as well as after: a flush of another thread may make the floor
        # readable here while this fetch, sent without it, is in flight.
        unread = self._floor_unread is not None and self._floor_unread()
        while True:
            sent = self._clock()
            try:
                segment = yield from self._source(n)
                break
            except SequenceExhausted:
                if n <= 1 or exact:
                    raise
                n //= 2
        spent = (time.perf_counter() - started) * 1000
        unread = unread or (self._floor_unread is not None and self._floor_unread())
        with self._guard:
            self._record(len(segment.values), spent)
            if unread:
                self.floorless_fetches += 1
        lifetime = segment.lifetime
        if lifetime is None or not self.expiring:  # only an expiring buffer honours lifetimes
            return _Held(segment.values, math.inf)
        deadline = sent + lifetime * (1 - CLOCK_RATE_MARGIN)
        return _Held(segment.values, deadline, segment.period_end)

    def _record(self, count: int, spent_ms: float) -> None:
        self._blocks += 1
        self._ids += count
        self._refills += 1
        self._refill_last = spent_ms
        self._refill_total += spent_ms
        self._refill_max = max(self._refill_max, spent_ms)

    # -- inspection and control -------------------------------------------------------------------

    def stats(self) -> BufferStats:
        with self._guard:
            left = length_hint(self._it)
            if self._tail is not None:
                left += len(self._tail)
            if self._next is not None:
                left += len(self._next.values)
            refills = self._refills
            return BufferStats(
                block_size=self._size,
                ids_left=left,
                blocks_taken=self._blocks,
                ids_taken=self._ids,
                prefetches=self._prefetches,
                waits=self._waits,
                blocks_dropped=self._dropped_blocks,
                ids_dropped=self._dropped_ids,
                fetch_errors=self._errors,
                refill_ms_last=self._refill_last,
                refill_ms_mean=self._refill_total / refills if refills else 0.0,
                refill_ms_max=self._refill_max,
            )

    def drop(self) -> int:
        """Discard every buffered value (they become gaps); returns how many were dropped.

        A fetch in flight is discarded too when it lands (a new generation): its values may have
        been taken before the drop.
        """
        with self._guard:
            self._generation += 1
            left = length_hint(self._it) + (len(self._tail) if self._tail is not None else 0)
            self._it, self._tail, self._deadline = _EMPTY, None, math.inf
            self._period_end = None
            if self._next is not None:
                left += len(self._next.values)
                self._next = None
            return left

    def drop_floorless(self) -> int:
        """Drop every buffered value if a block was fetched without the floor (see *Floors* in
        the module doc); returns how many were dropped (gaps)."""
        with self._guard:
            if not self.floorless:
                return 0
            self._floorless_dropped = self.floorless_fetches
        dropped = self.drop()
        with self._guard:
            self._count_dropped(dropped)
        return dropped

    def end_periods(self, through: int) -> int:
        """Drop every segment whose period ends at or before ``through`` (on the source's clock),
        buffered now or landing later from a fetch in flight: the source retired those periods
        (days a purge deleted). Returns how many buffered values were dropped (gaps)."""
        with self._guard:
            self._ended = max(self._ended, through)
            left = 0
            if self._period_end is not None and self._period_end <= through:
                left += self._drop_current()
            held = self._next
            if held is not None and held.period_end is not None and held.period_end <= through:
                self._next = None
                left += len(held.values)
                self._count_dropped(len(held.values))
            return left

    def _after_fork_in_child(self) -> None:
        size = self._size
        self._reset()
        self._size = size

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.namespace!r}, {self.options.describe()})"


class SegmentBuffer(_SegmentState[V]):
    """A thread-safe, fork-safe double buffer over ``fetch(n) -> Segment`` (one Redis call each).

    The hot path is ``next()`` on the current segment's iterator (plus a deadline check for
    expiring segments). A segment is split at its prefetch point into a head and a tail: running off
    the head starts the background fetch, so the hot path carries no counter.
    """

    next_id: Callable[[], V]
    """One value from the buffer (bound at construction: with or without an expiry check)."""

    def __init__(
        self,
        fetch: Callable[[int], Segment[V]],
        options: Buffering,
        *,
        namespace: str | None = None,
        clock: Callable[[], float] | None = None,
        expiring: bool = False,
        floor_unread: Callable[[], bool] | None = None,
    ):
        self._fetch_source: Callable[[int], Segment[V]] = fetch
        super().__init__(
            options, namespace=namespace, clock=clock, expiring=expiring, floor_unread=floor_unread
        )
        if expiring:
            self.next_id = self._next_expiring_unlocked if GIL else self._next_expiring
        else:
            self.next_id = self._next_unlocked if GIL else self._next_plain

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._guard = self._lock
        super()._reset()

    def _source(self, n: int) -> Plan[Segment[V]]:
        return now(self._fetch_source, n)

    # -- hot path ---------------------------------------------------------------------------------

    def _next_unlocked(self) -> V:
        """With a GIL, ``next()`` on a ``range``/``list`` iterator is one C call no other thread
        can interleave with: each value is yielded once, so only running dry takes the lock.

        A thread that read ``self._it`` just before another replaced it still draws from the old
        iterator, whose values nobody else can draw: late, never twice. (Free-threaded builds take
        the lock on every call: `_next_plain`.)
        """
        for value in self._it:
            return value
        return self._next_plain()

    def _next_expiring_unlocked(self) -> V:
        """As `_next_unlocked`, after checking the segment's deadline. A value drawn by a
        thread that passed the check just before another dropped the segment is issued at the
        deadline, like a call that started just before it."""
        if self._clock() < self._deadline:
            for value in self._it:
                return value
        return self._next_expiring()

    def _next_plain(self) -> V:
        lock = self._lock
        lock.acquire()
        try:
            for value in self._it:
                return value
            value, prefetch = self._take_slow()
        finally:
            lock.release()
        if prefetch:
            self._start_prefetch(prefetch)
        return value

    def _next_expiring(self) -> V:
        lock = self._lock
        lock.acquire()
        try:
            self._expire()
            for value in self._it:
                return value
            value, prefetch = self._take_slow()
        finally:
            lock.release()
        if prefetch:
            self._start_prefetch(prefetch)
        return value

    def next_ids(self, n: int) -> list[V]:
        """``n`` values: the buffer's first, then a direct fetch for a shortfall of a block or more.

        Exactly ``n`` values or an error ([`SequenceExhausted`][sa_redis_ids.SequenceExhausted] when the counter or the day
        runs out), never fewer: on an error the values this call already took are dropped (gaps).
        """
        if check_count(n) == 0:
            return []
        prefetch = 0
        waited = False
        out: list[V] = []
        step = _DONE
        with self._lock:
            try:
                if self.expiring and self._clock() >= self._deadline:
                    self._drop_current()
                out.extend(islice(self._it, n))  # all of them, mostly: no call below
                while len(out) < n:
                    step, prefetch = self._gather(out, n, prefetch, True)
                    if step == _DIRECT:
                        break
                    if step == _REFILL:
                        waited = self._refill() or waited
            except BaseException:
                self._count_dropped(len(out))
                raise
            if waited:
                self._waits += 1
        if prefetch:
            self._start_prefetch(prefetch)
        if step == _DIRECT:
            try:
                out.extend(self._fetch(n - len(out), exact=True).values)  # handed out at once
            except BaseException:
                with self._lock:
                    self._count_dropped(len(out))
                raise
        return out

    # -- slow path (lock held) --------------------------------------------------------------------

    def _take_slow(self) -> tuple[V, int]:
        """The current iterator is empty: move to the tail (starting a prefetch) or the next segment.

        Returns the value and the size of a prefetch to start once the lock is released (0: none).
        """
        out: list[V] = []
        prefetch = 0
        waited = False
        while True:
            step, prefetch = self._gather(out, 1, prefetch, False)
            if step == _DONE:
                break
            waited = self._refill() or waited
        if waited:
            self._waits += 1
        return out[0], prefetch

    def _refill(self) -> bool:
        """Make progress towards a current segment; the current one is used up.

        Installs the prefetched segment (dropping it if expired), or waits for the fetch in flight,
        or fetches now with the lock released. Returns True if it waited on Redis. The caller looks
        at the current segment again afterwards: while this waited, another thread may have
        installed one, which must not be replaced (its values would be lost).
        """
        if self._install_next():
            return False
        if self._fetching:
            self._cond.wait()
            return True
        self._fetching = True
        size, generation = self._size, self._generation
        self._lock.release()
        try:
            fetched = self._fetch(size)
        finally:
            self._lock.acquire()
            self._fetching = False
            self._cond.notify_all()
        self._land(fetched, generation)
        return True

    # -- fetching ---------------------------------------------------------------------------------

    def _fetch(self, n: int, *, exact: bool = False) -> _Held[V]:
        """`_fetch_plan` in this thread (the lock released)."""
        return run_plan(self._fetch_plan(n, exact=exact))

    def _start_prefetch(self, size: int) -> None:
        """Run the fetch claimed under the lock in a new daemon thread.

        A fresh thread per block (a few per second at most) rather than a waiting worker: starting a
        thread hands it the GIL at once, so the request is on the wire before the caller goes on,
        where a woken worker could wait a whole GIL switch interval behind a busy caller.
        """
        thread = threading.Thread(
            target=self._prefetch, args=(size,), name=f"sa_redis_ids-prefetch-{self.namespace}"
        )
        thread.daemon = True
        try:
            thread.start()
        except RuntimeError:  # no thread at interpreter shutdown: the next dry caller fetches
            with self._lock:
                self._fetching = False
                self._cond.notify_all()

    def _prefetch(self, size: int) -> None:
        generation = self._generation  # read before the request is sent
        try:
            held: _Held[V] | None = self._fetch(size)
        except BaseException:  # the caller that runs dry retries in the foreground and sees it
            held = None
        with self._lock:
            self._landed(held, generation)
            self._cond.notify_all()

    def settle(self, timeout: float | None = None) -> bool:
        """Wait until no fetch is in flight (tests, benchmarks); False if ``timeout`` passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._fetching, timeout)


class AsyncSegmentBuffer(_SegmentState[V]):
    """`SegmentBuffer` on an event loop: coroutine ``next_id()``/``next_ids(n)`` over
    ``fetch_plan(n)``, a plan answering a `Segment` (see `plan_source`).

    The same segments, prefetch point, block-size rule, deadlines, drops and statistics (the
    shared `_SegmentState`), but every fetch is an ``asyncio`` task awaiting the plan with
    `run_plan_async`: no thread, nothing blocks the loop. At most
    one fetch is in flight: tasks that find the buffer dry await it and never start another. A
    prefetch that fails is counted (``fetch_errors``) and retried by the next dry caller in the
    foreground; a foreground fetch that fails raises in the task that started it, and the tasks
    waiting on it try again. A caller cancelled while it waits leaves the fetch running: its
    segment lands for the others.

    Use one buffer from one event loop (it takes no lock). A forked child drops what it inherited.
    """

    def __init__(
        self,
        fetch_plan: Callable[[int], Plan[Segment[V]]],
        options: Buffering,
        *,
        namespace: str | None = None,
        clock: Callable[[], float] | None = None,
        expiring: bool = False,
        floor_unread: Callable[[], bool] | None = None,
    ):
        self._fetch_plan_source: Callable[[int], Plan[Segment[V]]] = fetch_plan
        super().__init__(
            options, namespace=namespace, clock=clock, expiring=expiring, floor_unread=floor_unread
        )

    def _reset(self) -> None:
        self._guard = nullcontext()
        self._task: asyncio.Task[BaseException | None] | None = None
        """The fetch in flight (a strong reference: the loop keeps only a weak one)."""
        super()._reset()

    def _source(self, n: int) -> Plan[Segment[V]]:
        return self._fetch_plan_source(n)

    async def next_id(self) -> V:
        """One value from the buffer."""
        if not self.expiring or self._clock() < self._deadline:
            for value in self._it:
                return value
        return (await self._take(1, direct=False))[0]

    async def next_ids(self, n: int) -> list[V]:
        """``n`` values: the buffer's first, then a direct fetch for a shortfall of a block or more.

        Exactly ``n`` values or an error, never fewer (as `SegmentBuffer.next_ids`).
        """
        if check_count(n) == 0:
            return []
        return await self._take(n, direct=True)

    async def _take(self, n: int, *, direct: bool) -> list[V]:
        prefetch = 0
        waited = False
        out: list[V] = []
        try:
            self._expire()
            while True:
                step, prefetch = self._gather(out, n, prefetch, direct)
                if step != _REFILL:
                    break
                waited = await self._refill() or waited
        except BaseException:
            self._count_dropped(len(out))
            raise
        if waited:
            self._waits += 1
        if prefetch:
            self._spawn(prefetch, background=True)
        if step == _DIRECT:
            try:
                out.extend((await self._fetch(n - len(out), exact=True)).values)
            except BaseException:
                self._count_dropped(len(out))
                raise
        return out

    async def _refill(self) -> bool:
        """As `SegmentBuffer._refill`: install the prefetched segment, or await the fetch in
        flight, or start one and await it. Returns True if it waited on Redis."""
        if self._install_next():
            return False
        task = self._in_flight()
        if task is not None:
            await asyncio.wait((task,))  # neither raises its error nor cancels it
            return True
        self._fetching = True
        error = await asyncio.shield(self._spawn(self._size, background=False))
        if error is not None:
            raise error
        return True

    def _in_flight(self) -> asyncio.Task[BaseException | None] | None:
        task = self._task
        if task is not None and (task.done() or task.get_loop() is not asyncio.get_running_loop()):
            self._task, self._fetching = None, False  # left by a loop that is gone
            return None
        return task

    def _spawn(self, size: int, *, background: bool) -> asyncio.Task[BaseException | None]:
        """Start the fetch claimed (``_fetching``) as the task in flight."""
        task = asyncio.get_running_loop().create_task(
            self._fetch_task(size, background), name=f"sa_redis_ids-fetch-{self.namespace}"
        )
        self._task = task
        return task

    async def _fetch_task(self, size: int, background: bool) -> BaseException | None:
        """Fetch and land a segment; the error of a foreground fetch is returned, not raised, so
        its starter raises it (and a starter cancelled meanwhile leaves no unretrieved error)."""
        generation = self._generation  # read before the request is sent
        held: _Held[V] | None = None
        error: BaseException | None = None
        try:
            held = await self._fetch(size)
        except Exception as exc:
            error = exc
        finally:
            if self._task is asyncio.current_task():
                self._task = None
            if background:
                self._landed(held, generation)
            else:
                self._fetching = False
                if held is not None:
                    self._land(held, generation)
        return error

    async def _fetch(self, n: int, *, exact: bool = False) -> _Held[V]:
        """`_fetch_plan` on the event loop."""
        return await run_plan_async(self._fetch_plan(n, exact=exact))

    async def settle(self) -> None:
        """Wait until no fetch is in flight (tests, benchmarks)."""
        task = self._in_flight()
        while task is not None:
            await asyncio.wait((task,))
            task = self._in_flight()


def _drop_buffers_in_child() -> None:
    for buffer in list(_LIVE):
        buffer._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_drop_buffers_in_child)


def _day_segment(block: Any) -> Segment[Any]:
    """The segment of a date-keyed generator's ``DatedBlock``: it lives until its day ends."""
    lifetime = (block.day_end_ms - block.redis_now_ms - 1) / 1000
    return Segment(block.values, lifetime=lifetime, period_end=block.day_end_ms)


def day_source(generator: Any) -> tuple[Callable[[int], Segment[Any]], Callable[[], float]]:
    """The ``fetch`` and the clock of a buffer over a date-keyed generator's ``_take_block(n)``.

    Each block says the Redis time it was taken at and the UTC ms its day ends, so its lifetime is
    ``day_end_ms − redis_now_ms − 1`` ms (Redis ``TIME`` is truncated to the ms: it may have been
    1 ms later): the buffer drops it at the day change by its own clock, without asking Redis
    again. The clock is the generator's Redis clock (``time.monotonic()`` unless a test moved it
    with [`sa_redis_ids.testing.shift_time`][sa_redis_ids.testing.shift_time]), so moving Redis time past midnight moves the
    buffer's deadline check with it.
    """

    def fetch(n: int) -> Segment[Any]:
        return _day_segment(generator._take_block(n))

    return fetch, generator.redis_clock.monotonic


def day_plan_source(
    generator: Any,
) -> tuple[Callable[[int], Plan[Segment[Any]]], Callable[[], float]]:
    """`day_source` as a plan over the generator's ``_take_block_plan(n)`` (asyncio buffer)."""

    def fetch(n: int) -> Plan[Segment[Any]]:
        block = yield from generator._take_block_plan(n)
        return _day_segment(block)

    return fetch, generator.redis_clock.monotonic


def plan_source(generator: BufferedGenerator[V]) -> Callable[[int], Plan[Segment[V]]]:
    """The plan form of a buffered generator's ``fetch``: its day's blocks for a date-keyed one
    (an expiring buffer), its counter's blocks for a sequence."""
    buffer = generator.buffer
    if buffer is not None and buffer.expiring:
        return day_plan_source(generator)[0]
    fetch: Callable[[int], Plan[Segment[V]]] = generator._take_block_plan  # type: ignore[attr-defined]
    return fetch


def asyncio_buffer(generator: IdGenerator[V]) -> AsyncSegmentBuffer[V] | None:
    """An asyncio buffer beside a buffered generator's thread buffer: the same options, clock and
    expiry, its own segments (``None`` when the generator is not buffered). The generator's thread
    buffer is left alone: on ``redis.asyncio`` clients it could never fetch."""
    buffer: SegmentBuffer[V] | None = getattr(generator, "buffer", None)
    if buffer is None or not isinstance(generator, BufferedGenerator):
        return None
    made = AsyncSegmentBuffer(
        plan_source(generator),
        buffer.options,
        namespace=generator.namespace,
        clock=buffer._clock,
        expiring=buffer.expiring,
        floor_unread=generator._floor_unread,
    )
    generator.buffers.append(made)
    return made


class BufferedGenerator(IdGenerator[V]):
    """An [`IdGenerator`][sa_redis_ids.IdGenerator] that can serve ``next_id``/``next_ids`` from a `SegmentBuffer`.

    A strategy calls `_use_buffer` in its constructor with its ``block=`` option and a
    ``fetch(n) -> Segment`` of one round trip; without ``block=`` every call goes to Redis as before.
    """

    buffer: SegmentBuffer[V] | None = None
    buffers: list[_SegmentState[V]]
    """Every buffer of this generator's values: its thread buffer and the asyncio ones made for
    it (what a purge must drop days from)."""

    def _use_buffer(
        self,
        block: int | Buffering | None,
        fetch: Callable[[int], Segment[V]],
        *,
        capacity: int,
        default_max: int = DEFAULT_MAX_BLOCK,
        clock: Callable[[], float] | None = None,
        expiring: bool = False,
    ) -> None:
        """Serve values from a buffer over ``fetch`` when ``block`` is given.

        ``capacity``: how many values the generator can ever issue (per day for date-keyed ones);
        ``default_max``: the default ceiling of the adapted block size for this strategy.
        """
        self.buffers = []
        try:
            options = Buffering.of(block)
            if options is None:
                self.buffer = None
                return
            resolved = options.resolved(capacity, default_max=default_max)
        except ConfigError as exc:
            raise ConfigError(str(exc), namespace=self.namespace) from None
        buffer = SegmentBuffer(
            fetch,
            resolved,
            namespace=self.namespace,
            clock=clock,
            expiring=expiring,
            floor_unread=self._floor_unread,
        )
        self.buffer = buffer
        self.buffers.append(buffer)
        # The hot path without the method below in between: one Python frame per ID, not two.
        setattr(self, "next_id", buffer.next_id)  # noqa: B010 - mypy forbids assigning a method

    def next_id(self) -> V:
        buffer = self.buffer
        if buffer is None:
            return self._take(1)[0]
        return buffer.next_id()

    def next_ids(self, n: int) -> list[V]:
        buffer = self.buffer
        if buffer is not None:
            return buffer.next_ids(n)
        return [] if check_count(n, most=self.max_batch) == 0 else self._take(n)

    def _floor_unread(self) -> bool:
        """Whether a fetch just made here may have gone without a floor: none can be read here
        (none given, none bound yet, or a bound one not readable here) and some node's floor was
        never read in this process. A generator that is never bound keeps the mark harmlessly:
        `drop_floorless` drops only where a floor can be read."""
        if self._floor is not None:
            return False
        high = self.high
        return not all(high.consulted(index) for index in range(len(self._nodes)))

    def stats(self) -> BufferStats | None:
        """The buffer's statistics, or ``None`` when this generator is not buffered."""
        return None if self.buffer is None else self.buffer.stats()

    @property
    def local_config(self) -> str:
        return "" if self.buffer is None else self.buffer.options.describe()


def floorless(generator: IdGenerator[Any], buffer: _SegmentState[Any] | None) -> bool:
    """Whether ``buffer`` (``generator``'s thread or asyncio buffer) holds, or has fetched since
    its last drop, a block fetched without the floor, and the floor can be read here."""
    return buffer is not None and buffer.floorless and generator._floor is not None


def floorless_fetches(buffer: _SegmentState[Any] | None) -> int:
    """How many blocks ``buffer`` ever fetched without the floor (0 without a buffer): a flush
    that reads it before it drops and takes its values, and again after, knows whether a block
    fetched without the floor landed meanwhile, even if another flush has dropped it since."""
    return 0 if buffer is None else buffer.floorless_fetches


def floorless_since(
    generator: IdGenerator[Any], buffer: _SegmentState[Any] | None, fetched: int
) -> bool:
    """Whether ``buffer`` holds a block fetched without the floor (`floorless`), or fetched one
    since its count was ``fetched`` (`floorless_fetches`, read before a flush dropped and took
    its values): another thread's flush may have dropped that block already, and the values
    this flush took from it are no safer."""
    return floorless(generator, buffer) or (
        generator._floor is not None and floorless_fetches(buffer) != fetched
    )


def drop_floorless(generator: IdGenerator[Any], buffer: _SegmentState[Any] | None) -> int:
    """Before a flush takes values from ``buffer``: drop its values if a block was fetched
    without the floor and the floor can be read now (see *Floors* in the module doc). Returns
    how many values were dropped (gaps). A flush checks `floorless` again after it took its
    values: a fetch of another thread may have landed meanwhile, without the floor."""
    if buffer is None or not floorless(generator, buffer):
        return 0
    return buffer.drop_floorless()
