"""The asyncio face of a generator: the same strategy, its calls awaited on the event loop.

An [`AsyncIdGenerator`][sa_redis_ids.generators.aio.AsyncIdGenerator] wraps a generator built on ``redis.asyncio`` clients (by
[`AsyncRedisIds`][sa_redis_ids.asyncio.AsyncRedisIds]) and runs the very plans the sync generator runs
(see `plans`) with the asyncio driver: ``await ids.next_id()`` never
blocks the event loop and never uses a thread. Everything that does no I/O (``parse``,
``max_value``, ``namespace``, ``config`` …) is the wrapped generator's.

A buffered generator (``block=``) gets an `AsyncSegmentBuffer`
with the options of its thread buffer: blocks come from the same fetch, as a plan, prefetched by
an ``asyncio`` task. The generator's own (thread) buffer is never used here.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sa_redis_ids.buffering import AsyncSegmentBuffer, BufferStats, asyncio_buffer
from sa_redis_ids.generators.base import IdGenerator, check_count
from sa_redis_ids.redis.plans import run_plan_async
from sa_redis_ids.sharing import AsyncSharedCalls

V = TypeVar("V", int, str)


class AsyncIdGenerator(Generic[V]):
    """Coroutine ``next_id()``/``next_ids(n)`` over ``generator`` (an [`IdGenerator`][sa_redis_ids.IdGenerator])."""

    def __init__(self, generator: IdGenerator[V]):
        self.generator: IdGenerator[V] = generator
        """The strategy's generator: its options, bounds and ``parse``."""
        self.buffer: AsyncSegmentBuffer[V] | None = asyncio_buffer(generator)
        """The asyncio buffer of a buffered generator (``block=``), else None."""
        self._shared: AsyncSharedCalls[V] = AsyncSharedCalls(
            generator._take_plan, most=generator.max_batch, slots=len(generator._nodes)
        )

    @property
    def share_calls(self) -> bool:
        """Whether concurrent tasks share round trips (the generator's
        [`share_calls`][sa_redis_ids.generators.base.IdGenerator.share_calls])."""
        return self.generator.share_calls

    @share_calls.setter
    def share_calls(self, value: bool) -> None:
        self.generator.share_calls = value

    async def _take(self, n: int) -> list[V]:
        """``n`` (>= 1) values in one round trip, shared with concurrent tasks unless
        `share_calls` is off."""
        if self.generator.share_calls:
            return await self._shared.take(n)
        return await run_plan_async(self.generator._take_plan(n))

    async def next_id(self) -> V:
        """One new value."""
        buffer = self.buffer
        if buffer is not None:
            return await buffer.next_id()
        return (await self._take(1))[0]

    async def next_ids(self, n: int) -> list[V]:
        """``n`` new values in one Redis round trip (``[]`` for 0)."""
        buffer = self.buffer
        if buffer is not None:
            return await buffer.next_ids(n)
        if check_count(n, most=self.generator.max_batch) == 0:
            return []
        return await self._take(n)

    def stats(self) -> BufferStats | None:
        """The asyncio buffer's statistics, or ``None`` when the generator is not buffered."""
        return None if self.buffer is None else self.buffer.stats()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.generator, name)

    def __repr__(self) -> str:
        return f"Async{self.generator!r}"
