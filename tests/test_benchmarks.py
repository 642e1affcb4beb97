"""Smoke tests of the IDs benchmark: it runs end to end and reports well-formed results.

Speed is never asserted here (a shared, noisy machine); the benchmark itself states the targets.
"""

from __future__ import annotations

import asyncio
import json
import sys
import types
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.asyncio

from benchmarks import ids as bench
from benchmarks import server_cost
from sa_redis_ids.cli import main
from tests.support.services import REDIS_URL

TARGET_NAMES = (
    "sequence next_id() latency <= 1.10× PING",
    "date_prefixed next_id() latency <= 1.25× PING",
    "at least as fast as PostgreSQL nextval() per ID",
    "next_ids(1000) >= 100×",
    "300× unbuffered INCR",
    "1,000,000 IDs/s",
    ">= 0.8× IDs/s of redis.asyncio INCR",
)

PEERS = [
    ("redis-py", "INCR"),
    ("PostgreSQL", "nextval()"),
    ("PostgreSQL", "nextval() × 1000"),
    ("pottery", "NextID"),
    ("uuid-utils", "uuid7()"),
    ("snowflake-id", "next()"),
]

UNREACHABLE_PG = "postgresql://postgres@127.0.0.1:1/test"
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
    assert list(async_rows) == [
        ("redis.asyncio", "INCR, 64 tasks"),
        ("sequence (async)", "next_id(), 64 tasks"),
    ]
    incr = async_rows[("redis.asyncio", "INCR, 64 tasks")]
    assert bool(incr["ids"]) == real
    mine = async_rows[("sequence (async)", "next_id(), 64 tasks")]
    if mine["ids"]:
        assert mine["ids_per_s"] > 0 and mine["ratio"] > 0
    else:
        assert mine["note"].startswith("not available" if real else "n/a")
    targets = result["targets"]
    assert isinstance(targets, list)
    texts = " | ".join(target["target"] for target in targets)
    for name in TARGET_NAMES:
        assert name in texts
    assert all(isinstance(target["met"], bool) for target in targets)
    for target in targets:
        if target["measured"] is None:
            assert target["met"] is False and target["note"], target


def test_the_quick_benchmark_on_a_real_redis_reports_every_row(
    real_redis: redis.Redis, postgres_url: str, tmp_path: Path
) -> None:
    settings = bench.Settings(
        redis_url=REDIS_URL, pg_url=postgres_url, out_dir=tmp_path, quiet=True
    ).quick()
    result = bench.run(settings)
    _check_result(result, real=True)
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


class _StubSequence:
    def __init__(self, client: redis.asyncio.Redis, key: str):
        self.client = client
        self.key = key

    async def next_id(self) -> int:
        return int(await self.client.incr(self.key))

    async def next_ids(self, n: int) -> list[int]:
        last = int(await self.client.incrby(self.key, n))
        return list(range(last - n + 1, last + 1))


class _StubAsyncRedisIds:
    """The shape the benchmark expects of ``sa_redis_ids.asyncio.AsyncRedisIds``."""

    closed = False

    def __init__(self, url: str, prefix: str):
        self.client = redis.asyncio.Redis.from_url(url)
        self.prefix = prefix

    @classmethod
    def from_url(cls, url: str, *, prefix: str) -> _StubAsyncRedisIds:
        return cls(url, prefix)

    def sequence(self, namespace: str) -> _StubSequence:
        return _StubSequence(self.client, f"{self.prefix}:{namespace}")

    async def aclose(self) -> None:
        type(self).closed = True
        await self.client.aclose()


def test_the_async_rows_measure_an_async_front_end_when_one_imports(
    real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType("sa_redis_ids.asyncio")
    module.AsyncRedisIds = _StubAsyncRedisIds  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sa_redis_ids.asyncio", module)
    prefix = "benchtest_async"
    settings = bench.Settings(redis_url=REDIS_URL, async_ids=256, async_rounds=2, async_tasks=8)
    try:
        rows = asyncio.run(bench._measure_async(settings, prefix))
    finally:
        for key in real_redis.scan_iter(match=f"{prefix}:*"):
            real_redis.delete(key)
    assert [(r.strategy, r.mode) for r in rows] == [
        ("redis.asyncio", "INCR, 8 tasks"),
        ("sequence (async)", "next_id(), 8 tasks"),
    ]
    assert all(r.ids == 256 and r.ids_per_s > 0 and r.ratio for r in rows)
    assert rows[0].ratio == 1.0
    assert _StubAsyncRedisIds.closed, "the front end is closed"
    (target,) = bench.targets([], [], rows)
    assert "at 8 tasks" in target["target"] and isinstance(target["met"], bool)
    assert target["measured"] == round(rows[1].ratio or 0, 3)


def test_the_server_cost_benchmark_reports_every_strategy_against_incr() -> None:
    rows = server_cost.run(50, 1)
    assert [row[0] for row in rows] == [
        "redis-py INCR",
        "sequence next_id()",
        "date_prefixed next_id()",
        "daily_code next_id()",
        "snowflake next_id()",
        "short_id next_id()",
    ]
    assert rows[0][2] == rows[0][4] == 1.0
    for _, script, versus, cpu, cpu_versus in rows:
        assert script > 0 and versus > 0 and cpu >= 0 and cpu_versus >= 0
