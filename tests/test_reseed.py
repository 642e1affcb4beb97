"""Reseeding counters from a table: below and above the table's maximum, per day, pools, the CLI."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine, insert
from sqlalchemy.engine import Engine

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.maintenance.reseed import ReseedStep, reseed_from_table
from tests.support.services import REDIS_URL


def redis_today(ids: RedisIds, tz: str) -> date:
    from zoneinfo import ZoneInfo

    seconds, _ = ids.nodes.nodes[0].client.time()
    return datetime.fromtimestamp(int(seconds), tz=timezone.utc).astimezone(ZoneInfo(tz)).date()


def number_table(name: str = "items", column: str = "id") -> Table:
    return Table(
        name, MetaData(), Column(column, BigInteger, primary_key=True, autoincrement=False)
    )


def code_table(name: str = "orders") -> Table:
    return Table(name, MetaData(), Column("code", String(30), primary_key=True))


def filled(engine: Engine, table: Table, values: list[Any]) -> Table:
    table.metadata.drop_all(engine)
    table.metadata.create_all(engine)
    column = next(iter(table.c)).name
    if values:
        with engine.begin() as conn:
            conn.execute(insert(table), [{column: v} for v in values])
    return table


@pytest.fixture
def sqlite(tmp_path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{tmp_path / 'reseed.sqlite3'}")
    yield engine
    engine.dispose()


def counter_of(generator: Any, day: date) -> int | None:
    """The day's counter now (at least 1), read with a no-op raise to the first value."""
    ((_, before, _),) = generator.ensure_at_least(generator.compose(day, 1))
    return before


# -- sequences ----------------------------------------------------------------------------------


def test_sequence_below_the_table_max_is_raised_above_it(ids: RedisIds, sqlite: Engine) -> None:
    users = ids.sequence("users")
    table = filled(sqlite, number_table(), [*range(1, 400), 500])
    report = reseed_from_table(users, sqlite, "items", "id")
    (step,) = report.steps
    assert step.table_max == 500 and step.day is None
    assert [(c.before, c.after, c.raised) for c in step.nodes] == [(None, 500, True)]
    assert users.next_id() == 501
    assert "max 500, counter raised" in report.describe()
    assert table.name == report.table


def test_sequence_above_the_table_max_is_left_alone(ids: RedisIds, sqlite: Engine) -> None:
    users = ids.sequence("users")
    users.next_ids(1000)
    filled(sqlite, number_table(), [10, 500])
    report = reseed_from_table(users, sqlite, number_table(), "id")
    assert [(c.before, c.after, c.raised) for c in report.steps[0].nodes] == [(1000, 1000, False)]
    assert "counter already above it" in report.describe()
    assert users.next_id() == 1001


def test_an_empty_table_changes_nothing(ids: RedisIds, sqlite: Engine) -> None:
    users = ids.sequence("users")
    filled(sqlite, number_table(), [])
    report = reseed_from_table(users, sqlite, "items")
    assert report.steps == [] and "no values" in report.describe()
    assert users.next_id() == 1


# -- date-keyed generators ------------------------------------------------------------------------


def test_date_prefixed_raises_each_day_of_the_table(ids: RedisIds, sqlite: Engine) -> None:
    invoices = ids.date_prefixed("invoices", tz="UTC")
    today = redis_today(ids, "UTC")
    maxima = {today: 42, today - timedelta(days=1): 17, today - timedelta(days=3): 5}
    values = [invoices.compose(d, c) for d, top in maxima.items() for c in range(1, top + 1)]
    filled(sqlite, number_table(), values)
    invoices.next_ids(50)  # today's counter is above the table already
    seen: list[tuple[ReseedStep, int]] = []
    report = reseed_from_table(
        invoices, sqlite, "items", progress=lambda step, done: seen.append((step, done))
    )
    assert [(s.day, s.table_max) for s in report.steps] == [
        (d, invoices.compose(d, top)) for d, top in maxima.items()
    ]
    assert [done for _, done in seen] == [1, 2, 3]
    assert [s.raised for s in report.steps] == [False, True, True]
    assert report.raised == 2 and "3 days read, 2 raised" in report.describe()
    assert invoices.days_present() == sorted(maxima), "days absent from the table stay absent"
    assert invoices.next_id() == invoices.compose(today, 51)
    assert counter_of(invoices, today - timedelta(days=1)) == 17
    assert counter_of(invoices, today - timedelta(days=3)) == 5


