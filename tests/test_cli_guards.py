"""The operator's command line does what it was told and no more.

* A strategy may not take a name that spells one of the command line's own options: ``maintain``
  offers ``--<name>`` for every date-keyed or pool strategy, and a clash would break every command.
* ``--embedded`` means the embedded in-process Redis, with ``--app`` too: the application's
  generators run there, its own Redis is never written.
* ``maintain --once`` gives its lease back when it is done: the next run does the work, while a
  genuinely concurrent holder still makes it skip.

The application is a module written for the test, on the real Redis under a private prefix.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import BigInteger, Column, MetaData, Table, create_engine, insert

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.cli.maintain import namespace_flags
from sa_redis_ids.generators import registry
from sa_redis_ids.generators.registry import register_strategy
from sa_redis_ids.maintenance.job import LOCK_NAME
from tests.support.services import REDIS_URL


@pytest.fixture
def redis_prefix(real_redis: redis.Redis) -> Iterator[str]:
    prefix = f"g{uuid.uuid4().hex[:12]}"
    yield prefix
    for key in list(real_redis.scan_iter(match=f"{prefix}:*")):
        real_redis.delete(key)


@pytest.fixture
def app_module(redis_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An application module on the real Redis with a day-keyed, a pool and a plain generator."""
    module = f"guard_app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from sa_redis_ids import RedisIds\n"
        f"ids = RedisIds.from_url({REDIS_URL!r}, prefix={redis_prefix!r})\n"
        "codes = ids.daily_code('codes', code_prefix='OR', digits=5)\n"
        "members = ids.short_id('members', pool_size=100, offset=0)\n"
        "users = ids.sequence('users')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield module
    sys.modules.pop(module, None)


def _keys(client: redis.Redis, prefix: str) -> list[bytes]:
    return sorted(client.scan_iter(match=f"{prefix}:*"))


# -- strategy names and maintain's own options ---------------------------------------------------


def test_maintains_own_options_are_reserved(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "10000")  # no flag broken over two lines
    with pytest.raises(SystemExit):
        main(["maintain", "--help"])
    shown = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", capsys.readouterr().out))
    own = shown - {flag for flag, _ in namespace_flags()}
    assert {"--once", "--app", "--embedded", "--json", "--keep-days", "--help"} <= own
    assert own <= registry.RESERVED_FLAGS


@pytest.mark.parametrize(
    "name",
    [
        "once",
        "json",
        "app",
        "keep_days",
        "precreate_days",
        "embedded",
        "cluster",
        "prefix",
        "redis_url",
        "help",
    ],
)
def test_a_strategy_named_like_an_option_of_maintain_is_refused_and_the_cli_still_works(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(registry, "_STRATEGIES", dict(registry._STRATEGIES))  # undone afterwards
    dated = registry.strategy("date_prefixed")
    with pytest.raises(ConfigError, match=rf"strategy name '{name}'.*command line's own option"):
        register_strategy(
            name, dated.build, generator=dated.generator, options=dated.options, from_claims=True
        )
    assert name not in {each.name for each in registry.strategies()}
    assert main(["parse", "2026112400000000001"]) == 0
    assert "2026-11-24" in capsys.readouterr().out


# -- --embedded never touches the application's Redis ----------------------------------------


def test_maintain_with_app_and_embedded_runs_on_the_embedded_redis(
    app_module: str,
    redis_prefix: str,
    real_redis: redis.Redis,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["maintain", "--once", "--embedded", "--app", f"{app_module}:ids"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "codes (DailyCode, today " in out and "created none" not in out
    assert "members (pool): 0 issued, 100 free" in out
    assert _keys(real_redis, redis_prefix) == []
    app = sys.modules[app_module]
    assert app.codes.days_present() == [], "the application's own Redis holds no day counter"
    app.users.next_id()  # the application's generators are back on its own Redis
    assert _keys(real_redis, redis_prefix) != []


def test_reseed_with_app_and_embedded_runs_on_the_embedded_redis(
    app_module: str,
    redis_prefix: str,
    real_redis: redis.Redis,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = f"sqlite:///{tmp_path / 'rows.sqlite3'}"
    engine = create_engine(db)
    table = Table("users", MetaData(), Column("id", BigInteger, primary_key=True))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": 41}])
    engine.dispose()
    argv = ["reseed", "users", "--table", "users", "--db-url", db, "--app", f"{app_module}:ids"]
    assert main([*argv, "--embedded"]) == 0
    assert "max 41" in capsys.readouterr().out
    assert _keys(real_redis, redis_prefix) == []


@pytest.mark.parametrize("command", ["maintain", "reseed"])
def test_embedded_with_a_redis_url_is_refused(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = {
        "maintain": ["maintain", "--once", "--date-prefixed", "x"],
        "reseed": [
            "reseed",
            "x",
            "--table",
            "t",
            "--db-url",
            "sqlite://",
            "--strategy",
            "sequence",
        ],
    }[command]
    assert main([*argv, "--embedded", "--redis-url", REDIS_URL]) == 1
    err = capsys.readouterr().err
    assert "--embedded" in err and "--redis-url" in err and len(err.splitlines()) == 1


# -- maintain --once and its lease ---------------------------------------------------------------


def test_a_second_maintain_once_is_not_blocked_by_the_first_ones_lease(
    app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["maintain", "--once", "--app", f"{app_module}:ids"]
    for _ in range(2):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "skipped" not in out and "codes (DailyCode, today " in out


def test_maintain_once_still_skips_while_another_instance_holds_the_lock(
    app_module: str, redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    other = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    with other.lock(LOCK_NAME, ttl=30, timeout=1):
        assert main(["maintain", "--once", "--app", f"{app_module}:ids"]) == 0
        assert "skipped (another instance holds the maintenance lock)" in capsys.readouterr().out
    other.close()
