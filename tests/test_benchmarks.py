"""Smoke tests of the IDs benchmark: it runs end to end and reports well-formed results.

Speed is never asserted here (a shared, noisy machine); the benchmark itself states the targets.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio

from benchmarks import ids as bench
from benchmarks import server_cost, server_info
from sa_redis_ids.cli import main
from tests.support.services import REDIS_URL, require_binary

TARGET_NAMES = (
    "sequence next_id() latency <= 1.10× PING",
    "date_prefixed next_id() latency <= 1.20× PING",
    "at least as fast as PostgreSQL nextval() per ID",
    "next_ids(1000) >= 100×",
    "300× unbuffered INCR",
    "1,000,000 IDs/s",
    "short_id next_ids(1000) >= 200× IDs/s of its next_id()",
    "daily_code next_ids(1000) per ID <= 1.5× sequence's",
    "sequence next_id() at 64 tasks >= 5× IDs/s of redis.asyncio INCR",
    "daily_code next_id() at 64 tasks >= 5× IDs/s of redis.asyncio INCR",
    "snowflake next_id() at 16 threads >= 3× IDs/s of redis-py INCR",
    "<= 1.6× an INCR's",
)
REAL_TARGET_NAMES = (
    "server CPU per sequence next_id() <= 1.3× an INCR's (INFO cpu)",
    "server CPU per short_id next_id() <= 1.6× an INCR's (INFO cpu)",
    "sequence next_id() <= 5 µs per call (INFO commandstats)",
)
CONCURRENT_ROWS = [
    ("sequence", "next_id(), {}"),
    ("snowflake", "next_id(), {}"),
    ("daily_code", "next_id(), {}"),
    ("sequence", "next_id(), {}, share_calls=False"),
]

PEERS = [
    ("redis-py", "INCR"),
    ("PostgreSQL", "nextval()"),
    ("PostgreSQL", "nextval() × 1000"),
    ("pottery", "NextID"),
    (bench.HENGYUNABC, "EVALSHA"),
    ("uuid-utils", "uuid7()"),
    ("snowflake-id", "next()"),
]

UNREACHABLE_PG = "postgresql://postgres@127.0.0.1:1/test"

STAND_IN_SCRIPT = """
local seq = redis.call('INCRBY', KEYS[1] .. ':seq', 1) % 1024
local now = redis.call('TIME')
return {tonumber(now[1]), tonumber(now[2]), tonumber(KEYS[2]), seq}
"""
"""A script with the keys and reply of hengyunabc's (which this project does not ship): it proves
the benchmark's row for the file a user passes with ``--hengyunabc-script``."""
"""Nothing listens on port 1: the ``nextval`` rows must say so instead of failing the run."""


def _by_name(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["strategy"], row["mode"]): row for row in rows}