def test_daily_code_raises_each_day_of_a_string_column(ids: RedisIds, sqlite: Engine) -> None:
    codes = ids.daily_code("codes", code_prefix="OR", digits=4, tz="Asia/Shanghai")
    today = redis_today(ids, "Asia/Shanghai")
    yesterday = today - timedelta(days=1)
    values = [codes.compose(today, c) for c in (1, 2, 9)] + [codes.compose(yesterday, 120)]
    filled(sqlite, code_table(), values)
    report = reseed_from_table(codes, sqlite, "orders", "code")
    assert [(s.day, s.table_max) for s in report.steps] == [
        (today, f"OR{today:%Y%m%d}0009"),
        (yesterday, f"OR{yesterday:%Y%m%d}0120"),
    ]
    assert codes.next_id() == f"OR{today:%Y%m%d}0010"
    assert counter_of(codes, yesterday) == 120


def test_purged_days_are_skipped_and_since_limits_the_walk(ids: RedisIds, sqlite: Engine) -> None:
    invoices = ids.date_prefixed("invoices", tz="UTC")
    today = redis_today(ids, "UTC")
    old = [today - timedelta(days=d) for d in (10, 20)]
    filled(sqlite, number_table(), [invoices.compose(d, 7) for d in [today, *old]])
    invoices.purge_before(today - timedelta(days=5))
    report = reseed_from_table(invoices, sqlite, "items")
    assert [(s.day, bool(s.skipped)) for s in report.steps] == [
        (today, False),
        (old[0], True),
        (old[1], True),
    ]
    assert "purged through" in report.steps[1].describe()
    assert invoices.days_present() == [today], "a purged day is never re-created"
    since = reseed_from_table(invoices, sqlite, "items", since=today)
    assert [s.day for s in since.steps] == [today]


def test_values_of_another_kind_are_skipped_and_counted(ids: RedisIds, sqlite: Engine) -> None:
    invoices = ids.date_prefixed("invoices", tz="UTC", length=12)
    today = redis_today(ids, "UTC")
    values = [
        3,  # legacy small keys
        99,
        invoices.compose(today, 4),
        20261399_0007,  # in the range but no date: month 13
        999_999_999_999_9,  # past the configured digits
    ]
    filled(sqlite, number_table(), values)
    report = reseed_from_table(invoices, sqlite, "items")
    assert [s.day for s in report.steps] == [today]
    assert (report.rows, report.skipped) == (5, 4)
    assert "4 values skipped" in report.describe()
    assert invoices.next_id() == invoices.compose(today, 5)


def test_a_widened_legacy_code_does_not_stop_the_reseed(ids: RedisIds, sqlite: Engine) -> None:
    codes = ids.daily_code("orders", tz="UTC")
    today = redis_today(ids, "UTC")
    legacy = f"IS{today:%Y%m%d}00042"  # a code of 5 digits, from before the codes had 4
    filled(sqlite, code_table(), [codes.compose(today, 7), legacy])
    report = reseed_from_table(codes, sqlite, "orders", "code")
    assert [s.day for s in report.steps] == [today]
    assert report.skipped == 1
    assert codes.next_id() == codes.compose(today, 8)


def test_a_sequence_skips_values_past_its_range(ids: RedisIds, sqlite: Engine) -> None:
    users = ids.sequence("users", js_safe=True)
    filled(sqlite, number_table(), [5, 2**60])
    report = reseed_from_table(users, sqlite, "items")
    assert report.skipped == 1
    assert users.next_id() == 6


def test_a_short_id_reseed_skips_values_outside_the_pool(ids: RedisIds, sqlite: Engine) -> None:
    short = ids.short_id("short", pool_size=100, offset=1000)
    filled(sqlite, number_table(), [5, 1001, 1002, 5000])
    report = reseed_from_table(short, sqlite, "items")
    assert (report.reserved, report.skipped) == (2, 2)
    assert short.is_taken(1001) and short.is_taken(1002)


