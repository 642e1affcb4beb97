"""Shared fixtures: the Redis backend table, independent Redis nodes, and the database matrix.

Backends (DESIGN.md): ``fake`` (fakeredis with Lua), ``redis`` (the server on 127.0.0.1:6379),
``valkey`` (a Valkey server started once per session on a free loopback port, talked to with
redis-py) and ``cluster`` (3 masters started once per session on free loopback ports). Tests on the shared server
use a key prefix of their own and delete only their keys, so suites can run side by side. Databases:
SQLite always; PostgreSQL and MariaDB in a database created for this session and dropped after it.
"""

from __future__ import annotations

import gc
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from redis.cluster import RedisCluster
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from sa_redis_ids import RedisIds
from sa_redis_ids.redis.connect import embedded_client
from tests.support.servers import RedisClusterProcesses, RedisServer
from tests.support.services import (
    MARIADB_URL,
    POSTGRES_URL,
    REDIS_URL,
    missing,
    valkey_server_binary,
)
from tests.support.topology_fixtures import (  # noqa: F401 - fixtures for every test module
    own_cluster,
    own_sentinels,
    replicated_cluster,
    replicated_pair,
    sentinel_topology,
)
from tests.support.uniqueness import GeneratorSpec

BACKENDS = ["fake", "redis", "valkey", "cluster"]

settings.register_profile(
    "sa_redis_ids",
    derandomize=True,  # the same examples on every run: CI never fails at random
    database=None,  # nothing remembered between runs either
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("sa_redis_ids")
"""Every property test runs derandomized; a failure one finds becomes an explicit regression case."""


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once every test is collected, move what exists now (modules, test items, parameters: alive
    for the whole session anyway) out of the garbage collector's sight: each later collection, a
    test's ``gc.collect()`` or Python's own, then looks only at what the tests made since, not at
    the whole collected suite again and again."""
    gc.collect()
    gc.freeze()


@dataclass
class Backend:
    """One Redis backend of the table, with a key prefix private to the test."""

    name: str
    client: Any
    prefix: str
    target: dict[str, Any] | None
    """How another process reaches the same Redis (``None`` for the in-process fakeredis)."""

    @property
    def url(self) -> str | None:
        """The URL of a one-server backend (``redis``, ``valkey``); None for the others."""
        urls = (self.target or {}).get("urls")
        return str(urls[0]) if urls else None

    def ids(self, **kwargs: Any) -> RedisIds:
        return RedisIds(self.client, prefix=self.prefix, **kwargs)

    def spec(self, factory: str, namespace: str, **options: Any) -> GeneratorSpec:
        if self.target is None:
            pytest.skip("fakeredis lives in one process; multi-process tests need a real server")
        return GeneratorSpec(self.target, self.prefix, factory, namespace, options)

    def keys(self) -> list[str]:
        return sorted(k.decode() for k in self.client.scan_iter(match=f"{self.prefix}:*"))

    def forget(self) -> None:
        """Delete every key of the test's prefix: what a restart without persistence or
        ``FLUSHALL`` does to them."""
        for key in self.keys():
            self.client.delete(key)


def _unique_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def real_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.ConnectionError:
        missing(f"no Redis server at {REDIS_URL}")
    yield client
    client.close()


@pytest.fixture(scope="session")
def valkey_process() -> Iterator[RedisServer]:
    """One ``valkey-server`` for the session, on a free loopback port, stopped by its pid."""
    server = RedisServer(binary=valkey_server_binary())
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        server.stop()
        missing(f"could not start a test Valkey server: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="session")
def valkey_redis_client(valkey_process: RedisServer) -> Iterator[redis.Redis]:
    """A redis-py client of the session's Valkey server."""
    client = valkey_process.client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterProcesses]:
    processes = RedisClusterProcesses(3)
    try:
        processes.start()
    except (RuntimeError, OSError) as exc:
        processes.stop()
        missing(f"could not start a test Redis Cluster: {exc}")
    yield processes
    processes.stop()


@pytest.fixture(scope="session")
def cluster_client(redis_cluster: RedisClusterProcesses) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster.url, socket_timeout=5)
    yield client
    client.close()


