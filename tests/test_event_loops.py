"""One ``AsyncRedisIds`` on several event loops: threads that each run their own loop, and loops
that close and are followed by new ones (``asyncio.run()`` per request, a loop per test).

Each loop gets a client of its own (see ``sa_redis_ids.redis.loops``); no call may raise
redis-py's "bound to a different event loop" ``RuntimeError`` (nor anything else), and the values
of every loop together stay unique.
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel

from sa_redis_ids.asyncio import AsyncRedisIds
from tests.conftest import Backend
from tests.support.services import REDIS_URL
from tests.support.topologies import SentinelTopology
from tests.test_asyncio_front import _async_ids

THREADS = 8
TIMEOUTS = {"socket_timeout": 5, "socket_connect_timeout": 5}
STRATEGIES = {
    "sequence": {},
    "snowflake": {},
    "short_id": {"pool_size": 100_000, "offset": 100_000},
    "date_prefixed": {},
    "daily_code": {"digits": 7},
}


def _draw_from_loops(ids: AsyncRedisIds, make: Any) -> tuple[list[Any], list[BaseException]]:
    """Values drawn by 8 threads, each running two loops one after the other (3 tasks each)."""
    values: list[Any] = []
    errors: list[BaseException] = []

    async def task() -> None:
        generator = make(ids)
        for _ in range(3):
            values.extend(await generator.next_ids(2))
            values.append(await generator.next_id())

    async def loop() -> None:
        await asyncio.gather(*(task() for _ in range(3)))

    def thread() -> None:
        try:
            for _ in range(2):
                asyncio.run(loop())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread) for _ in range(THREADS)]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    return values, errors


def _unique_from_loops(backend: Backend, strategy: str) -> None:
    ids = _async_ids(backend)
    values, errors = _draw_from_loops(
        ids, lambda ids: getattr(ids, strategy)("loops", **STRATEGIES[strategy])
    )
    assert errors == []
    assert len(values) == THREADS * 2 * 3 * 9
    assert len(set(values)) == len(values)


@pytest.mark.parametrize("backend", ["fake", "redis", "valkey"], indirect=True)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_threads_with_their_own_loops_share_one_instance(backend: Backend, strategy: str) -> None:
    _unique_from_loops(backend, strategy)


@pytest.mark.parametrize("backend", ["cluster"], indirect=True)
def test_threads_with_their_own_loops_share_one_cluster_instance(backend: Backend) -> None:
    _unique_from_loops(backend, "sequence")  # each loop gets a cluster client of its own


def test_a_buffered_generator_serves_one_loop_and_the_others_draw_directly() -> None:
    ids = AsyncRedisIds.embedded()
    values, errors = _draw_from_loops(ids, lambda ids: ids.sequence("buffered", block=50))
    assert errors == []
    assert len(values) == THREADS * 2 * 3 * 9
    assert len(set(values)) == len(values)


def test_each_loop_closes_its_own_connections(backend: Backend) -> None:
    if backend.name == "fake":
        pytest.skip("the embedded Redis has no connections")
    ids = _async_ids(backend)
    users = ids.sequence("closing")

    async def draw_and_close() -> int:
        value = await users.next_id()
        await ids.aclose()
        return value

    drawn = [asyncio.run(draw_and_close()) for _ in range(3)]
    assert drawn == sorted(set(drawn))


def test_aclose_on_a_loop_that_never_called_leaves_other_loops_clients_alone(
    backend: Backend,
) -> None:
    """``asyncio.run(main())`` then ``asyncio.run(ids.aclose())``, and an ``aclose()`` from a
    thread's loop while the loop that drew still runs: no ``RuntimeError`` of a client bound to
    another loop, and the running loop keeps drawing."""
    if backend.name == "fake":
        pytest.skip("the embedded Redis has no connections")
    ids = _async_ids(backend)
    users = ids.sequence("aclose_elsewhere")
    first = asyncio.run(users.next_id())
    asyncio.run(ids.aclose())  # the loop that drew has closed

    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    try:
        second = asyncio.run_coroutine_threadsafe(users.next_id(), running).result(timeout=10)
        asyncio.run(ids.aclose())  # a loop that never called
        third = asyncio.run_coroutine_threadsafe(users.next_id(), running).result(timeout=10)
        asyncio.run_coroutine_threadsafe(ids.aclose(), running).result(timeout=10)
    finally:
        running.call_soon_threadsafe(running.stop)
        thread.join()
        running.close()
    assert [first, second, third] == sorted({first, second, third})


def test_the_event_loops_benchmark_reports_both_loops(real_redis: Any) -> None:
    from benchmarks import event_loops

    result = event_loops.run(REDIS_URL, calls=20)
    assert set(result["rows"]) == {"first loop (the given client)", "a later loop (its own client)"}
    for row in result["rows"].values():
        assert row["x_ping"] > 0 and row["lookup_ns"] > 0
    assert "× PING" in event_loops.render(result)


def test_threads_with_their_own_loops_share_one_sentinel_instance(
    sentinel_topology: SentinelTopology,
) -> None:
    sentinel_topology.wait_replicas_in_sync()
    ids = AsyncRedisIds.from_sentinel(
        sentinel_topology.addresses, sentinel_topology.service, prefix=f"l{uuid.uuid4().hex[:8]}"
    )
    values, errors = _draw_from_loops(ids, lambda ids: ids.sequence("loops"))
    assert errors == []
    assert sorted(values) == list(range(1, THREADS * 2 * 3 * 9 + 1))


def _named_connections(clients: list[Any], name: str) -> int:
    """How many connections named ``name`` the servers of ``clients`` (sync) hold."""
    return sum(1 for client in clients for each in client.client_list() if each.get("name") == name)


def _settled_connections(clients: list[Any], name: str, *, most: int = 0) -> int:
    """`_named_connections` once it is at most ``most``, or after 5 s: a server notices a closed
    connection at its next turn, maybe after it answered ``CLIENT LIST``. Run with the garbage
    collector off, so that only the library can have closed them."""
    deadline = time.monotonic() + 5
    while True:
        found = _named_connections(clients, name)
        if found <= most or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


@pytest.fixture
def no_gc() -> Iterator[None]:
    """The garbage collector off for the test: a connection it collects is closed by it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _named_client(backend: Backend, name: str) -> tuple[Any, list[Any]]:
    """A ``redis.asyncio`` client of ``backend`` whose connections are named ``name``; and sync
    clients of every server it may connect to."""
    if backend.url is not None:
        return AsyncRedis.from_url(backend.url, client_name=name, **TIMEOUTS), [backend.client]
    assert backend.target is not None
    cluster = AsyncRedisCluster.from_url(backend.target["cluster"], client_name=name, **TIMEOUTS)
    return cluster, [node.redis_connection for node in backend.client.get_nodes()]