def test_cli_reseed_with_rows_but_nothing_usable_exits_non_zero(
    redis_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "legacy.sqlite3"
    engine = create_engine(f"sqlite:///{db}")
    filled(engine, number_table(), [3, 99])
    engine.dispose()
    argv = ["reseed", "users", "--table", "items", "--db-url", f"sqlite:///{db}"]
    argv += ["--redis-url", REDIS_URL, "--prefix", redis_prefix, "--strategy", "sequence"]
    argv += ["--start", "1000"]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "holds 2 values but none is a value of this generator" in err
    assert len(err.splitlines()) == 1


def test_a_short_id_pool_marks_every_table_value_taken(ids: RedisIds, sqlite: Engine) -> None:
    short = ids.short_id("short", pool_size=100, offset=1000)
    issued = short.next_id()
    values = sorted({issued, 1000, 1042, 1099})
    filled(sqlite, number_table(), values)
    report = reseed_from_table(short, sqlite, "items")
    assert report.kind == "pool" and report.reserved == len(values)
    assert report.newly_taken == len(values) - 1
    assert all(short.is_taken(v) for v in values)
    assert short.stats().issued == len(values)
    assert f"{len(values)} values marked taken" in report.describe()


def test_what_cannot_be_reseeded_is_a_config_error(ids: RedisIds, sqlite: Engine) -> None:
    filled(sqlite, number_table(), [1])
    with pytest.raises(ConfigError, match="no counter to reseed"):
        reseed_from_table(ids.snowflake("orders"), sqlite, "items")
    with pytest.raises(ConfigError, match="no table 'missing'"):
        reseed_from_table(ids.sequence("users"), sqlite, "missing")
    with pytest.raises(ConfigError, match="no column 'nope'"):
        reseed_from_table(ids.sequence("users"), sqlite, "items", "nope")


def test_the_queries_work_on_every_database(
    engine: Engine, create_tables: Callable[[Any], Engine]
) -> None:
    ids = RedisIds.embedded()  # the database is under test here
    invoices = ids.date_prefixed("invoices", tz="UTC")
    codes = ids.daily_code("codes", tz="UTC")
    users = ids.sequence("users")
    today = redis_today(ids, "UTC")
    days = [today - timedelta(days=d) for d in range(4)]
    metadata = MetaData()
    items = Table("reseed_items", metadata, Column("id", BigInteger, primary_key=True))
    orders = Table("reseed_orders", metadata, Column("code", String(20), primary_key=True))
    create_tables(metadata)
    with engine.begin() as conn:
        conn.execute(
            insert(items), [{"id": invoices.compose(d, c)} for d in days for c in (1, 30 + d.day)]
        )
        conn.execute(
            insert(orders), [{"code": codes.compose(d, c)} for d in days for c in (2, 9, 10)]
        )
    report = reseed_from_table(invoices, engine, items)
    assert [(s.day, s.table_max) for s in report.steps] == [
        (d, invoices.compose(d, 30 + d.day)) for d in days
    ]
    assert invoices.next_id() == invoices.compose(today, 31 + today.day)
    report = reseed_from_table(codes, engine, orders, "code")
    assert [(s.day, s.table_max) for s in report.steps] == [(d, codes.compose(d, 10)) for d in days]
    assert codes.next_id() == codes.compose(today, 11)
    with engine.connect() as conn:  # a connection works as well as an engine
        reseed_from_table(users, conn, items)
    assert users.next_id() == invoices.compose(today, 30 + today.day) + 1


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def redis_prefix(real_redis: redis.Redis) -> Any:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    for key in list(real_redis.scan_iter(match=f"{prefix}:*")):
        real_redis.delete(key)


def cli(prefix: str, db: Engine, *args: str) -> list[str]:
    return [
        "reseed",
        *args,
        "--db-url",
        db.url.render_as_string(hide_password=False),
        "--redis-url",
        REDIS_URL,
        "--prefix",
        prefix,
    ]


def test_cli_reseed_prints_before_and_after(
    redis_prefix: str, sqlite: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    filled(sqlite, number_table(), [5, 77])
    assert (
        main(cli(redis_prefix, sqlite, "users", "--table", "items", "--strategy", "sequence")) == 0
    )
    out = capsys.readouterr().out
    assert "reseeding users (SequenceGenerator) from sqlite:///" in out
    assert "no node records a claim for users: recording 'sequence:start=1'" in out
    assert "max 77: counter 127.0.0.1:6379/0 - -> 77" in out
    assert main(cli(redis_prefix, sqlite, "users", "--table", "items")) == 0  # from the claim
    assert "77 -> 77 (unchanged)" in capsys.readouterr().out
    users = RedisIds.from_url(REDIS_URL, prefix=redis_prefix).sequence("users")
    assert users.next_id() == 78


def test_cli_reseed_shows_progress_over_many_days(
    redis_prefix: str, sqlite: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    invoices = ids.date_prefixed("invoices", fmt="YYYYDDD", length=16, tz="UTC")
    today = redis_today(ids, "UTC")
    days = [today - timedelta(days=d) for d in range(60)]
    filled(sqlite, number_table(), [invoices.compose(d, 3) for d in days])
    argv = cli(redis_prefix, sqlite, "invoices", "--table", "items", "--strategy", "date_prefixed")
    assert main([*argv, "--fmt", "YYYYDDD", "--length", "16"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert sum(1 for line in lines if line.startswith("  day ")) == 25
    assert not [line for line in lines if "reseed invoices:" in line], "progress is on stderr"
    assert captured.err.splitlines() == [
        f"reseed invoices: 50/60 days (now at {days[49]})",
        f"reseed invoices: 60/60 days (now at {days[59]})",
    ]
    assert lines[-1].endswith("60 days read, 60 raised")
    assert invoices.days_present() == sorted(days)


def test_cli_reseed_takes_the_generator_from_the_application(
    redis_prefix: str,
    sqlite: Engine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = f"app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from sa_redis_ids import RedisIds\n"
        f"ids = RedisIds.from_url({REDIS_URL!r}, prefix={redis_prefix!r})\n"
        "codes = ids.daily_code('codes', code_prefix='OR', digits=6, tz='UTC')\n"
        "users = ids.sequence('codes', start=100)\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        base = ["reseed", "codes", "--table", "orders", "--column", "code", "--app"]
        db = ["--db-url", sqlite.url.render_as_string(hide_password=False)]
        assert main([*base, f"{module}:ids", *db]) == 1
        assert "several generators share this namespace" in capsys.readouterr().err
        status = main([*base, f"{module}:ids", "--strategy", "daily_code", *db])
        assert status == 1 and "no table 'orders'" in capsys.readouterr().err
        app = sys.modules[module]
        today = redis_today(app.ids, "UTC")
        filled(sqlite, code_table(), [app.codes.compose(today, 123)])
        assert main([*base, f"{module}:ids", "--strategy", "daily_code", *db]) == 0
        assert f"max OR{today:%Y%m%d}000123: counter" in capsys.readouterr().out
        assert app.codes.next_id() == f"OR{today:%Y%m%d}000124"
    finally:
        sys.modules.pop(module, None)


def test_cli_reseed_reports_database_errors_in_one_line(
    redis_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = create_engine(f"sqlite:///{tmp_path / 'missing-dir' / 'x.sqlite3'}")
    assert main(cli(redis_prefix, bad, "users", "--table", "items", "--strategy", "sequence")) == 1
    err = capsys.readouterr().err
    assert err.startswith("sa-redis-ids: error: database:") and err.count("\n") == 1


def counter_text(client: redis.Redis, key: str) -> str | None:
    found = client.get(key)
    return found.decode() if isinstance(found, bytes) else None


def test_cli_reseed_honours_start_0(
    redis_prefix: str, sqlite: Engine, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    filled(sqlite, number_table(), [0, 41])
    argv = cli(redis_prefix, sqlite, "users", "--table", "items", "--strategy", "sequence")
    assert main([*argv, "--start", "0"]) == 0
    assert "recording 'sequence:start=0'" in capsys.readouterr().out
    users = RedisIds.from_url(REDIS_URL, prefix=redis_prefix).sequence("users", start=0)
    assert counter_text(real_redis, users.counter_key) == "42", "values 0..41 are counters 1..42"
    assert counter_text(real_redis, users.claim_key) == "0/1|sequence:start=0"
    assert users.next_id() == 42


def test_cli_reseed_takes_the_options_the_nodes_record(
    redis_prefix: str, sqlite: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    invoices = ids.date_prefixed("invoices", fmt="YYMMDD", length=12, start=0, tz="Asia/Tokyo")
    first = invoices.next_id()
    today = redis_today(ids, "Asia/Tokyo")
    assert first == invoices.compose(today, 0)
    filled(sqlite, number_table(), [invoices.compose(today, c) for c in range(50)])
    assert main(cli(redis_prefix, sqlite, "invoices", "--table", "items")) == 0
    out = capsys.readouterr().out
    assert "reseeding invoices (DatePrefixedGenerator)" in out and "recording" not in out
    assert f"day {today}: max {invoices.compose(today, 49)}: counter" in out
    assert invoices.next_id() == invoices.compose(today, 50)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--start", "1"], "start=1 differs from the claim the nodes record"),
        (["--strategy", "date_prefixed"], "record no date_prefixed claim for this namespace"),
        (["--fmt", "YYMMDD"], "--fmt is not an option of a sequence generator"),
    ],
)
def test_cli_reseed_refuses_options_other_than_the_recorded_ones(
    options: list[str],
    message: str,
    redis_prefix: str,
    sqlite: Engine,
    real_redis: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    users = RedisIds.from_url(REDIS_URL, prefix=redis_prefix).sequence("users", start=0)
    users.next_ids(3)
    filled(sqlite, number_table(), [500])
    assert main([*cli(redis_prefix, sqlite, "users", "--table", "items"), *options]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert counter_text(real_redis, users.counter_key) == "3", "nothing was raised"


def test_cli_reseed_without_a_claim_or_a_strategy_guesses_nothing(
    redis_prefix: str, sqlite: Engine, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    filled(sqlite, number_table(), [500])
    assert main(cli(redis_prefix, sqlite, "users", "--table", "items", "--start", "0")) == 1
    err = capsys.readouterr().err
    assert "no node records a claim for this namespace" in err and "--app" in err
    assert list(real_redis.scan_iter(match=f"{redis_prefix}:*")) == []


def test_cli_reseed_with_app_refuses_generator_options(
    redis_prefix: str, sqlite: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = cli(redis_prefix, sqlite, "users", "--table", "items", "--start", "0")
    assert main([*argv[:-4], "--app", "myapp:ids"]) == 1
    assert "--app brings the generators' own options; leave out --start" in capsys.readouterr().err
