"""A call whose reply timed out is tried again while its deadline allows, then raises.

One slow reply (a loaded host, a server busy for a moment) must not fail the request that asked
for an ID: the call is sent again, on another node or on the only one, within a deadline of two
socket timeouts. Sending it again is safe: what a call that ran but whose reply was lost took is
a gap, never handed out twice. The servers are paused with SIGSTOP (they keep their connections
but answer nothing) and resumed by a timer.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

from sa_redis_ids import RedisIds, RedisUnavailable
from sa_redis_ids.asyncio import AsyncRedisIds
from tests.support.servers import RedisServer

TIMEOUT = 0.5
"""The clients' socket timeout: a call's deadline is two of them."""


@contextmanager
def paused_for(server: RedisServer, seconds: float) -> Iterator[None]:
    """SIGSTOP ``server`` now and SIGCONT it after ``seconds`` (and at the latest when the block
    ends)."""
    server.pause()
    timer = threading.Timer(seconds, server.resume)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        server.resume()


class _ResumeAtFirstTimeout(logging.Handler):
    """Resumes a paused server when the library logs that a node timed out: the call's first try
    has then certainly failed, and the next one finds the server answering (however loaded the
    machine is)."""

    def __init__(self, server: RedisServer):
        super().__init__(logging.WARNING)
        self.server = server
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "is down (TimeoutError" in message:
            self.seen.append(message)
            self.server.resume()


@contextmanager
def paused_until_a_try_times_out(server: RedisServer) -> Iterator[list[str]]:
    """SIGSTOP ``server`` until a call's try on it times out; yields the warnings logged."""
    handler = _ResumeAtFirstTimeout(server)
    log = logging.getLogger("sa_redis_ids.nodes")
    log.addHandler(handler)
    server.pause()
    try:
        yield handler.seen
    finally:
        log.removeHandler(handler)
        server.resume()


def strategies(ids: Any) -> dict[str, Any]:
    return {
        "sequence": ids.sequence("seq"),
        "date_prefixed": ids.date_prefixed("dated"),
        "daily_code": ids.daily_code("codes"),
        "snowflake": ids.snowflake("flakes"),
        "short_id": ids.short_id("shorts", pool_size=10_000),
    }


@pytest.fixture
def one_node(redis_servers: Callable[[int], list[RedisServer]]) -> Iterator[RedisServer]:
    (server,) = redis_servers(1)
    yield server
    server.resume()


@pytest.mark.parametrize(
    "strategy", ["sequence", "date_prefixed", "daily_code", "snowflake", "short_id"]
)
def test_a_reply_late_by_less_than_the_deadline_is_waited_for_on_the_only_node(
    one_node: RedisServer, strategy: str
) -> None:
    ids = RedisIds.from_url(one_node.url, socket_timeout=TIMEOUT)
    generator = strategies(ids)[strategy]
    before = generator.next_ids(3)
    with paused_until_a_try_times_out(one_node) as timed_out:
        during = generator.next_id()  # the first try times out, the second is answered
    assert len(timed_out) == 1
    after = generator.next_ids(3)
    drawn = [*before, during, *after]
    assert len(set(drawn)) == len(drawn)
    ids.close()


