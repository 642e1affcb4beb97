"""The asyncio face of a generator: the same strategy, its calls awaited on the event loop.

An [`AsyncIdGenerator`][sa_redis_ids.generators.aio.AsyncIdGenerator] wraps a generator built on ``redis.asyncio`` clients (by
[`AsyncRedisIds`][sa_redis_ids.asyncio.AsyncRedisIds]) and runs the very plans the sync generator runs
(see `plans`) with the asyncio driver: ``await ids.next_id()`` never
blocks the event loop and never uses a thread. Every method that talks to Redis is a coroutine
here: the generator writes each one once, as a plan (`planned`), and this front awaits it
(``await codes.purge_before(day)``, ``await short.is_taken(x)``,
``await users.ensure_at_least(n)`` …). Everything that does no I/O (``parse``, ``max_value``,
``namespace``, ``config`` …) is the wrapped generator's.

A buffered generator (``block=``) gets an `AsyncSegmentBuffer`
with the options of its thread buffer: blocks come from the same fetch, as a plan, prefetched by
an ``asyncio`` task. The generator's own (thread) buffer is never used here; ``stats()`` reports
the asyncio buffer.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

from sa_redis_ids.buffering import AsyncSegmentBuffer, BufferStats, asyncio_buffer
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.redis.plans import Plan, plan_of, run_plan_async

V = TypeVar("V", int, str)


def _plan(generator: IdGenerator[Any], name: str) -> Callable[..., Plan[Any]] | None:
    """The plan of ``generator``'s I/O method ``name`` (None: not an I/O method)."""
    return plan_of(getattr(type(generator), name, None))


class AsyncIdGenerator(Generic[V]):
    """Coroutine ``next_id()``/``next_ids(n)`` (and every other I/O method of the strategy) over
    ``generator`` (an [`IdGenerator`][sa_redis_ids.IdGenerator])."""

    def __init__(self, generator: IdGenerator[V]):
        self.generator: IdGenerator[V] = generator
        """The strategy's generator: its options, bounds and ``parse``."""
        self.buffer: AsyncSegmentBuffer[V] | None = asyncio_buffer(generator)
        """The asyncio buffer of a buffered generator (``block=``), else None."""
        self._owner: weakref.ref[asyncio.AbstractEventLoop] | None = None
        """The event loop the buffer serves (see `_buffered`)."""
        self._owning = threading.Lock()
        # A buffered strategy's own next_id/next_ids serve its thread buffer: use the base plans.
        self._next_id = _plan(generator, "next_id") or plan_of(IdGenerator.next_id)
        self._next_ids = _plan(generator, "next_ids") or plan_of(IdGenerator.next_ids)

    @property
    def share_calls(self) -> bool:
        """Whether concurrent tasks share round trips (the generator's
        [`share_calls`][sa_redis_ids.generators.base.IdGenerator.share_calls])."""
        return self.generator.share_calls

    @share_calls.setter
    def share_calls(self, value: bool) -> None:
        self.generator.share_calls = value

    async def next_id(self, *args: Any, **options: Any) -> V:
        """One new value (a snowflake takes ``shard=`` as its sync ``next_id`` does)."""
        buffer = self._buffered()
        if buffer is not None:
            return await buffer.next_id(*args, **options)
        assert self._next_id is not None
        value: V = await run_plan_async(self._next_id(self.generator, *args, **options))
        return value

    async def next_ids(self, n: int, *args: Any, **options: Any) -> list[V]:
        """``n`` new values in one Redis round trip (``[]`` for 0)."""
        buffer = self._buffered()
        if buffer is not None:
            return await buffer.next_ids(n, *args, **options)
        assert self._next_ids is not None
        values: list[V] = await run_plan_async(self._next_ids(self.generator, n, *args, **options))
        return values

    def _buffered(self) -> AsyncSegmentBuffer[V] | None:
        """The buffer, if it serves the running event loop. A buffer takes no lock, so it serves
        one loop at a time: the first that calls, until that loop closes (then the next loop
        that calls takes it over, segments and all). Meanwhile other loops (threads each running
        their own) take their values from Redis directly, as an unbuffered generator does."""
        buffer = self.buffer
        if buffer is None:
            return None
        loop = asyncio.get_running_loop()
        owner = self._owner
        if owner is not None and owner() is loop:
            return buffer
        with self._owning:
            owner = self._owner
            held = None if owner is None else owner()
            if held is loop:
                return buffer
            if held is None or held.is_closed():
                self._owner = weakref.ref(loop)
                return buffer
        return None

    def __getattr__(self, name: str) -> Any:
        """The generator's attribute ``name``; its I/O methods as coroutine functions."""
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "stats" and self.buffer is not None:
            return self._buffer_stats
        plan = _plan(self.generator, name)
        if plan is None:
            return getattr(self.generator, name)
        return self._awaited(plan)

    def _buffer_stats(self) -> BufferStats:
        """The asyncio buffer's statistics."""
        assert self.buffer is not None
        return self.buffer.stats()

    def _awaited(self, plan: Callable[..., Plan[Any]]) -> Callable[..., Coroutine[Any, Any, Any]]:
        generator = self.generator

        @functools.wraps(plan)
        async def method(*args: Any, **kwargs: Any) -> Any:
            return await run_plan_async(plan(generator, *args, **kwargs))

        return method

    def __repr__(self) -> str:
        return f"Async{self.generator!r}"
