"""Following a Sentinel switch-over: after a failed call, ask the Sentinels where the master is,
close the idle connections, and let a master that has no replica to wait for issue safely.

redis-py's ``SentinelConnectionPool`` asks the Sentinels for the master's address only when it
opens a connection. Connections already open (idle in the pool, in use, or held by a fast lane)
stay on the old master after a switch-over, and real Sentinel demotes that old master only at its
next periodic ``INFO``, about 10 s after the promotion: until then the old master takes writes
that the new one never sees. ``from_sentinel`` therefore waits for a replica by default
(``replicas=1``): once the replica is promoted it no longer acknowledges the old master, whose
values are dropped (gaps, never handed out). What this module adds is the way back: a call that
failed on a Sentinel node (no acknowledgement, a lost connection, ``READONLY`` …) asks the
Sentinels again, at most once per `RECHECK_INTERVAL`; the pool then follows their answer and
its idle connections are closed. A connection in use is never closed under its caller (another
thread would read from a closed socket): the sync pool closes it when it comes back, as it no
longer leads to the master the pool follows; an asyncio pool takes it back as it is, and the next
failed call closes it among the idle ones. So calls reach the new master as soon as the Sentinels
name it, instead of waiting out the old master's demotion.

**A master without a replica.** Right after a switch-over the new master has no replica either
(the old master joins it only once Sentinel demoted it), nor has a master whose only replica died;
``WAIT`` cannot succeed there, and waiting for it would leave callers without values for as long.
So after a shortfall the node asks whether the master may issue without acknowledgement: a
majority of the Sentinels the client was given name it, no replica is connected to it, and every replica the Sentinels list for it is
either down (in their view) or its predecessor, a master still running on the replication history
this one was promoted from (``master_replid2``). Then no server can be promoted in its place
holding only part of its writes, except by a second failover, and for
`SUCCESSOR_SECONDS` at a time its scripts go without ``WAIT``, each with ``INFO
replication`` in the same round trip: a reply is handed out only when it came from that very
server (its replication ID) and the server still has no replica. The old master is never such a
master while its successor runs: the Sentinels name the successor, or, before they do, the
successor reports the old master's replication ID as its predecessor's.

No thread and no task: the check runs in the failing call, so a forked child has nothing to
inherit but the pool (which redis-py resets after a fork) and ``close()`` has nothing to stop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.sentinel import SentinelConnectionPool

#: Seconds a master found without a replica to wait for issues without ``WAIT`` before the
#: Sentinels and its replicas are asked again.
SUCCESSOR_SECONDS = 1.0

#: Connection options of the pool that a direct client to one server reuses.
_DIRECT_OPTIONS = (
    "username",
    "password",
    "credential_provider",
    "socket_connect_timeout",
    "socket_timeout",
)

#: Seconds between two questions to the Sentinels from one node (failed calls in between reuse
#: the last answer), so a master that is down does not turn every failed call into Sentinel load.
RECHECK_INTERVAL = 0.1

Address = tuple[str, int]


class MasterWatch:
    """The master address a Sentinel-backed client's pool last followed, and the re-check."""

    __slots__ = ("_next", "_next_successor", "master", "pool", "successor", "successor_until")

    def __init__(self, pool: Any):
        self.pool = pool
        self.master: Address | None = None
        """The address the Sentinels named at the last re-check (None before the first)."""
        self._next = 0.0
        self._next_successor = 0.0
        self.successor: str | None = None
        """The replication ID of a master that may issue without ``WAIT`` (see the module)."""
        self.successor_until = 0.0

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

    def without_wait(self) -> str | None:
        """The replication ID of the server a call may run on without ``WAIT`` now, or None."""
        found = self.successor
        if found is not None and time.monotonic() < self.successor_until:
            return found
        return None

    def successor_due(self) -> bool:
        """Whether a master found without a replica should be judged again before the next call
        (its time ran out) or after a shortfall, within the rate limit."""
        now = time.monotonic()
        if now < self._next_successor:
            return False
        self._next_successor = now + RECHECK_INTERVAL
        return True

    def expired(self) -> bool:
        """Whether a master found without a replica ran out of its time and is due to be judged
        again before the next call (within the rate limit of `successor_due`)."""
        return self.successor is not None and self.without_wait() is None and self.successor_due()

    def stop_without_wait(self) -> None:
        """Back to ``WAIT`` on every call (a replica connected, or the server is not the one)."""
        self.successor = None

    def _judged(self, identity: str | None) -> None:
        self.successor = identity
        self.successor_until = time.monotonic() + SUCCESSOR_SECONDS

    def _direct_options(self) -> dict[str, Any]:
        kwargs = self.pool.connection_kwargs
        options = {key: kwargs[key] for key in _DIRECT_OPTIONS if key in kwargs}
        if "SSL" in getattr(self.pool.connection_class, "__name__", ""):
            options["ssl"] = True
        return options

    def _judging(self) -> Generator[Callable[[], Any], Any, str | None]:
        """What `judge` asks, sans I/O: yields each question as a call, receives its answer
        (a sync driver calls it, an asyncio one awaits it) or its error (thrown in), returns the
        verdict.

        A majority of the Sentinels the client was given must name this master: one Sentinel
        cut off with the old master (it sees the promoted replica down) would otherwise let the
        old master issue without ``WAIT`` beside its successor. A replica counts as up when any
        of those Sentinels sees it up."""
        pool = self.pool
        manager = pool.sentinel_manager
        address = _address((yield pool.get_master_address))
        named = 0
        up: dict[Address, None] = {}  # replicas any of those Sentinels considers up, in order
        for sentinel in list(manager.sentinels):
            try:
                state = (yield sentinel.sentinel_masters).get(pool.service_name)
                if not state or not manager.check_master_state(state, pool.service_name):
                    continue
                ip = getattr(manager, "_force_master_ip", None) or state["ip"]
                if _address((ip, state["port"])) != address:
                    continue
                listed = yield partial(sentinel.sentinel_slaves, pool.service_name)
            except (redis.RedisError, OSError):
                continue  # unreachable: it does not count towards the majority
            named += 1
            up.update((_address((r["ip"], r["port"])), None) for r in listed if is_up(r))
        if named <= len(manager.sentinels) // 2:
            return None  # a minority cannot tell that the others did not promote a replica
        master = yield partial(self._info, *address)
        replicas = []
        for host, port in up:
            replicas.append((yield partial(self._info, host, port)))
        return successor_identity(master, replicas)

    def _info(self, host: str, port: int) -> Any:
        """``INFO replication`` of one server, on a client of its own (a coroutine on asyncio)."""
        options = self._direct_options()
        if isinstance(self.pool, AsyncSentinelConnectionPool):

            async def ask() -> Any:
                client = AsyncRedis(host=host, port=port, **options)
                try:
                    return await client.info("replication")
                finally:
                    await client.aclose()

            return ask()
        with redis.Redis(host=host, port=port, **options) as client:
            return client.info("replication")

    def judge(self) -> None:
        """Ask the Sentinels and the servers whether the master may issue without ``WAIT`` now
        (see the module); any error answers no."""
        plan = self._judging()
        try:
            step = next(plan)
            while True:
                try:
                    answer = step()
                except (redis.RedisError, OSError) as exc:
                    step = plan.throw(exc)  # the plan decides whether one server's failure ends it
                else:
                    step = plan.send(answer)
        except StopIteration as done:
            self._judged(done.value)
        except (redis.RedisError, OSError, KeyError, ValueError):
            self._judged(None)

    async def judge_async(self) -> None:
        """`judge` on a ``redis.asyncio`` Sentinel client."""
        plan = self._judging()
        try:
            step = next(plan)
            while True:
                try:
                    answer = await step()
                except (redis.RedisError, OSError) as exc:
                    step = plan.throw(exc)
                else:
                    step = plan.send(answer)
        except StopIteration as done:
            self._judged(done.value)
        except (redis.RedisError, OSError, KeyError, ValueError):
            self._judged(None)

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
        """`recheck` on a ``redis.asyncio`` Sentinel client."""
        if not self._due():
            return
        try:
            address = await self.pool.get_master_address()
        except (redis.RedisError, OSError):
            return
        self.master = _address(address)
        await self.pool.disconnect(inuse_connections=False)


def is_up(replica: dict[str, Any]) -> bool:
    """Whether the Sentinels consider a listed replica up (it could be promoted)."""
    return not (
        replica.get("is_sdown") or replica.get("is_odown") or replica.get("is_disconnected")
    )


def successor_identity(master: dict[str, Any], replicas: list[dict[str, Any]]) -> str | None:
    """The master's replication ID when it may issue without ``WAIT``, else None.

    ``master`` is the ``INFO replication`` of the server the Sentinels name, ``replicas`` that of
    every replica they list for it and consider up. It may when no replica is connected to it and
    every listed replica is its predecessor: a master whose replication ID is the one this master
    was promoted from (``master_replid2``). A replica that still replicates, or lost its link,
    could be promoted without this master's latest writes.
    """
    if master.get("role") != "master" or int(master.get("connected_slaves", 0)):
        return None
    promoted_from = master.get("master_replid2")
    for replica in replicas:
        if replica.get("role") != "master" or replica.get("master_replid") != promoted_from:
            return None
    identity = master.get("master_replid")
    return str(identity) if identity else None


def _address(address: Any) -> Address:
    return str(address[0]), int(address[1])
