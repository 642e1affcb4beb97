"""The command line tool: demo, next, help, and one-line errors."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.cli import build_parser, main
from sa_redis_ids.cli.demo import QUICKSTART_URL
from tests.support.services import REDIS_URL

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"


def test_demo_on_embedded_redis_and_sqlite_prints_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)
    monkeypatch.delenv("SA_REDIS_IDS_DB_URL", raising=False)
    assert main(["demo", "--rows", "2"]) == 0
    out = capsys.readouterr().out
    assert "Redis:    embedded" in out
    assert "sa_redis_ids_demo.sqlite3" in out
    assert (tmp_path / "sa_redis_ids_demo.sqlite3").exists()
    lines = [line.split() for line in out.splitlines() if line.startswith("demo_users")]
    assert [line[-3] for line in lines] == ["1", "2"]
    # A second run works too: the demo tables are re-created for the fresh embedded Redis.
    assert main(["demo", "--rows", "2"]) == 0


def test_installed_script_runs_the_demo(tmp_path: Path) -> None:
    script = shutil.which("sa-redis-ids", path=str(Path(sys.executable).parent))
    assert script, "the sa-redis-ids console script is installed with the package"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SA_REDIS_IDS_")}
    result = subprocess.run(
        [script, "demo"], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "demo_events" in result.stdout


DEMO_STEP_COMMAND = re.compile(r"sa-redis-ids (demo|next|parse)([^;\n]*)")


def demo_next_steps(out: str) -> str:
    head, found, steps = out.partition("\nNext steps:\n")
    assert found and "demo_users" in head, out
    return steps


def test_the_demo_ends_with_next_steps_that_lead_somewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's last lines point to the quickstart (a page of these docs, at the project's
    source address) and to running it on a real Redis; the commands they show run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)
    monkeypatch.delenv("SA_REDIS_IDS_DB_URL", raising=False)
    assert main(["demo", "--rows", "1"]) == 0
    out = capsys.readouterr().out
    steps = demo_next_steps(out)
    assert QUICKSTART_URL in steps
    source = re.search(r'^Source = "([^"]+)"$', PYPROJECT.read_text("utf-8"), re.M)
    assert source and QUICKSTART_URL.startswith(source.group(1) + "/blob/main/")
    assert (ROOT / QUICKSTART_URL.removeprefix(source.group(1) + "/blob/main/")).is_file()
    commands = {name: rest.split() for name, rest in DEMO_STEP_COMMAND.findall(steps)}
    assert commands["demo"][:1] == ["--redis-url"] and commands["demo"][1].startswith("redis://")
    assert main(["next", *commands["next"]]) == 0
    assert len(capsys.readouterr().out.split()) == 5
    snowflake = [line.split()[-3] for line in out.splitlines() if line.startswith("demo_orders")]
    assert commands["parse"] == ["ID"] and len(snowflake) == 1
    assert main(["parse", snowflake[0], "--strategy", "snowflake"]) == 0
    assert "ms" in capsys.readouterr().out


def test_the_demo_on_a_real_redis_points_to_the_users_database(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    redis_prefix: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["demo", "--rows", "1", "--redis-url", REDIS_URL, "--prefix", redis_prefix]) == 0
    steps = demo_next_steps(capsys.readouterr().out)
    assert "--db-url" in steps and "forgets" not in steps


def test_next_prints_count_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "users", "--count", "4", "--start", "10"]) == 0
    assert capsys.readouterr().out.split() == ["10", "11", "12", "13"]


@pytest.fixture
def redis_prefix(real_redis: redis.Redis) -> Iterator[str]:
    prefix = f"cli{uuid.uuid4().hex[:12]}"
    yield prefix
    for key in list(real_redis.scan_iter(match=f"{prefix}:*")):
        real_redis.delete(key)


def on_redis(prefix: str, *argv: str) -> list[str]:
    return [*argv, "--redis-url", REDIS_URL, "--prefix", prefix]


def test_next_on_a_real_redis_starts_a_new_namespace_only_with_new(
    capsys: pytest.CaptureFixture[str], redis_prefix: str, real_redis: redis.Redis
) -> None:
    assert main(on_redis(redis_prefix, "next", "users", "-n", "2")) == 1
    err = capsys.readouterr().err
    assert "records no claim for this namespace" in err and "--new" in err
    assert list(real_redis.scan_iter(match=f"{redis_prefix}:*")) == [], "nothing was written"
    assert main(on_redis(redis_prefix, "next", "users", "-n", "2", "--new")) == 0
    assert main(on_redis(redis_prefix, "next", "users")) == 0
    assert capsys.readouterr().out.split() == ["1", "2", "3"]


def test_next_takes_the_options_the_nodes_record(
    capsys: pytest.CaptureFixture[str], redis_prefix: str
) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    assert ids.short_id("members", pool_size=10, offset=500).next_ids(9)
    assert ids.sequence("users", start=0).next_ids(2) == [0, 1]
    assert main(on_redis(redis_prefix, "next", "users")) == 0
    assert main(on_redis(redis_prefix, "next", "members")) == 0
    users, member = capsys.readouterr().out.split()
    assert users == "2"
    assert (
        500 <= int(member) < 510
        and ids.short_id("members", pool_size=10, offset=500).stats().free == 0
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--start", "1"], "start=1 differs from the claim"),
        (["--strategy", "date_prefixed"], "record no date_prefixed claim for this namespace"),
        (["--fmt", "YYMMDD"], "--fmt is not an option of a sequence generator"),
    ],
)
def test_next_refuses_options_other_than_the_recorded_ones(
    options: list[str], message: str, capsys: pytest.CaptureFixture[str], redis_prefix: str
) -> None:
    users = RedisIds.from_url(REDIS_URL, prefix=redis_prefix).sequence("users", start=0)
    users.next_id()
    assert main(on_redis(redis_prefix, "next", "users", *options)) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert users.next_id() == 1, "nothing was taken"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["next"], "required"),
        (["next", "users", "--count", "0"], "must be 1 or more"),
        (["next", "users", "--count", "x"], "not an integer"),
        (["nosuch"], "invalid choice"),
        (["next", "bad name"], "may only hold"),
        (["next", "users", "--redis-url", "http://x"], "must start with"),
        (["next", "users", "--redis-url", "redis://127.0.0.1:1/0"], "Redis node is unavailable"),
    ],
)
def test_bad_arguments_give_one_line_and_non_zero_exit(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        status = main(argv)
    except SystemExit as exc:
        status = int(exc.code or 0)
    err = capsys.readouterr().err
    assert status != 0
    assert message in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err


def test_help_works_on_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    commands = sorted(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert {"demo", "next"} <= set(commands)
    for command in [[], *([name] for name in commands)]:
        with pytest.raises(SystemExit) as caught:
            main([*command, "--help"])
        assert caught.value.code == 0, command
        assert "usage: sa-redis-ids" in capsys.readouterr().out


def test_a_library_warning_is_one_line_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "orders", "--strategy", "snowflake", "--layout", "compat"]) == 0
    captured = capsys.readouterr()
    assert int(captured.out) > 0
    assert captured.err.startswith("sa-redis-ids: warning: the 'compat' snowflake layout")
    assert len(captured.err.strip().splitlines()) == 1


def test_parse_decodes_a_daily_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "XY202611220042", "--strategy", "daily_code", "--code-prefix", "XY"]) == 0
    out = capsys.readouterr().out
    assert "day:        2026-11-22" in out
    assert "counter:    42" in out
    assert main(["parse", "XY2026112242", "--strategy", "daily_code", "--code-prefix", "XY"]) == 1
    assert "is not a code of this generator" in capsys.readouterr().err


def test_sa_redis_ids_debug_shows_the_traceback_behind_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["next", "bad namespace", "--strategy", "sequence"]
    assert main(argv) == 1
    assert len(capsys.readouterr().err.splitlines()) == 1
    monkeypatch.setenv("SA_REDIS_IDS_DEBUG", "1")
    with pytest.raises(ConfigError, match="namespace"):
        main(argv)
