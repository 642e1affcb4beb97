"""``durable=True``: a value goes out only once the server's append-only file on disk holds its write
(``WAITAOF 1 0``, in the same round trip as the script), so a crash and a restart from that file
repeat nothing.

Runs on Valkey (``WAITAOF`` since Redis 7.2; the test Valkey is 8.x) started with ``appendonly yes``;
the Redis 7.0 server of the backend table shows the refusal where ``WAITAOF`` does not exist.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
import redis

from sa_redis_ids import ConfigError, NotDurable, RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from tests.support.faults import Load, report, run_with_fault
from tests.support.servers import RedisServer
from tests.support.services import missing, valkey_server_binary

AOF = ["--appendonly", "yes", "--appendfsync", "everysec"]
"""The common persistence setting: the AOF is fsynced about once a second."""

PATIENT = {"socket_timeout": 5, "durable_timeout": 4}
"""Timeouts long enough for a loaded machine's fsync (a test that counts calls must not see one
time out)."""


def prefix() -> str:
    return f"d{uuid.uuid4().hex[:10]}"


def start(args: list[str]) -> RedisServer:
    server = RedisServer(binary=valkey_server_binary(), args=args)
    try:
        server.start()
    except (RuntimeError, OSError) as exc:
        server.stop()
        missing(f"could not start a Valkey server: {exc}")
    return server


@pytest.fixture(scope="module")
def aof_server() -> Iterator[RedisServer]:
    """A Valkey with ``appendonly yes``, ``appendfsync everysec``."""
    server = start(AOF)
    yield server
    server.stop()


def waitaof_calls(server: RedisServer) -> int:
    stats = server.client().info("commandstats").get("cmdstat_waitaof", {})
    return int(stats.get("calls", 0))


def test_every_script_call_waits_for_the_aof_and_blocks_wait_once(
    aof_server: RedisServer,
) -> None:
    ids = RedisIds.from_url(aof_server.url, prefix=prefix(), durable=True, **PATIENT)
    try:
        users = ids.sequence("users")
        before = waitaof_calls(aof_server)
        drawn = [users.next_id() for _ in range(5)] + users.next_ids(5)
        assert drawn == list(range(1, 11))
        assert waitaof_calls(aof_server) - before >= 6  # one per call, none skipped
        for factory, options in [
            ("date_prefixed", {}),
            ("daily_code", {"digits": 6, "tz": "UTC"}),
            ("snowflake", {}),
            ("short_id", {"pool_size": 100_000, "offset": 100_000}),
        ]:
            generator = getattr(ids, factory)(f"n_{factory}", **options)
            values = [generator.next_id() for _ in range(3)]
            assert len(set(values)) == 3
        buffered = ids.sequence("buffered", block=100)
        before = waitaof_calls(aof_server)
        assert [buffered.next_id() for _ in range(50)] == list(range(1, 51))
        assert waitaof_calls(aof_server) - before in (1, 2)  # a block (and maybe its prefetch)
    finally:
        ids.close()


def test_the_asyncio_front_end_waits_for_the_aof_too(aof_server: RedisServer) -> None:
    async def main() -> list[int]:
        ids = AsyncRedisIds.from_url(aof_server.url, prefix=prefix(), durable=True, **PATIENT)
        try:
            users = ids.sequence("users")
            return [await users.next_id() for _ in range(3)] + await users.next_ids(3)
        finally:
            await ids.aclose()

    before = waitaof_calls(aof_server)
    assert asyncio.run(main()) == list(range(1, 7))
    assert waitaof_calls(aof_server) - before >= 4


def test_no_fsync_confirmed_in_time_drops_the_values_as_a_gap() -> None:
    server = start(["--appendonly", "yes", "--appendfsync", "no"])  # WAITAOF never confirms
    try:
        name = prefix()
        ids = RedisIds.from_url(server.url, prefix=name, durable=True, durable_timeout=0.05)
        with pytest.raises(NotDurable, match="append-only file"):
            ids.sequence("users").next_id()
        plain = RedisIds.from_url(server.url, prefix=name)
        assert plain.sequence("users").next_id() == 2  # 1 was dropped: a gap, not handed out
        ids.close()
        plain.close()
    finally:
        server.stop()


def test_a_server_without_waitaof_or_without_an_aof_is_refused_at_first_use(
    real_redis: redis.Redis,
) -> None:
    version = real_redis.info("server")["redis_version"]
    if tuple(int(part) for part in version.split(".")[:2]) >= (7, 2):
        pytest.skip(f"the Redis server here ({version}) has WAITAOF")
    port = real_redis.connection_pool.connection_kwargs["port"]
    ids = RedisIds.from_url(f"redis://127.0.0.1:{port}/0", prefix=prefix(), durable=True)
    with pytest.raises(ConfigError, match=r"durable=True needs WAITAOF.*Redis 7\.2"):
        ids.sequence("users").next_id()
    ids.close()
    server = start(["--appendonly", "no"])
    try:
        ids = RedisIds.from_url(server.url, prefix=prefix(), durable=True)
        with pytest.raises(ConfigError, match="appendonly yes"):
            ids.sequence("users").next_id()
        ids.close()
    finally:
        server.stop()


def test_options_that_cannot_hold_are_refused_when_made(aof_server: RedisServer) -> None:
    with pytest.raises(ConfigError, match="durable must be True or False"):
        RedisIds.from_url(aof_server.url, durable=1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="durable_timeout must be"):
        RedisIds.from_url(aof_server.url, durable=True, durable_timeout=0)
    with pytest.raises(ConfigError, match="shorter than the client's socket_timeout"):
        RedisIds.from_url(aof_server.url, durable=True, durable_timeout=2)
    with pytest.raises(ConfigError, match="cannot be combined"):
        RedisIds.from_url(aof_server.url, durable=True, replicas=1)
    with pytest.raises(ConfigError, match="no append-only file"):
        RedisIds.embedded(durable=True)


@pytest.mark.slow
@pytest.mark.parametrize("durable", [False, True], ids=["plain", "durable"])
def test_a_crash_under_load_and_a_restart_from_the_aof(durable: bool) -> None:
    """``kill -9`` while several processes draw, a restart from the AOF, and one more process
    that starts drawing after it (it knows nothing of the values handed out before). With the
    option, nothing is repeated. Without it, measured (docs/operating-redis.md's table): 0 repeated
    too, since the server writes the AOF before it replies and a killed process leaves its
    written data in the operating system's cache; only a host crash, or a write postponed
    behind a slow fsync, loses what ``everysec`` had not yet synced, and ``WAITAOF`` covers
    both."""
    server = start(AOF)
    try:

        def crash() -> None:
            server.kill()
            server.start()  # from its append-only file

        load = Load(
            {"urls": [server.url]},
            prefix(),
            options={"durable": True, "retry_after": 0.1} if durable else {"retry_after": 0.1},
        )
        # a process started after the restart knows nothing of what the others drew: only the
        # server's data keeps it from repeating their values. It draws one value of every
        # generator before anything else (a worker that cannot, within the load's seconds,
        # fails the run): so every generator served again after the restart.
        results = run_with_fault(load, crash, at=1.0, after=0.5, late=[load])
        print(f"durable={durable}\n{report(results)}")
        if durable:
            assert sum(drawn.duplicates() for drawn in results.values()) == 0, report(results)
    finally:
        server.stop()


def test_the_benchmark_reports_durable_calls_against_ping_and_the_plain_call() -> None:
    from benchmarks.replicas import run_durable

    rows = {row[0]: row for row in run_durable(3)}
    assert set(rows) == {
        "PING",
        "next_id()",
        "next_id() durable, everysec",
        "next_id() durable, always",
        "block of 1000",
        "block of 1000 durable, everysec",
    }
    for name, row in rows.items():
        assert isinstance(row[3], float) and row[3] > 0  # × PING
        assert (row[4] == "-") == ("durable" not in name)  # durable / plain