def _check_result(result: dict[str, Any], *, real: bool) -> None:
    strategies = result["strategies"]
    buffered = result["buffered"]
    assert isinstance(strategies, list) and isinstance(buffered, list)
    assert [row["mode"] for row in strategies[:2]] == ["PING", "EVALSHA 'return 1'"]
    names = {row["strategy"] for row in strategies if row["group"] == "strategies"}
    assert {"sequence", "date_prefixed"} <= names
    peers = _by_name([row for row in strategies if row["group"] == "peers"])
    assert list(peers) == PEERS, "every peer has its row, in the order of the table"
    for row in strategies:
        if row["ids"]:
            assert row["ids_per_s"] > 0 and row["ratio"] > 0 and row["us_per_id"] > 0
        else:
            assert row["group"] == "peers" and row["note"], "a row not measured says why"
    in_process = (("uuid-utils", "uuid7()"), ("snowflake-id", "next()"))
    for key in (("redis-py", "INCR"), ("pottery", "NextID"), *in_process):
        assert peers[key]["ids"] > 0, key
    if not real:
        assert peers[(bench.HENGYUNABC, "EVALSHA")]["note"] == bench.HENGYUNABC_HOW
    for key in in_process:
        assert peers[key]["extra"]["tight_loop_ids_per_s"] > 0, key
    modes = {(row["strategy"], row["mode"]) for row in buffered}
    assert ("INCR (unbuffered)", "1 thread") in modes
    for name in ("sequence", "date_prefixed"):
        assert (f"{name} block=1000", "1 thread") in modes
        assert (f"{name} block=1000", "4 threads") in modes
    measured = [row for row in buffered if row["ids"]]
    for row in measured:
        assert row["ids_per_s"] > 0 and row["ratio"] > 0
    in_processes = [row for row in buffered if row["mode"].endswith("processes")]
    assert len(in_processes) == 2
    assert all(bool(row["ids"]) == real for row in in_processes)
    seq = next(r for r in buffered if r["strategy"].startswith("sequence") and r["ids"])
    assert seq["extra"]["blocks_taken"] >= 1, "buffer statistics are part of the result"
    async_rows = _by_name(result["async"])
    thread_rows = _by_name(result["threads"])
    server_rows = _by_name(result["server"])
    if real:
        assert list(async_rows) == [("redis.asyncio", "INCR, 64 tasks")] + [
            (f"{name} (async)", mode.format("64 tasks")) for name, mode in CONCURRENT_ROWS
        ]
        assert list(thread_rows) == [("redis-py", "INCR, 16 threads")] + [
            (name, mode.format("16 threads")) for name, mode in CONCURRENT_ROWS
        ]
        for row in [*async_rows.values(), *thread_rows.values()]:
            assert row["ids"] > 0 and row["ids_per_s"] > 0 and row["ratio"] > 0
        assert list(server_rows)[:2] == [
            ("redis-py INCR", "INCRBY"),
            ("EVALSHA 'return 1'", "EVALSHA"),
        ]
        assert ("sequence next_id()", "MULTI+EXEC") in server_rows, "a transaction, no script"
        assert ("snowflake next_id()", "EVALSHA") in server_rows
        for row in server_rows.values():
            assert row["extra"]["cpu_usec_per_call"] > 0
            assert row["extra"]["commandstats_usec_per_call"] > 0
            assert (
                0 <= row["extra"]["system_cpu_usec_per_call"] <= row["extra"]["cpu_usec_per_call"]
            )
    else:
        assert list(async_rows) == [
            ("redis.asyncio", "INCR, 64 tasks"),
            ("sequence (async)", "next_id(), 64 tasks"),
        ]
        for row in [*async_rows.values(), *thread_rows.values(), *server_rows.values()]:
            assert row["ids"] == 0 and row["note"].startswith("n/a")
    targets = result["targets"]
    assert isinstance(targets, list)
    texts = " | ".join(target["target"] for target in targets)
    for name in TARGET_NAMES + (REAL_TARGET_NAMES if real else ()):
        assert name in texts
    assert all(isinstance(target["met"], bool) for target in targets)
    for target in targets:
        if target["measured"] is None:
            assert target["met"] is False and target["note"], target


def test_the_quick_benchmark_on_a_real_redis_reports_every_row(
    real_redis: redis.Redis, postgres_url: str, tmp_path: Path
) -> None:
    script = tmp_path / "stand_in.lua"
    script.write_text(STAND_IN_SCRIPT, encoding="utf-8")
    settings = bench.Settings(
        redis_url=REDIS_URL, pg_url=postgres_url, out_dir=tmp_path, quiet=True, peer_script=script
    ).quick()
    result = bench.run(settings)
    _check_result(result, real=True)
    assert (bench.HENGYUNABC, "EVALSHA") in _by_name(result["server"])
    peers = _by_name(result["strategies"])
    for key in PEERS:
        assert peers[key]["ids"] > 0 and peers[key]["ratio"] > 0, key
    assert peers[("PostgreSQL", "nextval() × 1000")]["ids"] % 1000 == 0
    assert result["machine"]["redis_server"], "the server version is recorded"
    assert result["machine"]["postgresql_server"], "and PostgreSQL's"
    nextval = next(t for t in result["targets"] if "nextval" in t["target"])
    assert nextval["measured"] > 0
    asyncio_incr = result["async"][0]
    assert asyncio_incr["ids"] > 0 and asyncio_incr["ratio"] == 1.0
    text = bench.render(result)
    assert "sequence" in text and "× INCR" in text and "Targets:" in text
    assert "× redis.asyncio INCR" in text and "nextval()" in text
    markdown = bench.render(result, markdown=True)
    assert "| strategy | call |" in markdown
    prefix = result["key_prefix"]
    assert not list(real_redis.scan_iter(match=f"{prefix}:*")), "keys deleted"
    assert not list(real_redis.scan_iter(match=f"nextid:{prefix}:*")), "pottery's key too"
    with psycopg.connect(bench.pg_dsn(postgres_url)) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relname = %s",
            (f"{prefix}_seq",),
        ).fetchone()
    assert left == (0,), "the sequence is dropped"


