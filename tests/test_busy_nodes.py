"""A node that is up but cannot serve now is treated like one that does not answer.

``BUSY`` (another client's long script), ``MISCONF`` (writes stopped after a failed RDB save) and
``LOADING`` (a restart still loading its data) come before any of the call's script runs: with
several nodes the call goes to another node, and with one node it fails as
:class:`RedisUnavailable` naming the node, never as a :class:`ScriptError`. Real servers started
by the test; the busy and unsaved states are made the way they happen in production (a script of
another client that runs past ``busy-reply-threshold``, an RDB save whose directory vanished, a
restart with a data set that takes a while to load).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from sa_redis_ids import RedisIds, RedisUnavailable
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.redis.connect import fail_fast_options
from tests.support.servers import RedisServer
from tests.support.topologies import wait_until

StartServers = Callable[[int], list[RedisServer]]

HOG = """
local started = tonumber(redis.call('TIME')[1])
while tonumber(redis.call('TIME')[1]) - started < 60 do end
return 1
"""
"""A read-only script that keeps its server busy until SCRIPT KILL (60 s at most)."""

FACTORIES: dict[str, Callable[[RedisIds], Any]] = {
    "sequence": lambda ids: ids.sequence("users"),
    "date_prefixed": lambda ids: ids.date_prefixed("invoices", length=16),
    "short_id": lambda ids: ids.short_id("members", pool_size=100_000, offset=0),
}


def _refuses(server: RedisServer, code: str) -> bool:
    """Whether ``server`` answers a write with the error reply ``code`` now."""
    client = redis.Redis(host="127.0.0.1", port=server.port, **fail_fast_options(5, 5))
    try:
        client.set("probe", "1")
    except redis.ResponseError as exc:
        return str(exc).startswith(code)
    except redis.ConnectionError as exc:  # LOADING is a BusyLoadingError, a ConnectionError
        return code == "LOADING" and isinstance(exc, redis.BusyLoadingError)
    finally:
        client.close()
    return False


@contextmanager
def busy(server: RedisServer) -> Iterator[None]:
    """``server`` answers BUSY within the block: another client's script runs until killed."""

    def hog() -> None:
        client = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=120)
        try:
            client.eval(HOG, 0)
        except redis.ResponseError:
            pass  # killed
        finally:
            client.close()

    thread = threading.Thread(target=hog, daemon=True)
    thread.start()
    wait_until(lambda: _refuses(server, "BUSY"), "the server to answer BUSY")
    try:
        yield
    finally:
        server.client().script_kill()
        thread.join(timeout=30)


@contextmanager
def misconfigured(server: RedisServer) -> Iterator[None]:
    """``server`` refuses writes with MISCONF within the block: its RDB save failed (its directory
    is gone). Afterwards it saves no more, so that it can shut down at once."""
    gone = server.dir / "gone"
    gone.mkdir()
    server.client().config_set("dir", str(gone))
    shutil.rmtree(gone)
    server.client().bgsave()
    wait_until(lambda: _refuses(server, "MISCONF"), "the server to answer MISCONF")
    try:
        yield
    finally:
        server.client().config_set("save", "")


def _draw(make: Callable[[RedisIds], Any], ids: RedisIds, calls: int) -> list[Any]:
    generator = make(ids)
    return [generator.next_id() for _ in range(calls)]


BUSY_ARGS = ["--busy-reply-threshold", "10"]
MISCONF_ARGS = ["--save", "3600 1", "--enable-protected-configs", "yes"]


def _servers(redis_servers: StartServers, count: int, args: list[str]) -> list[RedisServer]:
    started = redis_servers(count)
    for server in started:  # restart with the options the fault needs, on the same port
        server.stop()
        server.args = args
        server.start()
    return started


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_a_busy_node_hands_every_call_to_the_other_node(
    redis_servers: StartServers, factory: str, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = _servers(redis_servers, 2, BUSY_ARGS)
    ids = RedisIds.from_urls([first.url, second.url])
    _draw(FACTORIES[factory], ids, 2)  # both nodes in use before the fault
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids.nodes"), busy(first):
        values = _draw(FACTORIES[factory], ids, 30)
    assert len(set(values)) == 30
    assert "BUSY" in caplog.text and first.url.split("//")[1].rsplit("/")[0] in caplog.text
    ids.close()


def test_a_node_that_refuses_writes_with_misconf_hands_the_call_on(
    redis_servers: StartServers,
) -> None:
    first, second = _servers(redis_servers, 2, MISCONF_ARGS)
    ids = RedisIds.from_urls([first.url, second.url])
    with misconfigured(first):
        values = _draw(FACTORIES["sequence"], ids, 20)
    assert len(set(values)) == 20
    assert {value % 2 for value in values} == {0}, "every value came from the second node"
    ids.close()


@pytest.mark.parametrize("fault", ["BUSY", "MISCONF"])
def test_one_node_that_cannot_serve_raises_redis_unavailable_naming_it(
    redis_servers: StartServers, fault: str
) -> None:
    (server,) = _servers(redis_servers, 1, BUSY_ARGS + MISCONF_ARGS)
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    users.next_id()
    if fault == "MISCONF":
        with (
            misconfigured(server),
            pytest.raises(RedisUnavailable, match=rf"127\.0\.0\.1:{server.port}.*MISCONF"),
        ):
            users.next_id()
    else:
        with busy(server), pytest.raises(RedisUnavailable, match=rf":{server.port}.*BUSY"):
            users.next_id()
    ids.close()


def test_a_node_still_loading_its_data_hands_the_call_on(redis_servers: StartServers) -> None:
    first, second = _servers(redis_servers, 2, ["--save", ""])
    client = first.client()
    pipe = client.pipeline(transaction=False)
    for i in range(10_000):
        pipe.set(f"filler:{i}", "x")
    pipe.execute()
    client.save()
    first.stop()
    first.args = [  # about 1 s of loading, answering LOADING meanwhile
        "--save",
        "",
        "--key-load-delay",
        "100",
        "--loading-process-events-interval-bytes",
        "1024",
    ]
    restart = threading.Thread(target=first.start, daemon=True)  # returns once it has loaded
    restart.start()
    ids = RedisIds.from_urls([first.url, second.url])
    wait_until(lambda: _refuses(first, "LOADING"), "the restarted server to answer LOADING")
    values = _draw(FACTORIES["sequence"], ids, 20)
    assert len(set(values)) == 20
    restart.join(timeout=60)
    ids.close()


def test_the_asyncio_front_end_hands_a_busy_nodes_calls_on_too(
    redis_servers: StartServers,
) -> None:
    first, second = _servers(redis_servers, 2, BUSY_ARGS)

    async def draw(count: int) -> list[int]:
        ids = AsyncRedisIds.from_urls([first.url, second.url])
        users = ids.sequence("users")
        try:
            return [await users.next_id() for _ in range(count)]
        finally:
            await ids.aclose()

    asyncio.run(draw(2))  # both nodes in use before the fault
    with busy(first):
        values = asyncio.run(draw(20))
    assert len(set(values)) == 20
    assert {value % 2 for value in values} == {0}, "every value came from the second node"
