"""The ORM benchmark runs end to end on a few rows and produces a well-formed result.

Timing is not asserted (shared, noisy machine); ``benchmarks/orm_insert.py`` reports it. What is
asserted: every strategy present, the autoincrement table and the UUIDv7 table are measured on
SQLite and PostgreSQL through both paths, one Redis round trip per flush/statement, the size of
every PostgreSQL table after the insert, and the JSON the CLI writes.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis

from benchmarks import orm_insert
from sa_redis_ids.cli import main
from tests.support.services import REDIS_URL


def test_the_benchmark_measures_every_strategy_on_both_databases(
    real_redis: redis.Redis, postgres_url: str, tmp_path: Path
) -> None:
    sqlite_url = f"sqlite:///{tmp_path / 'bench.sqlite3'}"
    result = orm_insert.run(
        rows=120, redis_url=REDIS_URL, db_urls=[sqlite_url, postgres_url], repeat=1
    )
    tables = ["autoincrement", *orm_insert.STRATEGIES, "uuid7"]
    measured = {(r["database"], r["path"], r["table"]) for r in result["results"]}
    assert measured == {
        (db, path, table)
        for db in ("sqlite", "postgresql")
        for path in orm_insert.PATHS
        for table in tables
    }
    for row in result["results"]:
        assert row["rows"] == 120 and row["seconds"] > 0 and row["rows_per_s"] > 0
        if row["table"] == "autoincrement":
            assert row["ratio"] is None and row["round_trips"] is None
        elif row["table"] == "uuid7":
            assert row["ratio"] > 0 and row["round_trips"] is None, "no Redis behind it"
        else:
            assert row["ratio"] > 0
            assert row["round_trips"] == 1, row
        sizes = [row["total_bytes"], row["table_bytes"], row["index_bytes"]]
        if row["database"] == "postgresql":
            assert all(isinstance(size, int) and size > 0 for size in sizes), row
            assert row["total_bytes"] >= row["table_bytes"] + row["index_bytes"], row
        else:
            assert sizes == [None, None, None], row
    assert result["machine"]["postgresql_server"], "PostgreSQL's version is recorded"
    assert result["uuid7"] == "measured"
    trip_targets = [t for t in result["targets"] if "round trip" in t["target"]]
    assert len(trip_targets) == 2 * 2 * len(orm_insert.STRATEGIES)
    assert all(t["met"] for t in trip_targets)
    assert not [t for t in result["targets"] if "uuid7" in t["target"]], "a peer has no targets"
    text = orm_insert.render(result)
    assert "× autoincrement" in text and "Targets:" in text and "index KiB" in text
    prefix = result["redis_prefix"]
    assert not list(real_redis.scan_iter(match=f"{prefix}:*", count=1000)), "its keys are deleted"


def test_sa_redis_ids_bench_orm_writes_json(
    real_redis: redis.Redis, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    status = main(
        [
            "bench",
            "orm",
            "--rows",
            "30",
            "--repeat",
            "1",
            "--redis-url",
            REDIS_URL,
            "--db-url",
            f"sqlite:///{tmp_path / 'cli.sqlite3'}",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert status == 0
    printed = capsys.readouterr().out
    assert "sqlite" in printed and "JSON:" in printed
    latest = json.loads((out / "orm_insert-latest.json").read_text())
    assert latest["rows"] == 30 and latest["benchmark"] == "orm_insert"
    assert {r["table"] for r in latest["results"]} == {
        "autoincrement",
        *orm_insert.STRATEGIES,
        "uuid7",
    }
    assert all(r["total_bytes"] is None for r in latest["results"]), "sizes: PostgreSQL only"


def test_a_libpq_postgresql_url_is_read_with_psycopg() -> None:
    found = orm_insert._sqlalchemy_pg("postgresql://postgres@127.0.0.1:5432/test")
    assert found == "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    same = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    assert orm_insert._sqlalchemy_pg(same) == same


def test_uuid7_gives_standard_library_uuids_led_by_the_time() -> None:
    first, second = orm_insert.uuid7(), orm_insert.uuid7()
    assert isinstance(first, uuid.UUID) and first.version == 7
    assert first.int >> 80 <= second.int >> 80, "the leading 48 bits are the time in ms"
