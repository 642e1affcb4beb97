"""The command line for Snowflake and ShortId: ``next --strategy …`` and ``parse``."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest
import redis

from sa_redis_ids.cli import main
from sa_redis_ids.generators.snowflake import LAYOUTS
from tests.support.services import REDIS_URL

SEED_003_ID = "5981966696448054276"


@pytest.fixture(autouse=True)
def _embedded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)


def _status(argv: list[str]) -> int:
    """The exit status, whether ``main`` returns it or argparse exits."""
    try:
        return main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


def _out(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().out.split()


def test_parse_decodes_the_seed_003_id_with_the_compat_layout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", SEED_003_ID, "--strategy", "snowflake", "--layout", "compat"]) == 0
    lines = capsys.readouterr().out.splitlines()
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in lines}
    assert fields == {
        "strategy": "snowflake",
        "value": SEED_003_ID,
        "timestamp": "2015-03-13T02:00:00+00:00",
        "ms": "1426212000000",
        "shard": "53",
        "sequence": "4",
    }


def test_parse_json_and_custom_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", SEED_003_ID, "--layout", "0:41/12/10", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["ms"], record["shard"], record["sequence"]) == (1426212000000, 53, 4)


def test_next_then_parse_a_snowflake_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "orders", "--strategy", "snowflake", "-n", "3", "--shard", "7"]) == 0
    values = [int(v) for v in _out(capsys)]
    assert len(values) == 3 and values == sorted(set(values))
    # --strategy: a fresh snowflake's digits can also read as a plausible date-prefixed day
    # (see the ambiguity test in tests/test_cli_ops.py), so recognition depends on the hour.
    assert main(["parse", str(values[-1]), "--strategy", "snowflake", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["shard"] == 7
    parts = LAYOUTS["default"].parse(values[-1])
    assert datetime.fromisoformat(record["timestamp"]) == parts.timestamp


def test_next_snowflake_js_safe_and_compat(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "js", "--strategy", "snowflake", "--layout", "js_safe", "-n", "2"]) == 0
    assert all(int(v) <= 2**53 - 1 for v in _out(capsys))
    assert main(["next", "old", "--strategy", "snowflake", "--layout", "compat"]) == 0
    captured = capsys.readouterr()
    assert "2039" in captured.err
    (value,) = captured.out.split()
    assert LAYOUTS["compat"].parse(int(value)).timestamp.year >= 2026


def test_next_short_id_draws_from_the_pool(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["next", "members", "--strategy", "short_id", "--pool-size", "10", "--offset", "100"]
    assert main([*args, "-n", "10"]) == 0
    assert sorted(int(v) for v in _out(capsys)) == list(range(100, 110))
    assert main(["next", "members", "--strategy", "short_id", "-n", "3"]) == 0
    assert all(10_000_000 <= int(v) <= 19_999_999 for v in _out(capsys))


def test_next_on_a_real_redis_continues_across_commands(
    capsys: pytest.CaptureFixture[str], real_redis: redis.Redis
) -> None:
    prefix = f"cliC{os.getpid()}"
    common = ["--redis-url", REDIS_URL, "--prefix", prefix]
    pool = ["--strategy", "short_id", "--pool-size", "6", "--offset", "0"]
    try:
        assert main(["next", "m", *pool, "-n", "4", "--new", *common]) == 0
        assert main(["next", "m", *pool, "-n", "2", *common]) == 0
        assert sorted(int(v) for v in _out(capsys)) == list(range(6))
        assert main(["next", "m", *pool, *common]) == 1
        assert "no value left" in capsys.readouterr().err
        assert main(["next", "o", "--strategy", "snowflake", "-n", "2", "--new", *common]) == 0
        assert main(["next", "o", "--strategy", "snowflake", *common]) == 0
        values = [int(v) for v in _out(capsys)]
        assert values == sorted(set(values)) and len(values) == 3
    finally:
        for key in real_redis.scan_iter(match=f"{prefix}:*"):
            real_redis.delete(key)


@pytest.mark.parametrize(
    ("argv", "status", "message"),
    [
        (["parse", "abc"], 1, "'abc' is not an ID: write its digits 0-9 only"),
        (["parse", "-5"], 1, "'-5' is not an ID: write its digits 0-9 only"),
        (["parse", str(2**63)], 1, "not an ID of this layout"),
        (["parse", "1", "--layout", "0:42/12/10"], 2, "at most 63"),
        (["parse", "1", "--layout", "twitter"], 2, "not a layout"),
        (["next", "o", "--strategy", "snowflake", "--shard", "4096"], 2, "must be 0 to 4095"),
        (["next", "o", "--strategy", "short_id", "--pool-size", "0"], 1, "pool_size=0"),
        (["next", "o", "--strategy", "snowflake", "--tolerance-ms", "-1"], 1, "tolerance_ms=-1"),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    capsys: pytest.CaptureFixture[str], argv: list[str], status: int, message: str
) -> None:
    assert _status(argv) == status
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1, err


def test_parse_date_prefixed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "2026112200000000042", "--strategy", "date_prefixed", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["day"], record["counter"]) == ("2026-11-22", 42)
    assert main(["parse", "2026133100000000042", "--strategy", "date_prefixed"]) == 1
    assert "does not start with a YYYYMMDD date" in capsys.readouterr().err