def _named_ids(backend: Backend, name: str) -> tuple[AsyncRedisIds, list[Any]]:
    """An ``AsyncRedisIds`` on `_named_client`, and the servers' sync clients."""
    client, servers = _named_client(backend, name)
    return AsyncRedisIds(client, prefix=backend.prefix), servers


@pytest.mark.parametrize("backend", ["redis", "valkey", "cluster"], indirect=True)
@pytest.mark.parametrize("strategy", ["sequence", "short_id"])
@pytest.mark.usefixtures("no_gc")
def test_a_loop_that_ends_closes_its_connections(backend: Backend, strategy: str) -> None:
    """``asyncio.run()`` per request without ``aclose()``: each loop's connections (the given
    client's on the first loop, its own client's on each later one) are closed as the loop
    shuts down, not left open for the garbage collector."""
    name = f"ends-{uuid.uuid4().hex[:8]}"
    ids, servers = _named_ids(backend, name)
    generator = getattr(ids, strategy)("ends", **STRATEGIES[strategy])

    async def request() -> list[Any]:
        return [await generator.next_id(), *(await generator.next_ids(3))]

    drawn: list[Any] = []
    for _ in range(3):
        drawn.extend(asyncio.run(request()))
        assert _settled_connections(servers, name) == 0
    assert len(set(drawn)) == 12


