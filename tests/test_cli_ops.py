"""The operator's command line: --version, --json, status, claims, the embedded-Redis guard of
maintain and reseed, and progress."""

from __future__ import annotations

import io
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from sqlalchemy import BigInteger, Column, MetaData, Table, create_engine, insert

from sa_redis_ids import RedisIds
from sa_redis_ids.cli import bench, claims, main, version
from sa_redis_ids.cli.output import Progress
from sa_redis_ids.generators.snowflake import LAYOUTS
from tests.support.servers import RedisClusterProcesses, RedisServer
from tests.support.services import REDIS_URL


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)
    monkeypatch.delenv("SA_REDIS_IDS_DB_URL", raising=False)


def _status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def prefix(real_redis: redis.Redis) -> Iterator[str]:
    found = f"ops{uuid.uuid4().hex[:10]}"
    yield found
    for key in list(real_redis.scan_iter(match=f"{found}:*")):
        real_redis.delete(key)


def on_redis(prefix: str, *argv: str, urls: tuple[str, ...] = (REDIS_URL,)) -> list[str]:
    options = [part for url in urls for part in ("--redis-url", url)]
    return [*argv, *options, "--prefix", prefix]


# -- --version and next --json -----------------------------------------------------------------


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert _status(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"sa-redis-ids {metadata.version('sa_redis_ids')}"
    assert version() == metadata.version("sa_redis_ids")


def test_version_falls_back_to_the_package_version(monkeypatch: pytest.MonkeyPatch) -> None:
    import sa_redis_ids

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert version() == sa_redis_ids.__version__


def test_next_json_is_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "users", "-n", "3", "--start", "10", "--json"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    assert json.loads(out) == {
        "namespace": "users",
        "strategy": "sequence",
        "config": "sequence:start=10",
        "ids": [10, 11, 12],
    }
    assert main(["next", "c", "--strategy", "daily_code", "--code-prefix", "AB", "--json"]) == 0
    (code,) = json.loads(capsys.readouterr().out)["ids"]
    assert isinstance(code, str) and code.startswith("AB")


def test_json_errors_stay_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["next", "users", "--json", "--redis-url", "redis://127.0.0.1:1/0"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unavailable" in _one_line_error(captured.err)


# -- status ------------------------------------------------------------------------------------


def _fill(ids: RedisIds) -> None:
    ids.sequence("users").next_ids(5)
    ids.date_prefixed("invoices").next_ids(2)
    ids.daily_code("codes", code_prefix="OR", digits=5).next_id()
    ids.snowflake("orders").next_ids(3)
    ids.short_id("members", pool_size=100, offset=0).next_ids(10)


def _by_namespace(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        ns["namespace"]: {each["strategy"]: each for each in ns["strategies"]}
        for ns in report["namespaces"]
    }


def test_status_on_a_real_redis_text_and_json(
    prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _fill(RedisIds.from_url(REDIS_URL, prefix=prefix))
    assert main(on_redis(prefix, "status", "--json")) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    report = json.loads(out)
    assert report["prefix"] == prefix and report["ok"] is True
    (node,) = report["nodes"]
    assert node["reachable"] is True and node["error"] is None
    (server,) = node["servers"]
    assert server["maxmemory_policy"]
    assert server["role"] == "master" and isinstance(server["connected_replicas"], int)
    assert server["appendonly"] in ("yes", "no") and server["save"] is not None
    assert "rdb_last_bgsave_status" in server["persistence"]
    found = _by_namespace(report)
    assert set(found) == {"users", "invoices", "codes", "orders", "members"}
    users = found["users"]["sequence"]
    assert users["config"] == "sequence:start=1" and users["consistent"] is True
    (entry,) = users["nodes"]
    assert entry["claim"] == "0/1|sequence:start=1"
    assert entry["counters"] == {"counter": 5}
    invoices = found["invoices"]["date_prefixed"]["nodes"][0]["counters"]
    assert len(invoices["days"]) == 1 and invoices["purged_through"] is None
    codes = found["codes"]["daily_code"]["nodes"][0]["counters"]
    assert len(codes["days"]) == 1
    orders = found["orders"]["snowflake"]["nodes"][0]["counters"]
    assert orders["last_ms"] > 0 and orders["last_slot"] >= 0
    assert orders["last_time"].startswith("20")
    members = found["members"]["short_id"]
    assert (members["pool_size"], members["taken"], members["fill"]) == (100, 10, 0.1)
    assert members["nodes"][0]["counters"] == {"taken": 10, "share": 100, "fill": 0.1}

    assert main(on_redis(prefix, "status")) == 0
    text = capsys.readouterr().out
    assert "node 0 127.0.0.1:" in text and "maxmemory-policy" in text
    assert "users [sequence] sequence:start=1" in text
    assert "counter 5" in text and "10 of 100 taken (10.00%)" in text

    assert main(on_redis(prefix, "status", "users", "--json")) == 0
    only = json.loads(capsys.readouterr().out)
    assert [ns["namespace"] for ns in only["namespaces"]] == ["users"]
    assert main(on_redis(prefix, "status", "nobody", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["namespaces"] == [
        {"namespace": "nobody", "strategies": []}
    ]


def test_status_on_the_embedded_redis(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["namespaces"] == []
    (node,) = report["nodes"]
    assert (node["name"], node["url"], node["reachable"]) == ("embedded", "embedded", True)
    assert main(["status"]) == 0
    assert "namespaces: none found" in capsys.readouterr().out


def test_status_reads_an_embedded_redis_that_holds_data(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sa_redis_ids.cli import probe
    from sa_redis_ids.redis.connect import embedded_client

    client = embedded_client()
    _fill(RedisIds(client))
    monkeypatch.setattr(probe, "embedded_client", lambda: client)
    assert main(["status", "--json"]) == 0
    found = _by_namespace(json.loads(capsys.readouterr().out))
    assert found["users"]["sequence"]["nodes"][0]["counters"] == {"counter": 5}
    assert found["members"]["short_id"]["taken"] == 10


def test_status_reports_a_stopped_node_and_reads_the_others(
    redis_servers: Callable[[int], list[RedisServer]], capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = redis_servers(2)
    users = RedisIds.from_urls([first.url, second.url], prefix="st").sequence("users")
    for _ in range(4):  # the calls take turns: both nodes record a claim
        users.next_id()
    second.stop()  # by its own pid
    urls = ["--redis-url", first.url, "--redis-url", second.url, "--prefix", "st"]
    assert main(["status", "--json", *urls]) == 1
    captured = capsys.readouterr()
    assert "1 of 2 nodes did not answer (node 1)" in _one_line_error(captured.err)
    report = json.loads(captured.out)
    assert report["ok"] is False
    up, down = report["nodes"]
    assert up["reachable"] is True and down["reachable"] is False
    assert "Connection" in down["error"]
    users = _by_namespace(report)["users"]["sequence"]
    live, gone = users["nodes"]
    assert live["claim"] == "0/2|sequence:start=1" and live["counters"]["counter"] >= 1
    assert gone["reachable"] is False and gone["claim"] is None
    assert main(["status", *urls]) == 1
    text = capsys.readouterr().out
    assert "node 1 " in text and "DOWN" in text and "claim 0/2|sequence:start=1" in text


def test_status_on_a_cluster(
    redis_cluster: RedisClusterProcesses,
    cluster_client: RedisCluster,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"opc{uuid.uuid4().hex[:8]}"
    ids = RedisIds.from_url(redis_cluster.url, cluster=True, prefix=prefix)
    try:
        for namespace in ("a", "b", "c", "d"):  # spread over the cluster's slots
            ids.sequence(namespace).next_ids(2)
        ids.short_id("m", pool_size=50, offset=0).next_ids(5)
        argv = ["status", "--json", "--cluster", "--redis-url", redis_cluster.url]
        assert main([*argv, "--prefix", prefix]) == 0
        report = json.loads(capsys.readouterr().out)
        (node,) = report["nodes"]
        assert node["name"].startswith("cluster@") and node["reachable"] is True
        assert len(node["servers"]) == 3
        assert {server["role"] for server in node["servers"]} == {"master"}
        found = _by_namespace(report)
        assert set(found) == {"a", "b", "c", "d", "m"}
        assert found["c"]["sequence"]["nodes"][0]["counters"] == {"counter": 2}
        assert found["m"]["short_id"]["taken"] == 5
        assert (
            main(["status", "--cluster", "--redis-url", redis_cluster.url, "--prefix", prefix]) == 0
        )
        assert "cluster@" in capsys.readouterr().out
    finally:
        for key in list(cluster_client.scan_iter(match=f"{prefix}:*")):
            cluster_client.delete(key)


# -- claims --------------------------------------------------------------------------------------


def test_claims_show(prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=prefix)
    ids.sequence("users").next_id()
    ids.date_prefixed("users").next_id()
    assert main(on_redis(prefix, "claims", "show", "users", "--json")) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["namespace"] == "users" and record["ok"] is True
    by_strategy = {claim["strategy"]: claim for claim in record["claims"]}
    assert set(by_strategy) == {"sequence", "date_prefixed"}
    assert by_strategy["sequence"]["key"] == f"{prefix}:{{users}}:seq:node"
    assert by_strategy["sequence"]["nodes"][0]["claim"] == "0/1|sequence:start=1"
    assert main(on_redis(prefix, "claims", "show", "users")) == 0
    assert "node 0 127.0.0.1:6379/0: 0/1|sequence:start=1" in capsys.readouterr().out
    assert main(on_redis(prefix, "claims", "show", "other")) == 0
    assert "no node records a claim" in capsys.readouterr().out


def test_claims_clear_needs_yes_without_a_terminal(
    prefix: str,
    real_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=prefix)
    ids.sequence("users").next_ids(3)
    ids.sequence("others").next_id()
    marker = f"{prefix}:{{users}}:identity"
    assert real_redis.exists(marker), "the namespace's identity marker stands for its claim"
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a terminal
    assert main(on_redis(prefix, "claims", "clear", "users")) == 1
    assert "--yes" in _one_line_error(capsys.readouterr().err)
    assert real_redis.exists(f"{prefix}:{{users}}:seq:node")

    assert main(on_redis(prefix, "claims", "clear", "users", "--yes", "--json")) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["count"] == 1
    assert record["deleted"] == [
        {
            "index": 0,
            "name": "127.0.0.1:6379/0",
            "key": f"{prefix}:{{users}}:seq:node",
            "claim": "0/1|sequence:start=1",
        }
    ]
    assert not real_redis.exists(f"{prefix}:{{users}}:seq:node")
    assert not real_redis.exists(marker), "running generators check the claim key again"
    assert real_redis.get(f"{prefix}:{{users}}:seq") == b"3", "counters are kept"
    assert real_redis.exists(f"{prefix}:{{others}}:seq:node"), "other namespaces are kept"
    assert main(on_redis(prefix, "claims", "clear", "users", "--yes")) == 0
    assert "nothing to delete" in capsys.readouterr().out


def test_claims_clear_asks_on_a_terminal(
    prefix: str,
    real_redis: redis.Redis,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    RedisIds.from_url(REDIS_URL, prefix=prefix).sequence("users").next_id()
    key = f"{prefix}:{{users}}:seq:node"
    monkeypatch.setattr(claims, "_stdin_is_terminal", lambda: True)
    monkeypatch.setattr(sys, "stdin", io.StringIO("n\n"))
    assert main(on_redis(prefix, "claims", "clear", "users")) == 1
    captured = capsys.readouterr()
    assert "[y/N]" in captured.err and "not confirmed" in captured.err
    assert "Delete this 1 claim key of users?" in captured.err
    assert real_redis.exists(key)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    assert main(on_redis(prefix, "claims", "clear", "users")) == 0
    out = capsys.readouterr().out
    assert f"deleted on node 0 127.0.0.1:6379/0: {key}" in out
    assert "1 claim key of users deleted" in out
    assert not real_redis.exists(key)


def test_claims_clear_on_several_nodes_and_refusal_with_a_node_down(
    redis_servers: Callable[[int], list[RedisServer]], capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = redis_servers(2)
    urls = ["--redis-url", first.url, "--redis-url", second.url]
    users = RedisIds.from_urls([first.url, second.url], prefix="cc").sequence("users")
    for _ in range(4):  # the calls take turns: both nodes record a claim
        users.next_id()
    assert main(["claims", "clear", "users", "--yes", "--json", *urls, "--prefix", "cc"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert sorted((d["index"], d["claim"]) for d in record["deleted"]) == [
        (0, "0/2|sequence:start=1"),
        (1, "1/2|sequence:start=1"),
    ]
    RedisIds.from_urls([first.url, second.url], prefix="cc").sequence("users").next_ids(4)
    second.stop()
    assert main(["claims", "clear", "users", "--yes", *urls, "--prefix", "cc"]) == 1
    assert "nothing deleted" in _one_line_error(capsys.readouterr().err)
    assert first.client().exists("cc:{users}:seq:node")


def test_claims_help_explains_when_clearing_is_right(capsys: pytest.CaptureFixture[str]) -> None:
    assert _status(["claims", "clear", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "changed on purpose" in text and "duplicate" in text and "--yes" in text


# -- maintain and reseed refuse the embedded Redis ------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["maintain", "--once", "--date-prefixed", "invoices"],
        ["reseed", "users", "--table", "t", "--db-url", "sqlite://", "--strategy", "sequence"],
    ],
)
def test_maintain_and_reseed_refuse_the_embedded_redis(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "--redis-url" in line and "--embedded" in line and "embedded" in line


def test_reseed_with_embedded_acts_on_the_embedded_redis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = f"sqlite:///{tmp_path / 'e.sqlite3'}"
    engine = create_engine(db)
    table = Table("items", MetaData(), Column("id", BigInteger, primary_key=True))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": 7}])
    engine.dispose()
    argv = ["reseed", "users", "--table", "items", "--db-url", db, "--strategy", "sequence"]
    assert main([*argv, "--embedded"]) == 0
    assert "max 7" in capsys.readouterr().out


# -- maintain and reseed --json -----------------------------------------------------------------


def test_maintain_json(prefix: str, capsys: pytest.CaptureFixture[str]) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=prefix)
    ids.date_prefixed("invoices").next_id()
    ids.short_id("members", pool_size=10, offset=0).next_ids(2)
    argv = on_redis(prefix, "maintain", "--once", "--json")
    assert main([*argv, "--date-prefixed", "invoices", "--short-id", "members"]) == 0
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    assert "day counters are not created" in captured.err
    assert list(record) == [
        "started_at",
        "ok",
        "skipped",
        "reason",
        "precreate",
        "counters",
        "pools",
        "errors",
    ]
    assert record["ok"] is True and record["precreate"] is False
    (counter,) = record["counters"]
    assert counter["namespace"] == "invoices" and counter["created"] == []
    (pool,) = record["pools"]
    assert (pool["namespace"], pool["issued"], pool["free"]) == ("members", 2, 8)


def test_reseed_json(prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    engine = create_engine(db)
    table = Table("items", MetaData(), Column("id", BigInteger, primary_key=True))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": v} for v in (5, 77)])
    engine.dispose()
    argv = ["reseed", "users", "--table", "items", "--db-url", db, "--strategy", "sequence"]
    assert main(on_redis(prefix, *argv, "--json")) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1
    record = json.loads(out)
    assert (record["namespace"], record["strategy"], record["kind"]) == (
        "users",
        "sequence",
        "counter",
    )
    assert record["recorded_claim"] is True and record["ok"] is True and record["rows"] == 2
    (step,) = record["steps"]
    assert step["table_max"] == 77 and step["day"] is None
    assert step["nodes"] == [
        {"node": "127.0.0.1:6379/0", "before": None, "after": 77, "raised": True}
    ]


# -- parse recognises shapes -------------------------------------------------------------------


def test_parse_recognises_a_date_prefixed_value_not_a_snowflake(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", "2026112200000000042", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "strategy": "date_prefixed",
        "recognised": True,
        "value": 2026112200000000042,
        "day": "2026-11-22",
        "counter": 42,
        "node_index": 0,
    }
    assert main(["parse", "2026112200000000042"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("strategy: date_prefixed (recognised from its shape")
    assert "2041" not in out


def test_parse_recognises_a_daily_code_of_any_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "OR20261122000123", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["strategy"], record["prefix"], record["day"], record["counter"]) == (
        "daily_code",
        "OR",
        "2026-11-22",
        123,
    )


UNAMBIGUOUS_MS = 1_795_835_900_000
"""2026-11-28 03:18:20 UTC: the default layout's IDs of that minute begin ``120000``, which no
date-prefixed format reads as a day (month 00, day 000, a year before 2000)."""


def test_parse_recognises_a_snowflake_and_a_sequence(capsys: pytest.CaptureFixture[str]) -> None:
    value = LAYOUTS["default"].compose(UNAMBIGUOUS_MS + 1234, shard=3, sequence=5)
    assert str(value).startswith("120000")
    assert main(["parse", str(value), "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["strategy"], record["shard"], record["ms"]) == (
        "snowflake",
        3,
        UNAMBIGUOUS_MS + 1234,
    )
    assert main(["parse", "42", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["strategy"], record["counter"]) == ("sequence", 42)


def test_parse_lists_the_readings_of_an_ambiguous_value(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", "2611220042"]) == 1
    captured = capsys.readouterr()
    assert "pass --strategy" in _one_line_error(captured.err)
    assert "as date_prefixed (fmt=YYMMDD, length=10):" in captured.out
    assert "as sequence:" in captured.out
    assert "2026-11-22" in captured.out
    assert main(["parse", "2611220042", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert record["ambiguous"] is True and record["value"] == "2611220042"
    readings = {(c["strategy"], c["options"].get("fmt")): c["parts"] for c in record["candidates"]}
    assert readings[("date_prefixed", "YYMMDD")]["day"] == "2026-11-22"
    assert readings[("sequence", None)]["counter"] == 2611220042


def test_a_snowflake_whose_digits_read_as_a_day_is_ambiguous(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A default-layout snowflake of 2026-11-28 04:15 UTC begins ``12001``: in the YYDDD format
    that is 2012-01-01, a plausible day, so both readings are listed (``--strategy`` picks one)."""
    assert main(["parse", "120014595657042944", "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    readings = {(c["strategy"], c["options"].get("fmt")): c["parts"] for c in record["candidates"]}
    assert readings[("date_prefixed", "YYDDD")]["day"] == "2012-01-01"
    assert readings[("snowflake", None)]["timestamp"].startswith("2026-11-28T04:15")
    assert main(["next", "o", "--strategy", "snowflake", "--shard", "3"]) == 0
    fresh = capsys.readouterr().out.strip()
    assert main(["parse", fresh, "--strategy", "snowflake", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["shard"] == 3


def test_parse_strategy_forces_one_reading(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "2026112200000000042", "--strategy", "snowflake", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["strategy"] == "snowflake" and record["recognised"] is False
    assert record["timestamp"].startswith("2041")
    assert main(["parse", "2611220042", "--strategy", "sequence", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["counter"] == 2611220042


def test_parse_options_narrow_the_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "2611220042", "--fmt", "YYMMDD", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["strategy"], record["counter"]) == ("date_prefixed", 42)


def test_parse_of_nothing_recognisable_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "hello"]) == 1
    line = _one_line_error(capsys.readouterr().err)
    assert "not recognised" in line and "--strategy" in line


# -- bench ---------------------------------------------------------------------------------------


def test_bench_outside_a_checkout_says_it_is_a_development_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "CHECKOUT", tmp_path)
    assert main(["bench", "ids", "--quick"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "development tool" in line and "source repository" in line


FAKE_BENCH = '''
"""A tiny benchmark for the command line's tests."""
import json
from pathlib import Path


class Progress:
    def __init__(self, total, *, stream=None, quiet=False):
        raise AssertionError("the command line draws the progress")


def add_arguments(parser):
    parser.add_argument("--out", type=Path, required=True)


def run_from_args(args):
    progress = Progress(3)
    for label in ("a", "b", "c"):
        progress.step(label)
    progress.finish()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fake-latest.json").write_text(json.dumps({"rows": [1, 2]}))
    print("a table for people")
    return 0
'''


def test_bench_json_and_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    package = tmp_path / f"fakebench{uuid.uuid4().hex[:6]}"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "mod.py").write_text(FAKE_BENCH)
    monkeypatch.setattr(bench, "CHECKOUT", tmp_path)
    monkeypatch.setitem(bench.TARGETS, "fake", (f"{package.name}.mod", "a test", "fake"))
    monkeypatch.setattr(sys, "path", list(sys.path))
    out_dir = tmp_path / "results"
    assert main(["bench", "fake", "--out", str(out_dir), "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"rows": [1, 2]}
    assert "a table for people" in captured.err
    assert "bench: 3/3 steps (c)" in captured.err  # plain lines: stderr is not a terminal
    assert main(["bench", "fake", "--out", str(out_dir)]) == 0
    assert "a table for people" in capsys.readouterr().out


# -- progress ------------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_plain_lines_off_a_terminal() -> None:
    stream = io.StringIO()
    with Progress(60, "reseed", unit="days", every=25, stream=stream) as progress:
        for _ in range(60):
            progress.update(1)
        assert not progress.is_bar
    assert stream.getvalue().splitlines() == [
        "reseed: 25/60 days",
        "reseed: 50/60 days",
        "reseed: 60/60 days",
    ]
    assert "\r" not in stream.getvalue()


def test_progress_is_a_tqdm_bar_on_a_terminal() -> None:
    stream = Terminal()
    with Progress(10, "bench", unit="steps", stream=stream) as progress:
        assert progress.is_bar
        progress.update(4, "INCR")
        progress.set_total(20)
    assert "\r" in stream.getvalue() and "bench" in stream.getvalue()
    quiet = io.StringIO()
    with Progress(3, "x", quiet=True, stream=quiet) as progress:
        progress.update(3)
    assert quiet.getvalue() == ""
