"""Creating redis-py clients with timeouts that make a dead Redis fail fast.

redis-py's defaults wait for the OS connect timeout and retry with back-off, so a stopped server
can hang a flush for many seconds. Here connect and socket timeouts default to one second and
redis-py's own retries are off: the node set decides what to do with a node that does not answer.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from sa_redis_ids.errors import ConfigError

DEFAULT_CONNECT_TIMEOUT = 1.0
DEFAULT_SOCKET_TIMEOUT = 1.0
SCHEMES = ("redis://", "rediss://", "unix://")


def client_from_url(
    url: str,
    *,
    cluster: bool = False,
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
    **kwargs: Any,
) -> Any:
    """A ``redis.Redis`` (or ``RedisCluster`` with ``cluster=True``) for ``url``.

    Accepts ``redis://``, ``rediss://`` and ``unix://`` URLs with user and password, as redis-py does.
    """
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        raise ConfigError(f"Redis URL {url!r} must start with one of {', '.join(SCHEMES)}")
    options: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout,
        "socket_timeout": socket_timeout,
        **kwargs,
    }
    if cluster:
        return RedisCluster.from_url(url, **options)
    options.setdefault("retry", Retry(NoBackoff(), 0))
    return redis.Redis.from_url(url, **options)


def embedded_client() -> Any:
    """An in-process fakeredis server with Lua, for laptops, demos and tests.

    Its data lives as long as the process; every call returns a client of a new, empty server.
    A process forked from the one that made it gets :class:`ConfigError` on every command.
    """
    try:
        import fakeredis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "the embedded Redis needs the 'embedded' extra: pip install 'sa_redis_ids[embedded]'"
        ) from exc
    client = _embedded_class(fakeredis.FakeRedis)(server=fakeredis.FakeServer())
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