@pytest.mark.usefixtures("no_gc")
def test_a_loop_that_ends_closes_its_sentinel_connections(
    sentinel_topology: SentinelTopology,
) -> None:
    """The same through Sentinel: the master's connections and, on the later loops, those of
    the Sentinel clients the library made for them."""
    sentinel_topology.wait_replicas_in_sync()
    name = f"ends-{uuid.uuid4().hex[:8]}"
    sentinel = AsyncSentinel(
        [(host, int(port)) for host, port in (a.split(":") for a in sentinel_topology.addresses)],
        sentinel_kwargs={"client_name": name, **TIMEOUTS},
        client_name=name,
        **TIMEOUTS,
    )
    ids = AsyncRedisIds(sentinel.master_for(sentinel_topology.service), prefix=f"e{name}")
    users = ids.sequence("ends")
    servers = [server.client() for server in sentinel_topology.servers] + [
        each.client() for each in sentinel_topology.sentinels
    ]
    drawn = [asyncio.run(users.next_id()) for _ in range(3)]
    assert drawn == sorted(set(drawn))
    # The first loop's Sentinel clients are the application's (it made them); the library
    # closes only what it made, and the master's connections of every loop.
    assert _settled_connections(servers[:-3], name) == 0
    assert _settled_connections(servers[-3:], name, most=3) <= 3  # one per Sentinel at most
    asyncio.run(users.next_id())
    assert _settled_connections(servers[-3:], name, most=3) <= 3


def test_asyncio_run_per_request_leaves_no_resource_warning(real_redis: Any) -> None:
    """What a developer sees with ``python -X dev``: no ``ResourceWarning`` after a loop per
    request (a fresh process, so no other test's objects are collected in it)."""
    script = (
        "import asyncio, gc\n"
        "from sa_redis_ids.asyncio import AsyncRedisIds\n"
        f"ids = AsyncRedisIds.from_url({REDIS_URL!r}, prefix='dev-{uuid.uuid4().hex[:8]}')\n"
        "users = ids.sequence('users')\n"
        "codes = ids.short_id('codes', pool_size=100_000, offset=100_000)\n"
        "async def request():\n"
        "    return [await users.next_id(), await codes.next_id()]\n"
        "for _ in range(3):\n"
        "    asyncio.run(request())\n"
        "gc.collect()\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-X", "dev", "-W", "error::ResourceWarning", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
    assert "ResourceWarning" not in done.stderr, done.stderr


@pytest.mark.parametrize("backend", ["redis", "valkey", "cluster"], indirect=True)
def test_an_instance_let_go_while_its_loop_runs_leaves_the_given_client_open(
    backend: Backend,
) -> None:
    """Two ``AsyncRedisIds`` on one client the application made: dropping one while the loop
    runs closes nothing the other (or the application) still uses."""
    name = f"kept-{uuid.uuid4().hex[:8]}"

    async def main() -> list[int]:
        client, servers = _named_client(backend, name)
        prefix = backend.prefix
        kept = AsyncRedisIds(client, prefix=prefix).sequence("kept")
        dropped = AsyncRedisIds(client, prefix=prefix).sequence("dropped")
        values = [await kept.next_id(), await dropped.next_id()]
        del dropped
        gc.collect()
        for _ in range(5):  # asyncio closes the dropped instance's part on the loop
            await asyncio.sleep(0)
        assert _named_connections(servers, name) >= 1
        values.extend(await asyncio.gather(*(kept.next_id() for _ in range(20))))
        await client.aclose()
        return values

    values = asyncio.run(main())
    assert values[0] == 1 and values[1] == 1
    assert sorted(values[2:]) == list(range(2, 22))
    _, servers = _named_client(backend, name)
    assert _settled_connections(servers, name) == 0


@pytest.mark.parametrize("backend", ["fake", "redis", "valkey", "cluster"], indirect=True)
def test_a_first_call_while_the_loop_shuts_down_draws_without_a_warning(backend: Backend) -> None:
    """An async generator's cleanup that draws an ID from an instance the loop has not used yet,
    while ``asyncio.run()`` shuts the loop down: the library cannot watch that loop's end any
    more and must not try (asyncio would warn, an error under ``-W error``)."""
    ids = _async_ids(backend)
    users = ids.sequence("late")
    drawn: list[int] = []
    failed: list[BaseException] = []

    async def resource() -> AsyncIterator[None]:
        try:
            yield
        finally:  # run by the loop's shutdown_asyncgens()
            try:
                drawn.append(await users.next_id())
                await ids.aclose()
            except BaseException as exc:
                failed.append(exc)

    async def main() -> None:
        held = resource()
        await held.asend(None)  # suspended: asyncio.run() closes it as the loop ends
        main.held = held  # type: ignore[attr-defined]

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())
    assert failed == [] and drawn == [1]
