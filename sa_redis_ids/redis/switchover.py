"""Following a Sentinel switch-over: after a failed call, ask the Sentinels where the master is and
close every connection to a master they no longer name.

redis-py's ``SentinelConnectionPool`` asks the Sentinels for the master's address only when it
opens a connection. Connections already open (idle in the pool, in use, or held by a fast lane)
stay on the old master after a switch-over, and real Sentinel demotes that old master only at its
next periodic ``INFO``, about 10 s after the promotion: until then the old master takes writes
that the new one never sees. ``from_sentinel`` therefore waits for a replica by default
(``replicas=1``): once the replica is promoted it no longer acknowledges the old master, whose
values are dropped (gaps, never handed out). What this module adds is the way back: a call that
failed on a Sentinel node (no acknowledgement, a lost connection, ``READONLY`` …) asks the
Sentinels again, at most once per :data:`RECHECK_INTERVAL`; the pool then follows their answer and
its idle connections are closed. A connection in use is never closed under its caller (another
thread would read from a closed socket): the sync pool closes it when it comes back, as it no
longer leads to the master the pool follows; an asyncio pool takes it back as it is, and the next
failed call closes it among the idle ones. So calls reach the new master as soon as the Sentinels
name it, instead of waiting out the old master's demotion.

No thread and no task: the check runs in the failing call, so a forked child has nothing to
inherit but the pool (which redis-py resets after a fork) and ``close()`` has nothing to stop.
"""

from __future__ import annotations

import time
from typing import Any

import redis
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.sentinel import SentinelConnectionPool

#: Seconds between two questions to the Sentinels from one node (failed calls in between reuse
#: the last answer), so a master that is down does not turn every failed call into Sentinel load.
RECHECK_INTERVAL = 0.1

Address = tuple[str, int]


class MasterWatch:
    """The master address a Sentinel-backed client's pool last followed, and the re-check."""

    __slots__ = ("_next", "master", "pool")

    def __init__(self, pool: Any):
        self.pool = pool
        self.master: Address | None = None
        """The address the Sentinels named at the last re-check (None before the first)."""
        self._next = 0.0

    @staticmethod
    def of(client: Any) -> MasterWatch | None:
        """A watch for a client made by ``Sentinel.master_for`` (sync or asyncio); None for any
        other client."""
        pool = getattr(client, "connection_pool", None)
        if isinstance(pool, (SentinelConnectionPool, AsyncSentinelConnectionPool)) and getattr(
            pool, "is_master", False
        ):
            return MasterWatch(pool)
        return None

    def _due(self) -> bool:
        """Whether the Sentinels may be asked now (no lock: two threads asking at once is
        harmless, and a lock held across ``fork()`` would be)."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + RECHECK_INTERVAL
        return True

    def recheck(self) -> None:
        """After a failed call: ask the Sentinels for the master (the pool follows their answer)
        and close the pool's idle connections. Sentinels that cannot answer leave everything as
        it is (the next failure asks again)."""
        if not self._due():
            return
        try:
            address = self.pool.get_master_address()
        except (redis.RedisError, OSError):
            return
        self.master = _address(address)
        self.pool.disconnect(inuse_connections=False)

    async def recheck_async(self) -> None:
        """:meth:`recheck` on a ``redis.asyncio`` Sentinel client."""
        if not self._due():
            return
        try:
            address = await self.pool.get_master_address()
        except (redis.RedisError, OSError):
            return
        self.master = _address(address)
        await self.pool.disconnect(inuse_connections=False)


def _address(address: Any) -> Address:
    return str(address[0]), int(address[1])
