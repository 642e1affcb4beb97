"""Test seams: moving the Redis clock, and running an application's ``RedisIds`` on a test's
nodes. Nothing here is used by the library itself in production.

``shift_time(generator, ms)`` moves the Redis time that a generator's scripts see by ``ms``
milliseconds, so a test can cross midnight or step a clock back without touching the server.
The shift belongs to the generator's node set (every generator of one ``RedisIds`` moves
together): its scripts then run in a variant whose time function adds the shift, the day
window of date-keyed generators is rebuilt around the shifted time, and buffer deadlines follow
the same clock.

[`RedisClockControl`][sa_redis_ids.testing.RedisClockControl] does the same for whole instances (the ``redis_clock`` fixture of the
pytest plugin, `sa_redis_ids.pytest_plugin`), and `use_nodes` is what
``RedisIds.use(other)`` runs: the instance and every generator it made run on ``other``'s nodes
until the block ends.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timedelta, timezone
from typing import Any

import redis

from sa_redis_ids.buffering import asyncio_buffer
from sa_redis_ids.generators.day_window import day_start_ms, local_day, zone
from sa_redis_ids.generators.registry import Context, strategy
from sa_redis_ids.redis.connect import is_async_client, is_embedded
from sa_redis_ids.redis.nodes import RedisClock

__all__ = [
    "RedisClockControl",
    "redis_time_ms",
    "server_time_ms",
    "set_time_offset",
    "shift_time",
    "use_nodes",
]


# -- the Redis time ------------------------------------------------------------------------------


def server_time_ms(client: Any) -> int:
    """The Redis server time of ``client`` (ms since the epoch), never awaiting anything.

    Safe to call from a coroutine: the embedded Redis's time is the process clock; a sync client
    is asked ``TIME``; a ``redis.asyncio`` client's server is asked through a short-lived sync
    client to the same address (one blocking round trip, in tests only).
    """
    if is_embedded(client):
        return int(time.time() * 1000)  # fakeredis answers TIME from time.time()
    if not is_async_client(client):
        seconds, micros = client.time()
        return int(seconds) * 1000 + int(micros) // 1000
    mirror = _sync_mirror(client)
    try:
        seconds, micros = mirror.time()
    finally:
        mirror.close()
    return int(seconds) * 1000 + int(micros) // 1000


_MIRRORED = ("db", "username", "password", "socket_timeout", "socket_connect_timeout")


def _sync_mirror(client: Any) -> redis.Redis:
    """A sync client to the server of ``redis.asyncio`` client ``client``."""
    if hasattr(client, "get_nodes"):  # an asyncio RedisCluster: any of its nodes tells the time
        node = client.get_nodes()[0]
        return redis.Redis(host=node.host, port=node.port, socket_timeout=5)
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    if hasattr(pool, "service_name"):  # Sentinel: ask the sentinels for the master's address
        host, port = pool.sentinel_manager.discover_master(pool.service_name)
        options = {k: kwargs[k] for k in _MIRRORED if kwargs.get(k) is not None}
        return redis.Redis(host=host, port=port, **options)
    options = {k: kwargs[k] for k in _MIRRORED if kwargs.get(k) is not None}
    if "path" in kwargs:
        return redis.Redis(unix_socket_path=kwargs["path"], **options)
    ssl = "SSL" in getattr(pool, "connection_class", type(None)).__name__
    return redis.Redis(
        host=kwargs.get("host", "localhost"), port=kwargs.get("port", 6379), ssl=ssl, **options
    )


def redis_time_ms(generator: Any) -> int:
    """The Redis server time (ms since the epoch) of the generator's first node, unshifted.

    Works for asyncio generators too (see `server_time_ms`)."""
    return server_time_ms(generator._nodes.nodes[0].client)


def _check_ms(ms: object) -> int:
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise TypeError(f"ms must be an int, not {type(ms).__name__}")
    return ms


def set_time_offset(generator: Any, ms: int) -> None:
    """Make ``generator`` (and the other generators of its ``RedisIds``) see Redis time shifted
    by ``ms`` milliseconds from now on."""
    clock = getattr(generator, "redis_clock", None)
    if clock is None:
        raise TypeError(f"{type(generator).__name__} has no Redis clock to shift")
    clock.shift_ms = _check_ms(ms)
    day_clock = getattr(generator, "clock", None)
    if day_clock is not None and hasattr(day_clock, "recenter"):
        day_clock.recenter(redis_time_ms(generator) + ms)


@contextmanager
def shift_time(generator: Any, ms: int) -> Iterator[None]:
    """Within the block, ``generator`` sees Redis time shifted by ``ms`` milliseconds."""
    before = generator.redis_clock.shift_ms
    set_time_offset(generator, ms)
    try:
        yield
    finally:
        set_time_offset(generator, before)


class RedisClockControl:
    """Moves the Redis time every generator of some ``RedisIds`` instances sees.

    ``track(ids)`` adds an instance (a ``RedisIds``, an ``AsyncRedisIds``, or a single generator);
    every move applies to the node sets of all tracked instances, so the generators they made,
    make later, or that were pointed at them with ``other_ids.use(ids)``, all see the same time.
    The time is the server's, moved by [`offset_ms`][sa_redis_ids.testing.RedisClockControl.offset_ms]: it goes on running. Moves never touch
    the server: scripts run a variant whose time function adds the offset, day windows are
    rebuilt around the moved time, and buffered blocks expire by the moved clock.

    ``close()`` puts every tracked clock back where it was when tracked (the pytest fixture
    ``redis_clock`` does it at teardown). Safe to use from coroutines: nothing here awaits, and
    the server time is read once with a sync command (see `server_time_ms`).
    """

    def __init__(self, *targets: Any) -> None:
        self._offset = 0
        self._targets: list[Any] = []
        self._clocks: dict[int, tuple[RedisClock, int]] = {}
        """Per tracked clock: the clock and its shift before it was tracked."""
        self._client: Any = None
        """The first node's client of the first target tracked."""
        self._delta_ms: int | None = None
        """Server time minus the process clock, read once from `_client`."""
        for target in targets:
            self.track(target)

    # -- what is moved ----------------------------------------------------------------------------

    def track(self, target: Any) -> None:
        """Move ``target``'s Redis clock with this one from now on (its current offset applies
        at once). ``target``: a ``RedisIds``/``AsyncRedisIds`` or a generator."""
        clock = _clock_of(target)
        if self._client is None:  # the server whose time moves are measured from
            self._client = _nodes_of(target).nodes[0].client
        if all(target is not known for known in self._targets):
            self._targets.append(target)
        if id(clock) not in self._clocks:
            self._clocks[id(clock)] = (clock, clock.shift_ms)
        self._apply()

    def close(self) -> None:
        """Put every tracked clock back to the shift it had when tracked; track nothing more."""
        for clock, before in self._clocks.values():
            clock.shift_ms = before  # day windows that no longer fit are rebuilt by the next call
        self._targets.clear()
        self._clocks.clear()
        self._offset = 0

    # -- reading ----------------------------------------------------------------------------------

    @property
    def offset_ms(self) -> int:
        """How far the Redis time is moved (ms; negative: back)."""
        return self._offset

    def server_ms(self) -> int:
        """The Redis server time now, unmoved (ms since the epoch)."""
        if self._delta_ms is None:
            if self._client is None:  # nothing tracked yet: the process clock
                return int(time.time() * 1000)
            self._delta_ms = server_time_ms(self._client) - int(time.time() * 1000)
        return int(time.time() * 1000) + self._delta_ms

    def now_ms(self) -> int:
        """The moved Redis time now (ms since the epoch): what the scripts see."""
        return self.server_ms() + self._offset

    def now(self) -> datetime:
        """The moved Redis time now, an aware UTC datetime."""
        return datetime.fromtimestamp(self.now_ms() / 1000, tz=timezone.utc)

    def today(self, tz: str = "UTC") -> date:
        """The local day in ``tz`` (an IANA name) at the moved Redis time."""
        return local_day(self.now_ms(), zone(tz))

    # -- moving -----------------------------------------------------------------------------------

    def shift(self, ms: int) -> None:
        """Move the Redis time by ``ms`` milliseconds more (negative: back)."""
        self._offset += _check_ms(ms)
        self._apply()

    def back(self, ms: int) -> None:
        """Step the Redis time back by ``ms`` (>= 0) milliseconds, as a clock correction does:
        a snowflake generator raises ``ClockMovedBackwards`` beyond its ``tolerance_ms``.

        Any move back (``shift`` by a negative amount, ``set`` to an earlier time, ``reset``
        after a move forward) drops the blocks buffered by the tracked date-keyed generators
        (``block=``), so their next values are of the day the clock now shows."""
        if _check_ms(ms) < 0:
            raise ValueError(f"back() takes how far back, a non-negative number of ms, not {ms}")
        self.shift(-ms)

    def set(self, when: datetime) -> None:
        """Make the Redis time ``when`` (an aware datetime) now; it runs on from there."""
        if not isinstance(when, datetime):
            raise TypeError(f"set() takes an aware datetime, not {type(when).__name__}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                "set() takes an aware datetime (with tzinfo); a naive one is ambiguous"
            )
        self.set_ms(int(when.timestamp() * 1000))

    def set_ms(self, utc_ms: int) -> None:
        """Make the Redis time ``utc_ms`` (ms since the epoch) now."""
        self._offset = _check_ms(utc_ms) - self.server_ms()
        self._apply()

    def to_midnight(self, tz: str = "UTC", *, before_ms: int = 1000) -> date:
        """Put the Redis time ``before_ms`` ms before the next local midnight in ``tz`` (an IANA
        name) and return the day that midnight starts: ``shift(before_ms + 1)`` or more then
        crosses it. ``before_ms`` leaves the test that long to act in the old day (the clock runs);
        0 lands exactly on the new day."""
        if _check_ms(before_ms) < 0:
            raise ValueError(f"before_ms must be 0 or more, not {before_ms}")
        local = zone(tz)
        new_day = local_day(self.now_ms(), local) + timedelta(days=1)
        self.set_ms(day_start_ms(new_day, local) - before_ms)
        return new_day

    def reset(self) -> None:
        """Back to the server's own time (offset 0)."""
        self._offset = 0
        self._apply()

    # -- internals --------------------------------------------------------------------------------

    def _apply(self) -> None:
        went_back = False
        for clock, _ in self._clocks.values():
            went_back = went_back or self._offset < clock.shift_ms
            clock.shift_ms = self._offset
        if went_back:
            self._drop_day_blocks()
        self._recenter()

    def _drop_day_blocks(self) -> None:
        """Drop the buffered blocks of date-keyed generators: a block lives until its day ends
        on the buffer's clock, so after a step back it would still hand out the later day."""
        for target in self._targets:
            holders = [*_generators_of(target), *getattr(target, "_fronts", {}).values()]
            for holder in holders:
                buffer = getattr(holder, "__dict__", {}).get("buffer")
                if buffer is not None and buffer.expiring:
                    buffer.drop()

    def _recenter(self) -> None:
        """Rebuild the day windows of the tracked generators around their moved time (a window
        that missed would be rebuilt by the next call anyway: this saves that round trip)."""
        dated: list[tuple[Any, Any]] = [
            (generator, getattr(generator, "clock", None))
            for target in self._targets
            for generator in _generators_of(target)
        ]
        dated = [(generator, clock) for generator, clock in dated if hasattr(clock, "recenter")]
        if dated:
            server = self.server_ms()
            for generator, day_clock in dated:
                day_clock.recenter(server + generator.redis_clock.shift_ms)

    def __repr__(self) -> str:
        return f"RedisClockControl(offset_ms={self._offset}, tracking {len(self._targets)})"