def test_sa_redis_ids_bench_ids_writes_json_on_the_embedded_redis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(bench.URL_ENV, raising=False)
    monkeypatch.setenv(bench.PG_ENV, UNREACHABLE_PG)
    status = main(["bench", "ids", "--quick", "--quiet", "--no-chart", "--out", str(tmp_path)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "Targets:" in printed
    assert "n/a: the embedded Redis lives in one process" in printed
    assert "not reachable" in printed
    written = sorted(tmp_path.glob("ids-2*.json"))
    assert len(written) == 1
    result = json.loads(written[0].read_text(encoding="utf-8"))
    assert result == json.loads((tmp_path / "ids-latest.json").read_text(encoding="utf-8"))
    _check_result(result, real=False)
    assert result["settings"]["buffered_ids"] == bench.Settings().quick().buffered_ids
    peers = _by_name(result["strategies"])
    for mode in ("nextval()", "nextval() × 1000"):
        row = peers[("PostgreSQL", mode)]
        assert row["ids"] == 0 and "not reachable" in row["note"]
        assert "postgresql://postgres@127.0.0.1:1/test" in row["note"]
    nextval = next(t for t in result["targets"] if "nextval" in t["target"])
    assert nextval["measured"] is None and nextval["met"] is False
    assert "postgresql_server" not in result["machine"]


def test_pg_dsn_accepts_libpq_and_sqlalchemy_urls() -> None:
    assert bench.pg_dsn("postgresql+psycopg://u@h:5432/d") == "postgresql://u@h:5432/d"
    assert bench.pg_dsn("postgresql://u@h/d") == "postgresql://u@h/d"
    assert bench.pg_dsn("host=h dbname=d") == "host=h dbname=d"


def test_the_concurrency_rows_share_a_generator_among_threads_and_tasks(
    real_redis: redis.Redis,
) -> None:
    prefix = "benchtest_concurrency"
    settings = bench.Settings(
        redis_url=REDIS_URL,
        async_ids=256,
        async_rounds=2,
        async_tasks=8,
        concurrent_threads=4,
        threads_ids=128,
    )
    try:
        async_rows = bench._measure_async(settings, prefix)
        thread_rows = bench._measure_threads(settings, prefix)
    finally:
        for key in real_redis.scan_iter(match=f"{prefix}:*"):
            real_redis.delete(key)
    assert [(r.strategy, r.mode) for r in async_rows] == [("redis.asyncio", "INCR, 8 tasks")] + [
        (f"{name} (async)", mode.format("8 tasks")) for name, mode in CONCURRENT_ROWS
    ]
    assert [(r.strategy, r.mode) for r in thread_rows] == [("redis-py", "INCR, 4 threads")] + [
        (name, mode.format("4 threads")) for name, mode in CONCURRENT_ROWS
    ]
    assert all(r.ids == 256 and r.ids_per_s > 0 and r.ratio for r in async_rows)
    assert all(r.ids == 128 and r.ids_per_s > 0 and r.ratio for r in thread_rows)
    assert async_rows[0].ratio == thread_rows[0].ratio == 1.0
    for row in async_rows + thread_rows:  # the server's CPU per ID, beside the INCR peer's
        assert row.extra["server_cpu_us_per_id"] > 0, row
        assert row.note.startswith("server CPU ") and row.note.endswith("× INCR's"), row.note
    found = bench.targets([], [], async_rows, thread_rows)
    assert [t["target"] for t in found] == [
        f"{name} next_id() at {what} >= {goal}× IDs/s of {peer}"
        for what, goal, peer in (
            ("8 tasks", 5, "redis.asyncio INCR"),
            ("4 threads", 3, "redis-py INCR"),
        )
        for name in ("sequence", "snowflake", "daily_code")
    ]
    assert found[0]["measured"] == round(async_rows[1].ratio or 0, 2)


@pytest.mark.parametrize("unix_socket", [False, True], ids=["tcp", "unix-socket"])
def test_the_server_cost_benchmark_reports_every_strategy_against_incr(unix_socket: bool) -> None:
    rows = server_cost.run(50, 1, unix_socket=unix_socket)
    assert [row[0] for row in rows] == [
        "redis-py INCR",
        "sequence next_id()",
        "date_prefixed next_id()",
        "daily_code next_id()",
        "snowflake next_id()",
        "short_id next_id()",
    ]
    assert rows[0][2] == rows[0][4] == 1.0
    for _, script, versus, cpu, cpu_versus, system in rows:
        assert script > 0 and versus > 0 and cpu > 0 and cpu_versus > 0
        assert 0 <= system <= cpu


class _ScriptedServer:
    """``INFO`` of a server where each call of a contender costs known CPU and commandstats time,
    round by round: `measure_server`'s arithmetic, without a real server's noise."""

    def __init__(self, calls_per_round: int) -> None:
        self.per_round = calls_per_round
        self.user = self.sys = 0.0
        self.calls = {"incrby": 0, "evalsha": 0}
        self.usec = {"incrby": 0, "evalsha": 0}

    def contender(
        self, command: str, cpu: list[float], sys: list[float], usec: int
    ) -> Callable[[], None]:
        """A call of ``command`` costing ``cpu[r]`` µs of CPU, ``sys[r]`` of them the kernel's,
        in round ``r``."""

        made = 0

        def call() -> None:
            nonlocal made
            round_ = made // self.per_round
            made += 1
            self.user += (cpu[round_] - sys[round_]) / 1e6
            self.sys += sys[round_] / 1e6
            self.calls[command] += 1
            self.usec[command] += usec

        return call

    def info(self, section: str) -> dict[str, Any]:
        if section == "cpu":
            return {"used_cpu_user": self.user, "used_cpu_sys": self.sys}
        return {
            f"cmdstat_{command}": {"calls": self.calls[command], "usec": self.usec[command]}
            for command in self.calls
        }


def test_measure_server_keeps_the_median_round_and_the_median_of_the_ratios_within_rounds() -> None:
    """Round 2 is a slow moment for both contenders, round 4 reads no CPU for the INCR (no ratio
    from it). The median of the ratios within rounds (1.6) is neither the ratio of the medians
    (37.5 / 25 = 1.5) nor of the lowest rounds (30 / 25 = 1.2)."""
    server = _ScriptedServer(calls_per_round=10)
    incr = server.contender("incrby", [25, 25, 50, 25, 0, 25], [20, 20, 40, 20, 0, 20], 1)
    script = server.contender("evalsha", [35, 30, 100, 45, 35, 40], [21, 21, 61, 21, 22, 23], 6)
    unknown = server.contender("incrby", [25] * 6, [20] * 6, 1)
    costs = server_info.measure_server(
        server,
        {"INCR": (incr, "incrby"), "script": (script, "evalsha"), "miscounted": (unknown, "get")},
        calls=10,
        rounds=6,
    )
    first, scripted, miscounted = costs
    assert (first.name, first.command, first.calls) == ("INCR", "incrby", 60)
    assert first.usec == pytest.approx(1.0) and scripted.usec == pytest.approx(6.0)
    assert first.cpu == pytest.approx(25.0) and first.ratio == pytest.approx(1.0)
    assert first.system == pytest.approx(20.0)
    assert scripted.cpu == pytest.approx(37.5), "the median round, not the lowest or the mean"
    assert scripted.ratio == pytest.approx(1.6)
    assert scripted.system == pytest.approx(21.5), "the median round's, not the mean (28.2)"
    assert math.isnan(miscounted.usec), "a command that never showed up has no time"
    with pytest.raises(ValueError):
        server_info.measure_server(server, {"INCR": (incr, "incrby")}, calls=0, rounds=1)


def test_the_callgrind_server_cost_counts_every_strategy_above_an_incr() -> None:
    """Instruction counts, not times: every script runs an INCRBY or HSET and more besides, so
    each strategy's count is above an INCR's on any machine."""
    require_binary("valgrind")
    require_binary("callgrind_control")
    rows = server_cost.run_callgrind(20)
    assert [row[0] for row in rows][1:] == [
        "sequence next_id()",
        "date_prefixed next_id()",
        "daily_code next_id()",
        "snowflake next_id()",
        "short_id next_id()",
    ]
    incr = rows[0][1]
    assert isinstance(incr, int) and incr > 0
    for _, count, versus in rows[1:]:
        assert isinstance(count, int) and count > incr and versus > 1.0
