"""Creating redis-py clients with timeouts that make a dead Redis fail fast.

redis-py's defaults wait for the OS connect timeout and retry with back-off, so a stopped server
can hang a flush for many seconds. Here connect and socket timeouts default to one second and
redis-py's own retries are off: the node set decides what to do with a node that does not answer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from sa_redis_ids.errors import ConfigError, RedisUnavailable
from sa_redis_ids.redis.refusals import refusal_of
from sa_redis_ids.validation import check_bool, check_redis_url, check_seconds

DEFAULT_CONNECT_TIMEOUT = 1.0
DEFAULT_SOCKET_TIMEOUT = 1.0


def client_from_url(
    url: str,
    *,
    cluster: bool = False,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    asynchronous: bool = False,
    **kwargs: Any,
) -> Any:
    """A ``redis.Redis`` (or ``RedisCluster`` with ``cluster=True``) for ``url``; their
    ``redis.asyncio`` counterparts with ``asynchronous=True``.

    Accepts ``redis://``, ``rediss://`` and ``unix://`` URLs with user and password, as redis-py does.

    Without ``max_connections`` the pool has no limit (an asyncio client's too, whatever the
    redis-py version's default). With it the pool is a ``BlockingConnectionPool``: a caller that
    finds every connection in use waits for one, up to ``socket_timeout``, instead of failing (a
    local limit is not a node failure). A ``Redis Cluster`` client keeps redis-py's pools.
    """
    check_redis_url(url)
    cluster = check_bool("cluster", cluster)
    connect_timeout, socket_timeout = check_timeouts(connect_timeout, socket_timeout)
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        **kwargs,
    }
    if cluster:
        if asynchronous:  # connects at first use: errors surface on the first call
            from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

            return AsyncRedisCluster.from_url(url, **options)
        return _cluster_from_url(url, options)
    options.setdefault("retry", no_retries(asynchronous))
    if options.get("max_connections") is None:
        options.pop("max_connections", None)
    if asynchronous:
        from redis.asyncio import BlockingConnectionPool as AsyncBlockingPool
        from redis.asyncio import Redis as AsyncRedis

        if "max_connections" not in options:  # no limit unless one is set, as a sync client's
            return AsyncRedis.from_url(url, max_connections=UNLIMITED_CONNECTIONS, **options)
        pool: Any = AsyncBlockingPool.from_url(url, timeout=socket_timeout, **options)
        client: Any = AsyncRedis(connection_pool=pool)
    elif "max_connections" in options:
        pool = redis.BlockingConnectionPool.from_url(url, timeout=socket_timeout, **options)
        client = redis.Redis(connection_pool=pool)
    else:
        return redis.Redis.from_url(url, **options)
    client.auto_close_connection_pool = True  # closed with the client, as from_url's own pool
    return client


UNLIMITED_CONNECTIONS = 2**31
"""The connection limit of a pool without one (redis-py's own default for a sync pool)."""


def no_retries(asynchronous: bool = False) -> Any:
    """A redis-py ``Retry`` that never retries (the node set decides what a failure means)."""
    if asynchronous:
        from redis.asyncio.retry import Retry as AsyncRetry

        return AsyncRetry(NoBackoff(), 0)
    return Retry(NoBackoff(), 0)


def _cluster_from_url(url: str, options: dict[str, Any]) -> Any:
    """A ``RedisCluster``; redis-py asks a node for the slot map at once, so a cluster that cannot
    be reached raises [`RedisUnavailable`][sa_redis_ids.RedisUnavailable] here, and one that is not a cluster, or refuses the
    library's user (``CLUSTER SLOTS``, ``COMMAND``, the password, TLS), ``ConfigError``."""
    try:
        return RedisCluster.from_url(url, **options)
    except (RedisClusterException, redis.RedisError) as exc:
        cause = exc.__cause__ or exc
        where = f"cluster@{url.partition('://')[2].rpartition('@')[2]}"  # without the password
        refusal = refusal_of(exc, node=where)
        if refusal is not None:
            raise refusal from exc
        if isinstance(cause, (redis.ConnectionError, redis.TimeoutError, OSError)):
            raise RedisUnavailable(
                f"no node of the Redis Cluster could be reached: {exc}", node=where
            ) from exc
        raise ConfigError(f"cannot use this server as a Redis Cluster: {exc}", node=where) from exc


def fail_fast_options(
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
) -> dict[str, Any]:
    """Keyword arguments that make a ``redis.Redis`` you build yourself fail fast when its server
    dies or hangs, as the clients of ``RedisIds.from_url`` do: connect and socket timeouts and no
    redis-py retries (``redis.Redis(host=…, **fail_fast_options())``)."""
    return {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 0),
    }


def socket_timeout_of(client: Any) -> float | None:
    """The socket timeout (seconds) of a redis-py client; None when it has none (it may wait
    forever on a server that hangs) and for the embedded Redis (it cannot hang)."""
    if is_embedded(client):
        return None
    manager = getattr(client, "nodes_manager", None)  # RedisCluster
    pool = getattr(client, "connection_pool", None)
    kwargs = getattr(manager if manager is not None else pool, "connection_kwargs", None)
    timeout = kwargs.get("socket_timeout") if isinstance(kwargs, dict) else None
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None


def client_from_sentinel(
    sentinels: Sequence[str | tuple[str, int]],
    service_name: str,
    *,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    sentinel_kwargs: Mapping[str, Any] | None = None,
    asynchronous: bool = False,
    **kwargs: Any,
) -> Any:
    """A ``redis.Redis`` that writes to the current master of ``service_name`` behind Sentinel.

    redis-py's ``Sentinel.master_for`` asks the sentinels for the master's address whenever it
    connects, so after a failover the next connection reaches the new master. The sentinels and
    the master get the same fail-fast timeouts and no redis-py retries as `client_from_url`;
    ``sentinel_kwargs`` (e.g. a sentinel password) apply to the sentinel connections only, the other
    keyword arguments to the master's.
    """
    addresses = sentinel_addresses(sentinels)
    connect_timeout, socket_timeout = check_timeouts(connect_timeout, socket_timeout)
    if sentinel_kwargs is not None and not isinstance(sentinel_kwargs, Mapping):
        raise ConfigError(
            "sentinel_kwargs must be a dict of options for the sentinel connections (such as "
            f"{{'password': ...}}), not {sentinel_kwargs!r}"
        )
    if not isinstance(service_name, str) or not service_name:
        raise ConfigError(f"service_name must be a non-empty str, not {service_name!r}")
    timeouts = {"socket_connect_timeout": connect_timeout, "socket_timeout": socket_timeout}
    options: dict[str, Any] = {**timeouts, **kwargs}
    options.setdefault("retry", no_retries(asynchronous))
    for_sentinels: dict[str, Any] = {
        **timeouts,
        "retry": no_retries(asynchronous),
        **(sentinel_kwargs or {}),
    }
    kind: Any = Sentinel
    if asynchronous:
        from redis.asyncio.sentinel import Sentinel as AsyncSentinel

        kind = AsyncSentinel
    sentinel: Any = kind(addresses, sentinel_kwargs=for_sentinels, **options)
    return sentinel.master_for(service_name)


def check_timeouts(connect_timeout: object, socket_timeout: object) -> tuple[float, float]:
    """Both timeouts as finite seconds > 0 (``None`` would wait forever on a dead server)."""
    return (
        check_seconds("connect_timeout", connect_timeout),
        check_seconds("socket_timeout", socket_timeout),
    )


def sentinel_addresses(sentinels: object) -> list[tuple[str, int]]:
    """``(host, port)`` pairs from ``"host:port"`` strings or ``(host, port)`` tuples; else raise."""
    if isinstance(sentinels, (str, bytes)) or not isinstance(sentinels, Sequence) or not sentinels:
        raise ConfigError(
            "sentinels must be a non-empty list of 'host:port' strings or (host, port) tuples, "
            f"not {sentinels!r}"
        )
    addresses: list[tuple[str, int]] = []
    for item in sentinels:
        host: object
        port: object
        if isinstance(item, str):
            host, _, port_text = item.rpartition(":")
            port = int(port_text) if port_text.isdigit() else None
            host = host[1:-1] if host.startswith("[") and host.endswith("]") else host  # [::1]
        elif isinstance(item, tuple) and len(item) == 2:
            host, port = item
        else:
            host, port = None, None
        if (
            not isinstance(host, str)
            or not host
            or isinstance(port, bool)
            or not isinstance(port, int)
            or not 0 < port < 65536
        ):
            raise ConfigError(
                f"sentinel {item!r} is not a 'host:port' string or a (host, port) tuple"
            )
        if (host, port) in addresses:
            raise ConfigError(f"sentinel {host}:{port} is listed twice")
        addresses.append((host, port))
    return addresses


def is_embedded(client: Any) -> bool:
    """Whether ``client`` is the in-process fakeredis (no replicas, no eviction, no CONFIG)."""
    return bool(client.__class__.__module__.startswith("fakeredis"))


def refuse_foreign_client(client: Any) -> None:
    """Refuse a client of the ``valkey`` package (valkey-py, redis-py's fork) with what to use.

    It answers like redis-py but raises its own exception classes (``valkey.ConnectionError`` is
    not ``redis.ConnectionError``): a server that is down would not be marked down and skipped,
    and callers would get valkey-py's errors instead of
    [`RedisUnavailable`][sa_redis_ids.RedisUnavailable].
    redis-py itself speaks to Valkey servers, so that is the client to give.
    """
    module = type(client).__module__
    if module == "valkey" or module.startswith("valkey."):
        kind = f"{module}.{type(client).__name__}"
        raise ConfigError(
            f"client must be a redis-py client, not {kind}: valkey-py raises its own error "
            "classes, which the failover does not recognise. redis-py works with Valkey "
            "servers: RedisIds.from_url('redis://valkey-host:6379/0'), or redis.Redis(...), "
            "redis.asyncio.Redis(...), RedisCluster(...) for the same server"
        )


def is_async_client(client: Any) -> bool:
    """Whether ``client`` is a ``redis.asyncio`` client (``Redis`` or ``RedisCluster``, fakeredis's
    asyncio client included), whose commands are coroutines."""
    from redis.asyncio import Redis as AsyncRedis
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

    return isinstance(client, (AsyncRedis, AsyncRedisCluster))


def embedded_client(asynchronous: bool = False) -> Any:
    """An in-process fakeredis server with Lua, for laptops, demos and tests.

    Its data lives as long as the process; every call returns a client of a new, empty server.
    A process forked from the one that made it gets [`ConfigError`][sa_redis_ids.ConfigError] on every command.
    """
    try:
        import fakeredis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "the embedded Redis needs the 'embedded' extra: pip install 'sa_redis_ids[embedded]'"
        ) from exc
    base = fakeredis.FakeAsyncRedis if asynchronous else fakeredis.FakeRedis
    client = _embedded_class(base)(server=fakeredis.FakeServer())
    client.owner_pid = os.getpid()
    return client


@cache
def _embedded_class(base: type) -> type:
    """A fakeredis client that refuses to serve a forked child.

    The server lives in the creating process's memory; after ``os.fork()`` the child holds a copy,
    and the two copies would go on from the same counters and issue the same IDs.
    """

    class EmbeddedRedis(base):  # type: ignore[misc]
        owner_pid = 0

        def execute_command(self, *args: Any, **options: Any) -> Any:
            if os.getpid() != self.owner_pid:
                raise ConfigError(
                    f"the embedded Redis lives in process {self.owner_pid}; this process was "
                    "forked from it and holds only a copy, which would issue the same IDs as its "
                    "parent: give every process the same Redis server (RedisIds.from_url)"
                )
            return super().execute_command(*args, **options)

    EmbeddedRedis.__module__ = base.__module__  # still named "embedded" by describe_client
    return EmbeddedRedis