def test_a_server_paused_past_the_deadline_raises_and_says_it_was_tried_again(
    one_node: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    ids = RedisIds.from_url(one_node.url, socket_timeout=TIMEOUT)
    users = ids.sequence("users")
    assert users.next_id() == 1
    with (
        caplog.at_level(logging.WARNING, "sa_redis_ids.nodes"),
        paused_for(one_node, 30),
        pytest.raises(RedisUnavailable) as caught,
    ):
        users.next_id()
    assert "deadline of 1 s" in str(caught.value)
    assert "tries" in str(caught.value)
    (warning,) = [r.getMessage() for r in caplog.records if "is down" in r.getMessage()]
    assert "it is the only node: every call still tries it" in warning
    assert "within its deadline of 1 s" in warning
    assert "other nodes" not in warning
    assert users.next_id() > 1  # resumed: a gap at most (a try may have run), never a repeat
    ids.close()


def test_with_two_nodes_a_timed_out_node_is_tried_again_when_the_other_is_down(
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    slow, dead = redis_servers(2)
    ids = RedisIds.from_urls([slow.url, dead.url], socket_timeout=TIMEOUT)
    codes = ids.daily_code("codes")
    first = codes.next_ids(4)  # from both nodes
    dead.stop()
    with paused_until_a_try_times_out(slow) as timed_out:
        late = codes.next_ids(2)  # the dead node refuses, the slow one times out, then answers
    assert not set(first) & set(late)
    assert len(timed_out) == 1
    assert "calls go to the other node and try it only when they fail" in timed_out[0]
    ids.close()


def test_the_asyncio_front_end_tries_a_timed_out_reply_again(one_node: RedisServer) -> None:
    async def draw() -> list[int]:
        ids = AsyncRedisIds.from_url(one_node.url, socket_timeout=TIMEOUT)
        users = ids.sequence("users")
        values = [await users.next_id()]
        with paused_until_a_try_times_out(one_node) as timed_out:
            values.append(await users.next_id())
        assert len(timed_out) == 1
        values.append(await users.next_id())
        await ids.aclose()
        return values

    values = asyncio.run(draw())
    assert values[0] == 1 and len(set(values)) == 3 and values == sorted(values)


@contextmanager
def listener(*, full: bool) -> Iterator[int]:
    """A loopback port whose listener never accepts. ``full``: its queue is filled too, so the
    kernel drops further connection attempts and a client's connect times out (a host that is
    down or a route that drops packets, without leaving loopback); else a connection is made
    but nothing ever answers on it (a TLS handshake stalls)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0 if full else 8)
    port = server.getsockname()[1]
    queued = []
    try:
        for _ in range(3 if full else 0):
            waiting = socket.socket()
            waiting.setblocking(False)
            waiting.connect_ex(("127.0.0.1", port))
            queued.append(waiting)
        yield port
    finally:
        for waiting in queued:
            waiting.close()
        server.close()


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every connection a sync client opens (``Connection.connect`` calls), in order."""
    made: list[object] = []
    connect = redis.connection.Connection.connect

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(self)
        return connect(self, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "connect", counted)
    return made


def test_an_unreachable_node_is_tried_once_per_call(
    connects: list[object], caplog: pytest.LogCaptureFixture
) -> None:
    """A plain TCP connection not made in time is not a slow reply: nothing reached the server,
    so the call is not sent to it again within its deadline (that would only multiply the
    wait)."""
    with listener(full=True) as port, caplog.at_level(logging.WARNING, "sa_redis_ids.nodes"):
        ids = RedisIds.from_url(
            f"redis://127.0.0.1:{port}", socket_timeout=TIMEOUT, connect_timeout=0.1
        )
        users = ids.sequence("users")
        for _ in range(2):
            connects.clear()
            with pytest.raises(RedisUnavailable, match="Timeout connecting"):
                users.next_id()
            assert len(connects) == 1  # the deadline (1 s) would allow several 0.1 s tries
        ids.close()
    (warning,) = [r.getMessage() for r in caplog.records if "is down" in r.getMessage()]
    assert "it is the only node: every call still tries it" in warning
    assert "tries it again" not in warning


def test_a_tls_handshake_that_stalls_is_tried_again_within_the_deadline(
    connects: list[object],
) -> None:
    """redis-py words a TLS handshake the server did not finish in time as a connect timeout
    too; that server is reachable, maybe only busy: the call goes to it again while its
    deadline allows."""
    with listener(full=False) as port:
        ids = RedisIds.from_url(
            f"rediss://127.0.0.1:{port}", socket_timeout=0.2, connect_timeout=0.2
        )
        with pytest.raises(RedisUnavailable, match="Timeout connecting"):
            ids.sequence("users").next_id()
        assert len(connects) >= 2  # tried again within the 0.4 s deadline
        ids.close()
