"""The exception hierarchy.

Every error the library raises derives from [`SaRedisIdsError`][sa_redis_ids.SaRedisIdsError] and carries the namespace it
concerns (and the Redis node, where one is involved), so a log line says *which* generator failed
*where*. Errors caused by redis-py are raised ``from`` the original exception.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.exc import DontWrapMixin


class SaRedisIdsError(DontWrapMixin, Exception):
    """Base of every error raised by sa_redis_ids.

    ``DontWrapMixin``: raised from a column default while SQLAlchemy executes a statement, it
    reaches the caller as itself, not wrapped in ``sqlalchemy.exc.StatementError``.
    """

    def __init__(self, message: str, *, namespace: str | None = None, node: str | None = None):
        self.namespace = namespace
        self.node = node
        context = ", ".join(
            f"{name}={value}"
            for name, value in (("namespace", namespace), ("node", node))
            if value is not None
        )
        super().__init__(f"{message} ({context})" if context else message)


class ConfigError(SaRedisIdsError, ValueError):
    """A configuration that cannot work: bad namespace, bounds past BIGINT, node order changed."""


class NodeErrors(SaRedisIdsError):
    """An error about several nodes: ``errors`` maps each node to what it answered."""

    def __init__(
        self,
        message: str,
        *,
        namespace: str | None = None,
        node: str | None = None,
        errors: Mapping[str, BaseException] | None = None,
    ):
        self.errors: dict[str, BaseException] = dict(errors or {})
        if self.errors:
            detail = "; ".join(f"{name}: {exc}" for name, exc in self.errors.items())
            message = f"{message}: {detail}"
        super().__init__(message, namespace=namespace, node=node)


class RedisUnavailable(NodeErrors, ConnectionError):
    """No Redis node could answer. ``errors`` maps each node tried to the error it gave."""


class ConnectionPoolFull(RedisUnavailable):
    """Every connection of the client's own pool was in use (its ``max_connections``): a limit of
    this process, not a failure of the node, which is not marked down. A call moves on to another
    node where there is one. The clients of ``RedisIds.from_url`` wait for a free connection
    instead (a blocking pool, within the socket timeout); a client you build yourself does so with
    ``redis.BlockingConnectionPool``."""


class SequenceExhausted(SaRedisIdsError):
    """The generator has no value left (counter at its limit, pool full, BIGINT reached).

    ``left``: how many values the node that answered still holds, when it said (a batch bigger
    than that takes them and the rest from the other nodes); None otherwise."""

    def __init__(
        self,
        message: str,
        *,
        namespace: str | None = None,
        node: str | None = None,
        left: int | None = None,
    ):
        self.left = left
        super().__init__(message, namespace=namespace, node=node)


class ClockMovedBackwards(SaRedisIdsError):
    """The Redis server clock is behind the last millisecond issued by more than the tolerance."""

    def __init__(
        self, message: str, *, namespace: str | None = None, node: str | None = None, behind_ms: int
    ):
        self.behind_ms = behind_ms
        super().__init__(message, namespace=namespace, node=node)


class DayPurged(SaRedisIdsError):
    """The day asked for is at or before the purge marker: maintenance removed it for good."""


class DayMissing(SaRedisIdsError):
    """A day's counter vanished without a purge (expired or evicted) and no floor is configured.

    Continuing from zero would repeat the day's values; a ``floor=`` lets the generator reseed it.
    """


class LockNotAcquired(NodeErrors):
    """A Redlock could not be acquired (or extended) on a majority of nodes in time.

    ``name`` is the lock name; ``errors`` maps each node that did not grant the lock in the last
    attempt to why ([`LockHeld`][sa_redis_ids.errors.LockHeld], a connection error, a timeout).
    """

    def __init__(
        self,
        message: str,
        *,
        namespace: str | None = None,
        node: str | None = None,
        errors: Mapping[str, BaseException] | None = None,
        name: str | None = None,
    ):
        self.name = name
        super().__init__(message, namespace=namespace, node=node, errors=errors)


class LockHeld(SaRedisIdsError):
    """One node's lock key holds another holder's token (an entry of ``LockNotAcquired.errors``)."""

    def __init__(self, ttl_ms: int, *, namespace: str | None = None, node: str | None = None):
        self.ttl_ms = ttl_ms
        super().__init__(
            f"held by another holder for {ttl_ms} ms more", namespace=namespace, node=node
        )


class ScriptError(SaRedisIdsError):
    """A Lua script returned a code this version does not know (a bug or a version mismatch)."""


class NotDurable(RedisUnavailable):
    """A script ran, but the server did not confirm within ``durable_timeout`` that its
    append-only file on disk holds the write (``WAITAOF``).

    Raised with ``durable=True`` (see [`RedisIds`][sa_redis_ids.RedisIds]): a write not yet on
    disk is lost if the server crashes and restarts from that file, which would then issue the same
    values again. The values that script issued are dropped (gaps, never handed out). A subclass
    of [`RedisUnavailable`][sa_redis_ids.RedisUnavailable], so a call moves on to another node
    where there is one.
    """


class ReplicasNotAcknowledged(RedisUnavailable):
    """A script ran on a master, but fewer than ``required`` replicas acknowledged its write in time.

    Raised with ``replicas=N`` (see [`RedisIds`][sa_redis_ids.RedisIds]): a write that no replica holds
    is lost if the master fails over, and the promoted replica would issue the same values again.
    The values that script issued are dropped (gaps, never handed out). A subclass of
    [`RedisUnavailable`][sa_redis_ids.RedisUnavailable], so a call moves on to another node where there is one.
    ``acknowledged`` is how many replicas did acknowledge (the most of any node tried).
    """

    def __init__(
        self,
        message: str,
        *,
        namespace: str | None = None,
        node: str | None = None,
        errors: Mapping[str, BaseException] | None = None,
        required: int,
        acknowledged: int,
    ):
        self.required = required
        self.acknowledged = acknowledged
        super().__init__(message, namespace=namespace, node=node, errors=errors)
