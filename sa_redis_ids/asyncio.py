"""``AsyncRedisIds``: the asyncio front end, on ``redis.asyncio`` clients.

The same constructors as [`RedisIds`][sa_redis_ids.RedisIds] (``from_url``, ``from_urls``,
``from_sentinel``, a client or a list of clients, ``embedded()``) and the same factories with the
same options; the generators they return are [`AsyncIdGenerator`][sa_redis_ids.generators.aio.AsyncIdGenerator] objects whose
``next_id()``/``next_ids(n)`` and every other method that talks to Redis (``ensure_at_least``,
``purge_before``, ``precreate``, ``is_taken``, ``reserve``, ``stats`` of a pool …) are
coroutines, run by the very strategy code the sync front end runs (see
`sa_redis_ids.redis.plans`), awaited on the event loop: no thread, no blocking call. A lock is
taken with ``async with ids.lock(name):``; its sync methods raise
[`ConfigError`][sa_redis_ids.ConfigError] here. ``redis_id(...)`` and ``register(...)`` accept
them for models used with ``AsyncSession``:

```python
from sa_redis_ids.asyncio import AsyncRedisIds

ids = AsyncRedisIds.from_url("redis://localhost:6379/0")
users = ids.sequence("users")
user_id = await users.next_id()
```

**Several event loops.** A ``redis.asyncio`` client belongs to the event loop that first used it
(redis-py raises ``RuntimeError`` when another loop touches it), but an ``AsyncRedisIds`` may be
used from any number of loops, one after another or at once: a sync application that runs
``asyncio.run()`` per request or per task, a test suite with a loop per test, threads that each
run their own loop. The first loop that calls uses the client the instance was given; each other
loop gets a client of its own with the same settings (pool class and size, timeouts, TLS, the
Sentinels or the cluster's nodes), opened at that loop's first call. Values stay unique over all
of them. Making the instance at import time is fine, since connections open at the first call.
Each loop's connections are closed as the loop shuts down: ``asyncio.run()``, ``asyncio.Runner``
and the usual servers and test plugins end a loop with ``loop.shutdown_asyncgens()``, which the
library uses to close them on the loop, so nothing is left for the garbage collector (no
``ResourceWarning`` under ``python -X dev``). A loop ended by a bare ``loop.close()`` leaves its
connections to the garbage collector: ``await ids.aclose()`` before closing it, which closes the
connections of the loop it runs on. A buffered generator (``block=``) keeps its buffer for one
loop at a time, the first that calls until it closes (the next loop then takes the buffer over);
meanwhile the other loops draw from Redis directly, one round trip per call.

**After a Redis restart** every method reconnects on its own: a call that finds its connection
closed (the server restarted, or a proxy closed an idle connection) is sent once more on a new
connection, and the node is not marked down for it.

The scheduled maintenance job and the command line run on the sync [`RedisIds`][sa_redis_ids.RedisIds] against the same Redis;
an asyncio application may also await a generator's ``purge_before``/``precreate`` itself.
"""

from __future__ import annotations

from typing import Any

from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.cache import Recent
from sa_redis_ids.ids import RedisIdsBase

__all__ = ["AsyncIdGenerator", "AsyncRedisIds"]


class AsyncRedisIds(RedisIdsBase):
    """Redis nodes (``redis.asyncio`` clients) plus a key prefix; the factory of asyncio
    generators. Options and guarantees are those of [`RedisIds`][sa_redis_ids.RedisIds]."""

    asynchronous = True

    def __init__(self, client: Any, **options: Any):
        super().__init__(client, **options)
        self._fronts: Recent[int, AsyncIdGenerator[Any]] = Recent(self.generators_kept)
        """The asyncio face of each generator, by its id: kept and let go as the generators are
        (a face holds its generator, so the id is not reused while the face is found)."""

    def generator(self, strategy: str, namespace: str, **options: Any) -> Any:
        """An asyncio generator of any registered strategy (see `RedisIds.generator`)."""
        return self._front(super().generator(strategy, namespace, **options))

    def _front(self, generator: IdGenerator[Any]) -> AsyncIdGenerator[Any]:
        with self._lock:
            front = self._fronts.get(id(generator))
            if front is None:
                front = AsyncIdGenerator(generator)
                self._fronts.add(id(generator), front)
            return front

    def _resize(self, kept: int) -> None:
        super()._resize(kept)
        self._fronts.resize(kept)

    def sequence(self, namespace: str, **options: Any) -> AsyncIdGenerator[int]:
        """See [`sa_redis_ids.RedisIds.sequence`][sa_redis_ids.RedisIds.sequence] for the options."""
        made: AsyncIdGenerator[int] = self.generator("sequence", namespace, **options)
        return made

    def snowflake(self, namespace: str, **options: Any) -> AsyncIdGenerator[int]:
        """See [`sa_redis_ids.RedisIds.snowflake`][sa_redis_ids.RedisIds.snowflake] for the options."""
        made: AsyncIdGenerator[int] = self.generator("snowflake", namespace, **options)
        return made

    def short_id(self, namespace: str, **options: Any) -> AsyncIdGenerator[int]:
        """See [`sa_redis_ids.RedisIds.short_id`][sa_redis_ids.RedisIds.short_id] for the options."""
        made: AsyncIdGenerator[int] = self.generator("short_id", namespace, **options)
        return made

    def date_prefixed(self, namespace: str, **options: Any) -> AsyncIdGenerator[int]:
        """See [`sa_redis_ids.RedisIds.date_prefixed`][sa_redis_ids.RedisIds.date_prefixed] for the options."""
        made: AsyncIdGenerator[int] = self.generator("date_prefixed", namespace, **options)
        return made

    def daily_code(self, namespace: str, **options: Any) -> AsyncIdGenerator[str]:
        """See [`sa_redis_ids.RedisIds.daily_code`][sa_redis_ids.RedisIds.daily_code] for the options."""
        made: AsyncIdGenerator[str] = self.generator("daily_code", namespace, **options)
        return made

    def close(self) -> None:
        """Not available on the asyncio front end: ``await ids.aclose()``."""
        raise TypeError("AsyncRedisIds is closed with: await ids.aclose()")

    async def aclose(self) -> None:
        """End this instance's metrics reports (as `RedisIds.close` does) and close every node's
        connection pool on the running event loop (another loop's pool is closed as that loop
        shuts down)."""
        self._stop_background()
        for node in self.nodes.nodes:
            await node.aclose()
