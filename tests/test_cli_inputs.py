"""The command line's inputs and words: IDs in ASCII digits only, what ``status`` says of the
embedded Redis, a reseed of a namespace it cannot raise, and reseed's progress (on stderr, bars
with totals, none for what never advances)."""

from __future__ import annotations

import io
import json
import re
import sys
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import redis
from sqlalchemy import BigInteger, Column, MetaData, Table, create_engine, insert

from sa_redis_ids import RedisIds
from sa_redis_ids.cli import main
from tests.support.services import REDIS_URL

NOT_ASCII_DIGITS = [" 12", "+12", "12_000", "2026_1124_0000_0000_001", "١٢", "１２", "12 ", "-12"]


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("text", NOT_ASCII_DIGITS)
def test_parse_takes_only_ascii_digits(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", text]) == 1
    assert "not recognised" in _one_line(capsys.readouterr().err)
    for strategy in ["sequence", "snowflake", "date_prefixed"]:
        assert main(["parse", text, "--strategy", strategy]) == 1
        assert "write its digits 0-9 only" in _one_line(capsys.readouterr().err)


@pytest.mark.parametrize("code", ["IS2026112５0001", "IS２0261125000１", "IS20261125 0001"])
def test_parse_takes_daily_codes_in_ascii_digits_only(
    code: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["parse", code]) == 1
    assert "not recognised" in _one_line(capsys.readouterr().err)
    assert main(["parse", code, "--strategy", "daily_code"]) == 1
    _one_line(capsys.readouterr().err)
    assert main(["parse", "IS202611250001"]) == 0
    assert "counter:" in capsys.readouterr().out


@pytest.mark.parametrize("text", [" 5", "+5", "5_0", "５"])
def test_integer_options_take_ascii_digits_only(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["next", "users", "--strategy", "sequence", "--start", text])
    assert exited.value.code == 2
    assert "is not an integer" in _one_line(capsys.readouterr().err)


def test_a_plain_number_read_as_a_sequence_says_a_short_id_looks_the_same(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["parse", "10000042"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("strategy: sequence (recognised from its shape")
    assert "a short_id value looks the same and has no parts" in first


def test_status_on_the_embedded_redis_says_what_it_is_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["status"]) == 0
    captured = capsys.readouterr()
    assert "unknown command" not in captured.out + captured.err
    assert captured.out.count("in-process Redis of this command: empty at every start") == 1
    assert main(["status", "--json"]) == 0
    (server,) = json.loads(capsys.readouterr().out)["nodes"][0]["servers"]
    assert server["notes"] == [] and "pass --redis-url" in server["about"]


@pytest.fixture
def prefix(real_redis: redis.Redis) -> Iterator[str]:
    found = f"cli{uuid.uuid4().hex[:10]}"
    yield found
    for key in list(real_redis.scan_iter(match=f"{found}:*")):
        real_redis.delete(key)


def test_reseed_of_a_snowflake_namespace_says_there_is_nothing_to_reseed(
    prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    RedisIds.from_url(REDIS_URL, prefix=prefix).snowflake("orders").next_id()
    db = f"sqlite:///{tmp_path / 'r.sqlite3'}"
    argv = ["reseed", "orders", "--table", "t", "--db-url", db, "--redis-url", REDIS_URL]
    assert main([*argv, "--prefix", prefix]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "snowflake claim" in line and "nothing to reseed" in line
    assert "no node records a claim" not in line


def _table(tmp_path: Path, name: str, values: list[int]) -> str:
    db = f"sqlite:///{tmp_path / 'p.sqlite3'}"
    engine = create_engine(db)
    table = Table(name, MetaData(), Column("id", BigInteger))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": value} for value in values])
    engine.dispose()
    return db


def _days_table(tmp_path: Path, days: int) -> tuple[str, list[str]]:
    invoices = RedisIds.embedded().date_prefixed("invoices", tz="UTC")
    today = datetime.now(timezone.utc).date()
    db = _table(
        tmp_path, "invoices", [invoices.compose(today - timedelta(days=d), 3) for d in range(days)]
    )
    options = ["--strategy", "date_prefixed", "--tz", "UTC", "--embedded"]
    return db, ["reseed", "invoices", "--table", "invoices", "--db-url", db, *options]


UNCOUNTED = re.compile(r"(?<![/\d.])\d+(days|values)")
"""A bar without a total (``2393days``) or an empty one (``0days``)."""


def test_reseed_progress_on_a_terminal_has_totals_and_no_empty_bars(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, argv = _days_table(tmp_path, 40)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(argv) == 0
    shown = terminal.getvalue()
    assert "/40 [" in shown and "days" in shown
    assert not UNCOUNTED.search(shown), shown
    assert "values" not in shown


def test_a_short_id_reseed_on_a_terminal_shows_one_bar_of_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = _table(tmp_path, "members", list(range(1000, 1300)))
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    options = ["--strategy", "short_id", "--pool-size", "1000", "--offset", "1000", "--embedded"]
    assert main(["reseed", "members", "--table", "members", "--db-url", db, *options]) == 0
    shown = terminal.getvalue()
    assert "/300 [" in shown and "values" in shown
    assert "days" not in shown
    assert not UNCOUNTED.search(shown), shown


def test_reseed_progress_off_a_terminal_goes_to_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, argv = _days_table(tmp_path, 30)
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "reseed invoices:" not in captured.out
    assert captured.err.splitlines() == [
        f"reseed invoices: 30/30 days (now at {datetime.now(timezone.utc).date() - timedelta(29)})"
    ]
    assert captured.out.splitlines()[-1].endswith("30 days read, 30 raised")