def _backend(request: pytest.FixtureRequest, name: str) -> Iterator[Backend]:
    prefix = _unique_prefix()
    if name == "fake":
        yield Backend("fake", embedded_client(), prefix, None)
        return
    if name == "redis":
        client = request.getfixturevalue("real_redis")
        found = Backend("redis", client, prefix, {"urls": [REDIS_URL]})
    elif name == "valkey":
        client = request.getfixturevalue("valkey_redis_client")
        url = request.getfixturevalue("valkey_process").url
        found = Backend("valkey", client, prefix, {"urls": [url]})
    else:
        client = request.getfixturevalue("cluster_client")
        cluster = request.getfixturevalue("redis_cluster")
        found = Backend("cluster", client, prefix, {"cluster": cluster.url})
    yield found
    found.forget()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each Redis backend in turn; the test's keys are deleted afterwards."""
    yield from _backend(request, request.param)


@pytest.fixture(params=["redis", "cluster"])
def real_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The real backends only (a real server and the cluster): for multi-process tests. (Valkey
    gets its multi-process loads in the basic fault tests, ``servers_of_each_kind``.)"""
    yield from _backend(request, request.param)


@pytest.fixture
def ids(backend: Backend) -> RedisIds:
    """A ``RedisIds`` on the current backend with the test's private prefix."""
    return backend.ids()


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A ``redis-server`` of this test alone on a free loopback port (its statistics, its
    restarts), stopped by its process id afterwards."""
    own = RedisServer().start()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def redis_servers() -> Iterator[Callable[[int], list[RedisServer]]]:
    """Factory: start N fresh independent ``redis-server`` processes; all are stopped afterwards."""
    started: list[RedisServer] = []

    def start(count: int) -> list[RedisServer]:
        servers = [RedisServer().start() for _ in range(count)]
        started.extend(servers)
        return servers

    yield start
    for server in started:
        server.stop()


@pytest.fixture(params=["redis-server", "valkey-server"])
def servers_of_each_kind(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[[int], list[RedisServer]]]:
    """Like ``redis_servers``, once with ``redis-server`` and once with ``valkey-server``."""
    binary = "redis-server" if request.param == "redis-server" else valkey_server_binary()
    started: list[RedisServer] = []

    def start(count: int) -> list[RedisServer]:
        servers = [RedisServer(binary=binary).start() for _ in range(count)]
        started.extend(servers)
        return servers

    yield start
    for server in started:
        server.stop()


def _session_database(admin_url: str, name: str, create: str, drop: str) -> Iterator[str]:
    url = make_url(admin_url)
    try:
        admin = create_engine(url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(create.format(name=name)))
    except Exception as exc:  # any driver or connection error means "not available"
        missing(f"database server at {url.render_as_string(hide_password=True)} unusable: {exc}")
    yield url.set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(drop.format(name=name)))
    admin.dispose()


@pytest.fixture(scope="session")
def postgresql_url() -> Iterator[str]:
    name = f"sa_redis_ids_{uuid.uuid4().hex[:10]}"
    yield from _session_database(
        POSTGRES_URL, name, "CREATE DATABASE {name}", "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
    )


@pytest.fixture(scope="session")
def postgres_url(postgresql_url: str) -> str:
    """Alias of ``postgresql_url``."""
    return postgresql_url


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    name = f"sa_redis_ids_{uuid.uuid4().hex[:10]}"
    yield from _session_database(
        MARIADB_URL, name, "CREATE DATABASE {name}", "DROP DATABASE IF EXISTS {name}"
    )


DATABASES = ["sqlite", "postgresql", "mariadb"]


@pytest.fixture(params=DATABASES)
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """SQLite (a file), PostgreSQL and MariaDB, each in a database of this test session."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.sqlite3'}"
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on each database of the matrix; the test's tables are dropped by the test's metadata."""
    found = create_engine(db_url)
    yield found
    found.dispose()


@pytest.fixture
def create_tables(engine: Engine) -> Iterator[Callable[[Any], Engine]]:
    """``create_tables(metadata)`` creates the tables on ``engine`` and drops them after the test."""
    created: list[Any] = []

    def create(metadata: Any) -> Engine:
        metadata.drop_all(engine)
        metadata.create_all(engine)
        created.append(metadata)
        return engine

    yield create
    for metadata in created:
        metadata.drop_all(engine)
