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
Sentinels again, at most once per :data:`RECHECK_INTERVAL`, and when they name a master other than
the one seen before, every connection of the pool is closed, in use ones included, so the next
call connects to the new master instead of waiting out the old master's demotion.

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

    def _followed(self) -> set[Address | None]:
        """The addresses connections may be open to: the one named at the last re-check and the
        one the pool's last new connection was given (None when unknown)."""
        pooled = getattr(self.pool, "master_address", None)
        return {self.master, None if pooled is None else _address(pooled)}

    def _moved(self, before: set[Address | None], address: Any) -> bool:
        """Record ``address``; whether some connection may be open to another master."""
        self.master = _address(address)
        return before != {self.master}

    def recheck(self) -> bool:
        """After a failed call: ask the Sentinels for the master; when it is another than before,
        close every connection of the pool. Returns whether connections were closed. Sentinels
        that cannot answer leave everything as it is (the next failure asks again)."""
        if not self._due():
            return False
        before = self._followed()
        try:
            address = self.pool.get_master_address()  # also drops idle connections on a change
        except (redis.RedisError, OSError):
            return False
        if not self._moved(before, address):
            return False
        self.pool.disconnect(inuse_connections=True)
        return True

    async def recheck_async(self) -> bool:
        """:meth:`recheck` on a ``redis.asyncio`` Sentinel client."""
        if not self._due():
            return False
        before = self._followed()
        try:
            address = await self.pool.get_master_address()
        except (redis.RedisError, OSError):
            return False
        if not self._moved(before, address):
            return False
        await self.pool.disconnect(inuse_connections=True)
        return True


def _address(address: Any) -> Address:
    return str(address[0]), int(address[1])
