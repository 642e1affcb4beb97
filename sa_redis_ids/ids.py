"""``RedisIds``: the entry point that holds the Redis nodes and makes generators bound to namespaces."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sa_redis_ids.backend.connect import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SOCKET_TIMEOUT,
    client_from_url,
    embedded_client,
)
from sa_redis_ids.backend.nodes import NodeSet
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.keys import DEFAULT_PREFIX, validate_namespace, validate_prefix
from sa_redis_ids.strategies.base import IdGenerator
from sa_redis_ids.strategies.sequence import SequenceGenerator

G = TypeVar("G", bound=IdGenerator[Any])


class RedisIds:
    """Redis nodes plus a key prefix; the factory of every ID generator.

    ``RedisIds(client)`` wraps an existing ``redis.Redis`` or ``redis.cluster.RedisCluster`` (a cluster
    counts as one node); a list of clients makes N independent nodes, each issuing its own residue class.
    """

    def __init__(
        self,
        client: Any | Sequence[Any],
        *,
        prefix: str = DEFAULT_PREFIX,
        retry_after: float = 2.0,
    ):
        clients = list(client) if isinstance(client, (list, tuple)) else [client]
        if not clients:
            raise ConfigError("RedisIds needs at least one Redis client")
        self.prefix = validate_prefix(prefix)
        self.nodes = NodeSet(clients, retry_after=retry_after)
        self._generators: dict[tuple[str, str], IdGenerator[Any]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        cluster: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        **redis_kwargs: Any,
    ) -> RedisIds:
        """One node from a ``redis://``, ``rediss://`` or ``unix://`` URL (``cluster=True``: a cluster)."""
        client = client_from_url(
            url,
            cluster=cluster,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            **redis_kwargs,
        )
        return cls(client, prefix=prefix)

    @classmethod
    def from_urls(
        cls,
        urls: Sequence[str],
        *,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        retry_after: float = 2.0,
        **redis_kwargs: Any,
    ) -> RedisIds:
        """N independent nodes. Keep the order fixed: node k's index is its place in this list."""
        if isinstance(urls, str) or not urls:
            raise ConfigError("from_urls needs a non-empty list of Redis URLs")
        if len(set(urls)) != len(urls):
            raise ConfigError("from_urls got the same URL twice; each node must be listed once")
        clients = [
            client_from_url(
                url,
                connect_timeout=connect_timeout,
                socket_timeout=socket_timeout,
                **redis_kwargs,
            )
            for url in urls
        ]
        return cls(clients, prefix=prefix, retry_after=retry_after)

    @classmethod
    def embedded(cls, *, prefix: str = DEFAULT_PREFIX) -> RedisIds:
        """An in-process fakeredis (needs the ``embedded`` extra); its data dies with the process."""
        return cls(embedded_client(), prefix=prefix)

    @classmethod
    def from_env(cls, url: str | None = None, **kwargs: Any) -> RedisIds:
        """``from_url(url)`` when a URL is given, else the embedded Redis."""
        return cls.from_url(url, **kwargs) if url else cls.embedded(**kwargs)

    @property
    def generators(self) -> list[IdGenerator[Any]]:
        """Every generator made by this instance (the maintenance job walks them)."""
        return list(self._generators.values())

    def _make(self, strategy: str, namespace: str, build: Callable[[], G]) -> G:
        """Build a generator once per (strategy, namespace); the same options give the same object."""
        validate_namespace(namespace)
        made = build()
        with self._lock:
            existing = self._generators.get((strategy, namespace))
            if existing is None:
                self._generators[(strategy, namespace)] = made
                return made
        if existing.config != made.config:
            raise ConfigError(
                f"a {strategy} generator for this namespace already exists with "
                f"{existing.config}; it cannot also have {made.config}",
                namespace=namespace,
            )
        return existing  # type: ignore[return-value]

    def sequence(
        self, namespace: str, *, start: int = 1, js_safe: bool = False
    ) -> SequenceGenerator:
        """Increasing integers from ``start``; with N nodes each node issues its residue class."""
        return self._make(
            "sequence",
            namespace,
            lambda: SequenceGenerator(
                self.nodes, self.prefix, namespace, start=start, js_safe=js_safe
            ),
        )

    def close(self) -> None:
        """Close every node's connection pool."""
        for node in self.nodes.nodes:
            node.client.close()

    def __repr__(self) -> str:
        return f"RedisIds({[node.name for node in self.nodes.nodes]}, prefix={self.prefix!r})"