def _nodes_of(target: Any) -> Any:
    nodes = getattr(target, "nodes", None)  # a RedisIds: its current node set
    if nodes is not None and hasattr(nodes, "clock"):
        return nodes
    return getattr(target, "_nodes", None)  # a generator (sync or asyncio face)


def _clock_of(target: Any) -> RedisClock:
    nodes = _nodes_of(target)
    clock = getattr(nodes, "clock", None)
    if not isinstance(clock, RedisClock):
        raise TypeError(
            f"{type(target).__name__} has no Redis clock: track a RedisIds, an AsyncRedisIds or "
            "one of their generators"
        )
    return clock


def _generators_of(target: Any) -> Iterable[Any]:
    made = getattr(target, "generators", None)
    return list(made) if made is not None else [target]


# -- running an instance on other nodes ----------------------------------------------------------


@contextmanager
def use_nodes(ids: Any, other: Any) -> Iterator[Any]:
    """What ``ids.use(other)`` runs (see [`sa_redis_ids.ids.RedisIdsBase.use`][sa_redis_ids.ids.RedisIdsBase.use]): ``ids`` and
    every generator it made or makes run on ``other``'s nodes until the block ends.

    On entry each generator of ``ids`` is built anew from its options on ``other``'s nodes (with
    ``ids``'s key prefix) and takes that state in place, so objects the application holds (models'
    ``redis_id(generator)``) keep working: new high-water marks, floors read anew, new buffers,
    the day lock over ``other``'s nodes, ``other``'s Redis clock. The values buffered before are
    dropped. On exit every generator gets back its own state (its buffer dropped again, so no
    value taken from ``other`` is handed out later); generators made inside the block are built
    anew on the nodes ``ids`` had before, and asyncio faces get new buffers.
    """
    with ids._lock:
        before_nodes, before_context = ids.nodes, ids._context
        context = Context(other.nodes, ids.prefix, ids._day_lock)
        made = dict(ids._generators.items())
        twins = {key: _rebuild(ids, key, context) for key in made}  # may raise: nothing changed yet
        saved: dict[tuple[str, str], dict[str, Any]] = {}
        fronts: dict[int, Any] = getattr(ids, "_fronts", {})
        saved_fronts = {key: front.buffer for key, front in fronts.items()}
        ids.nodes, ids._context = other.nodes, context
        for key, generator in made.items():
            _drop_buffer(generator)
            saved[key] = generator.__dict__
            generator.__dict__ = twins[key].__dict__
        for front in fronts.values():
            _drop_buffer(front)
            front.buffer = asyncio_buffer(front.generator)
    try:
        yield ids
    finally:
        with ids._lock:
            ids.nodes, ids._context = before_nodes, before_context
            for key, generator in ids._generators.items():
                _drop_buffer(generator)
                if key in saved:
                    generator.__dict__ = saved[key]
                    _drop_buffer(generator)
                else:  # made inside the block: now on the nodes ids went back to
                    generator.__dict__ = _rebuild(ids, key, before_context).__dict__
            for key, front in fronts.items():
                _drop_buffer(front)
                old = saved_fronts.get(key)
                front.buffer = old if old is not None else asyncio_buffer(front.generator)


def _rebuild(ids: Any, key: tuple[str, str], context: Context) -> Any:
    """A new generator of ``key`` (strategy, namespace) with the options ``ids`` made it with."""
    name, namespace = key
    with warnings.catch_warnings():  # warned once already, when the application made it
        warnings.simplefilter("ignore")
        return strategy(name).build(context, namespace, **ids._generators.options(key))


def _drop_buffer(holder: Any) -> None:
    """Drop what ``holder``'s buffer (a generator's or an asyncio face's) holds or will land."""
    buffer = holder.__dict__.get("buffer")
    if buffer is not None:
        buffer.drop()
