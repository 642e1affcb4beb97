"""The pytest plugin (``sa_redis_ids.pytest_plugin``), ``RedisIds.use`` and the clock control.

Small application suites run under ``pytester`` (in this process, except where a fresh process
is the point), and the example application's own suite (``examples/app_with_tests``) runs in a
subprocess with its Redis URL pointing at a closed port: its tests must never reach it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from datetime import date, datetime, timedelta, timezone
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import redis
import redis.asyncio

from sa_redis_ids import ConfigError, RedisIds, SnowflakeLayout
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.redis.connect import embedded_client
from sa_redis_ids.testing import (
    RedisClockControl,
    redis_time_ms,
    server_time_ms,
    set_time_offset,
    shift_time,
)
from tests.support.services import REDIS_URL

pytest_plugins = ["pytester"]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "app_with_tests"


def test_the_plugin_is_an_entry_point() -> None:
    found = [point for point in entry_points(group="pytest11") if point.name == "sa_redis_ids"]
    assert [point.value for point in found] == ["sa_redis_ids.pytest_plugin"]


HEAVY = ("sqlalchemy", "redis", "fakeredis")


RUN_AND_LIST_MODULES = """
import json, sys
import pytest
code = pytest.main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump(sorted(sys.modules), out)
sys.exit(code)
"""
"""Runs pytest in this process (as the ``pytest`` command does) and writes down what it imported."""


def _imported_by_a_pytest_run(project: Path, *args: str) -> set[str]:
    """The modules a fresh pytest run with ``args`` had imported by its end, in ``project``."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    listing = project / "modules.json"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            RUN_AND_LIST_MODULES,
            listing,
            "-q",
            "-p",
            "no:cacheprovider",
            *args,
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return set(json.loads(listing.read_text(encoding="utf-8")))


def test_the_plugin_imports_nothing_heavy_until_a_fixture_is_used(tmp_path: Path) -> None:
    """Every pytest run on a machine with the package installed loads the plugin: in a project
    that never uses its fixtures it must cost nothing (neither the library nor SQLAlchemy,
    redis-py or fakeredis); a test that asks for a fixture gets them all."""
    (tmp_path / "test_plain.py").write_text(
        'def test_plain():\n    assert "plain".upper() == "PLAIN"\n'
    )
    (tmp_path / "test_ids.py").write_text(
        "def test_ids(redis_ids):\n    assert redis_ids.sequence('a').next_id() == 1\n"
    )
    for args in (["--collect-only"], ["test_plain.py"]):
        imported = _imported_by_a_pytest_run(tmp_path, *args)
        assert "sa_redis_ids.pytest_plugin" in imported, "the plugin was not loaded"
        ours = {name for name in imported if name.split(".")[0] == "sa_redis_ids"}
        assert ours == {"sa_redis_ids", "sa_redis_ids.pytest_plugin"}, args
        assert {name for name in imported if name.split(".")[0] in HEAVY} == set(), args
    used = _imported_by_a_pytest_run(tmp_path, "test_ids.py")
    assert {"sa_redis_ids.ids", "sqlalchemy", "redis", "fakeredis"} <= used


def test_every_public_name_loads_from_the_lazy_package() -> None:
    """``sa_redis_ids`` imports its public names at first use (so the plugin costs nothing):
    each one in ``__all__`` resolves, from the module that defines it, in a fresh process."""
    code = (
        "import sys, sa_redis_ids as p\n"
        "assert 'sqlalchemy' not in sys.modules and 'redis' not in sys.modules\n"
        "for name in p.__all__:\n"
        "    value = getattr(p, name)\n"
        "    assert getattr(value, '__name__', name) == name, name\n"
        "assert set(dir(p)) >= set(p.__all__)\n"
        "try:\n"
        "    p.RedisIdz\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=EXAMPLE
    )
    assert done.returncode == 0, done.stderr
    assert "no attribute 'RedisIdz'" in done.stdout


def test_its_fixtures_come_with_the_package(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fresh(redis_ids):
            assert redis_ids.sequence("users").next_ids(2) == [1, 2]

        def test_fresh_again(redis_ids):
            assert redis_ids.sequence("users").next_id() == 1
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    without = pytester.runpytest("-p", "no:sa_redis_ids", "-p", "no:cacheprovider")
    without.assert_outcomes(errors=2)
    without.stdout.fnmatch_lines(["*fixture 'redis_ids' not found*"])


def test_unused_fixtures_import_nothing_more(pytester: pytest.Pytester) -> None:
    """A fresh process: the plugin loads no fakeredis and none of its own helpers until a test
    asks for a fixture."""
    pytester.makepyfile(
        """
        import sys

        LAZY = ["fakeredis", "sa_redis_ids.testing", "sa_redis_ids.asyncio"]

        def test_unused():
            assert "sa_redis_ids.pytest_plugin" in sys.modules
            assert [name for name in LAZY if name in sys.modules] == []

        def test_used(redis_ids):
            assert "fakeredis" in sys.modules and "sa_redis_ids.testing" in sys.modules
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=2)


def test_the_clock_moves_every_generator_sync_and_asyncio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import asyncio
        from datetime import datetime, timedelta, timezone

        import pytest

        from sa_redis_ids import ClockMovedBackwards

        TZ = "Asia/Shanghai"

        def test_sync(redis_ids, redis_clock):
            orders = redis_ids.date_prefixed("orders", tz=TZ, block=5)
            codes = redis_ids.daily_code("codes", tz=TZ)
            events = redis_ids.snowflake("events", tolerance_ms=100)
            new_day = redis_clock.to_midnight(TZ, before_ms=60_000)
            old = f"{new_day - timedelta(days=1):%Y%m%d}"
            assert str(orders.next_id()).startswith(old)
            assert codes.next_ids(2) == [f"IS{old}0001", f"IS{old}0002"]
            redis_clock.shift(120_000)
            assert str(orders.next_id()).startswith(f"{new_day:%Y%m%d}")
            assert codes.next_id() == f"IS{new_day:%Y%m%d}0001"
            late = redis_ids.daily_code("late", tz=TZ)  # made after the move: moved too
            assert late.next_id() == f"IS{new_day:%Y%m%d}0001"
            events.next_id()
            redis_clock.back(10_000)
            with pytest.raises(ClockMovedBackwards):
                events.next_id()
            redis_clock.shift(10_000)  # the clock catches up: IDs go on
            events.next_id()
            redis_clock.reset()
            assert redis_clock.offset_ms == 0

        def test_asyncio(async_redis_ids, redis_clock):
            orders = async_redis_ids.date_prefixed("orders", block=5)
            events = async_redis_ids.snowflake("events", tolerance_ms=100)

            async def main():
                redis_clock.set(datetime(2031, 2, 3, 23, 0, tzinfo=timezone.utc))
                assert str(await orders.next_id()).startswith("20310203")
                await events.next_id()
                redis_clock.shift(2 * 3600 * 1000)
                assert str(await orders.next_id()).startswith("20310204")
                await events.next_id()
                redis_clock.back(3600 * 1000)
                with pytest.raises(ClockMovedBackwards):
                    await events.next_id()
                assert redis_clock.today() == redis_clock.now().date()

            asyncio.run(main())
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_an_apps_ids_run_on_the_test_instance_and_come_back(pytester: pytest.Pytester) -> None:
    """The application's instance is embedded too (its own server), so the test can look at what
    it holds before, during and after the swap."""
    pytester.makepyfile(
        app_module_ids="""
        from sa_redis_ids import RedisIds

        ids = RedisIds.embedded(prefix="app")
        users = ids.sequence("users", block=10)
        codes = ids.daily_code("codes", tz="UTC")
        events = ids.snowflake("events")
        """
    )
    pytester.makepyfile(
        """
        import pytest

        from app_module_ids import codes, events, ids, users

        def test_before():
            assert users.next_id() == 1  # the buffer holds 2..10 now
            assert codes.next_id().endswith("0001")

        def test_swapped(redis_ids_for, redis_clock):
            test_ids = redis_ids_for(ids)
            assert redis_ids_for(ids) is test_ids
            assert ids.nodes is test_ids.nodes
            assert users.next_ids(2) == [1, 2]  # a fresh buffer on a fresh Redis
            assert codes.next_id().endswith("0001")
            assert users.redis_clock is test_ids.nodes.clock
            new_day = redis_clock.to_midnight("UTC")
            redis_clock.shift(2000)
            assert codes.next_id() == f"IS{new_day:%Y%m%d}0001"
            tickets = ids.sequence("tickets")  # made while swapped
            assert tickets.next_id() == 1
            assert test_ids.nodes.nodes[0].client.exists("app:{users}:seq")

        def test_after():
            assert ids.nodes.clock.shift_ms == 0
            assert users.redis_clock is ids.nodes.clock
            assert users.next_id() > 10  # the old buffer was dropped: a gap, never a repeat
            assert codes.next_id().endswith("0002")
            tickets = ids.sequence("tickets")
            assert tickets.redis_clock is ids.nodes.clock
            assert tickets.next_id() == 1  # on the app's own Redis, fresh

        def test_not_an_instance(redis_ids_for):
            with pytest.raises(TypeError):
                redis_ids_for(object())
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly").assert_outcomes(passed=4)


def test_an_asyncio_apps_ids_swap_to_async_redis_ids(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        async_app_ids="""
        from sa_redis_ids.asyncio import AsyncRedisIds

        ids = AsyncRedisIds.embedded(prefix="app")
        orders = ids.date_prefixed("orders", block=10)
        """
    )
    pytester.makepyfile(
        """
        import asyncio

        from async_app_ids import ids, orders

        def test_swapped(redis_ids_for, async_redis_ids, redis_clock):
            assert redis_ids_for(ids) is async_redis_ids

            async def main():
                first = await orders.next_id()
                assert first % 10**11 == 1
                new_day = redis_clock.to_midnight("UTC", before_ms=0)
                assert str(await orders.next_id()).startswith(f"{new_day:%Y%m%d}")

            asyncio.run(main())
            assert orders.buffer is not None and orders.generator.redis_clock is (
                async_redis_ids.nodes.clock
            )

        def test_after():
            assert orders.generator.redis_clock is ids.nodes.clock
            assert asyncio.run(orders.next_id()) % 10**11 == 1  # the app's Redis never saw one
        """
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


# -- RedisIds.use and the clock control, directly ------------------------------------------------


def test_use_refuses_another_kind_or_itself() -> None:
    ids = RedisIds.embedded()
    with pytest.raises(ConfigError, match="same kind"):
        ids.use(AsyncRedisIds.embedded())
    with pytest.raises(ConfigError, match="another RedisIds"):
        ids.use(ids)
    with pytest.raises(ConfigError, match="another RedisIds"):
        ids.use("redis://localhost")  # type: ignore[arg-type]


def test_use_nests_and_keeps_the_prefix() -> None:
    app, first, second = RedisIds.embedded(prefix="app"), RedisIds.embedded(), RedisIds.embedded()
    users = app.sequence("users")
    assert users.next_id() == 1
    with app.use(first) as swapped:
        assert swapped is app
        assert users.next_id() == 1
        with app.use(second):
            assert users.next_ids(2) == [1, 2]
        assert users.next_id() == 2
        assert first.nodes.nodes[0].client.get("app:{users}:seq") == b"2"
    assert users.next_id() == 2
    assert app.nodes.nodes[0].client.get("app:{users}:seq") == b"2"


def test_use_with_floors_reads_them_anew_and_locks_on_the_test_nodes() -> None:
    calls: list[date] = []

    def floor(day: date) -> int:
        calls.append(day)
        return 41

    app, test_ids = RedisIds.embedded(prefix="app"), RedisIds.embedded()
    codes = app.daily_code("codes", tz="UTC", floor=floor)
    first = codes.next_id()
    assert int(first[-4:]) > 41
    seen = len(calls)
    with app.use(test_ids):
        assert codes.next_id() == first, "seeded from the floor on the test's Redis too"
        assert len(calls) > seen, "the floor is read again for the fresh state"
        # the first-of-day lock was taken on the test's node, under the app's prefix
        assert test_ids.nodes.nodes[0].client.keys("app:lock:*:fence")
    assert int(codes.next_id()[-4:]) == int(first[-4:]) + 1


def test_use_a_failing_rebuild_changes_nothing() -> None:
    app = RedisIds.embedded(prefix="app")
    users = app.sequence("users", block=5)
    app.snowflake("events", layout=SnowflakeLayout(sequence_bits=1))  # 2 values a ms: 2 nodes
    assert users.next_id() == 1
    three = RedisIds([embedded_client() for _ in range(3)])
    nodes = app.nodes
    with pytest.raises(ConfigError, match="sequence"), app.use(three):
        pass
    assert app.nodes is nodes and users.redis_clock is nodes.clock
    assert users.next_id() == 2, "its buffer was left alone"


def test_the_clock_control_puts_clocks_back() -> None:
    ids = RedisIds.embedded()
    orders = ids.date_prefixed("orders")
    with shift_time(orders, 5000):
        control = RedisClockControl(ids)
        assert orders.redis_clock.shift_ms == 0  # the control's own offset applies
        control.shift(1000)
        control.back(300)
        assert control.offset_ms == 700 == orders.redis_clock.shift_ms
        control.close()
        assert orders.redis_clock.shift_ms == 5000
    assert orders.redis_clock.shift_ms == 0


def test_a_move_back_drops_buffered_day_blocks_sync_and_asyncio() -> None:
    ids, aids = RedisIds.embedded(), AsyncRedisIds.embedded()
    orders, async_orders = ids.date_prefixed("orders", block=5), aids.date_prefixed("o", block=5)
    users = ids.sequence("users", block=5)
    control = RedisClockControl(ids, aids)
    control.set(datetime(2031, 2, 3, 12, tzinfo=timezone.utc))
    assert str(orders.next_id()).startswith("20310203")
    assert users.next_id() == 1
    assert str(asyncio.run(async_orders.next_id())).startswith("20310203")
    control.back(2 * 86_400_000)
    assert str(orders.next_id()).startswith("20310201")
    assert users.next_id() == 2, "a sequence's buffer has no day: kept"
    assert str(asyncio.run(async_orders.next_id())).startswith("20310201")


def test_the_clock_control_checks_its_arguments() -> None:
    control = RedisClockControl(RedisIds.embedded())
    with pytest.raises(ValueError, match="aware"):
        control.set(datetime(2031, 1, 1))
    with pytest.raises(ValueError):
        control.back(-1)
    with pytest.raises(TypeError):
        control.shift(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        control.track(object())
    day = control.to_midnight("Asia/Shanghai", before_ms=0)
    assert control.today("Asia/Shanghai") == day
    control.set(datetime(2031, 2, 3, 12, tzinfo=timezone.utc))
    assert abs(control.now() - datetime(2031, 2, 3, 12, tzinfo=timezone.utc)) < timedelta(hours=1)


def test_shift_time_works_on_asyncio_generators() -> None:
    ids = AsyncRedisIds.embedded()
    orders = ids.date_prefixed("orders")

    async def main() -> None:
        with shift_time(orders, 3 * 86_400_000):
            value = await orders.next_id()
        return value

    today = datetime.fromtimestamp(redis_time_ms(orders) / 1000, tz=timezone.utc).date()
    assert str(asyncio.run(main())).startswith(f"{today + timedelta(days=3):%Y%m%d}")


def test_the_server_time_of_an_asyncio_client_is_read_without_awaiting(
    real_redis: redis.Redis,
) -> None:
    client = redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=5)
    seconds, _ = real_redis.time()
    assert abs(server_time_ms(client) // 1000 - int(seconds)) < 60
    prefix = f"t{uuid.uuid4().hex[:12]}"
    ids = AsyncRedisIds(client, prefix=prefix)
    orders = ids.date_prefixed("orders")
    try:
        set_time_offset(orders, 86_400_000)
        value = asyncio.run(orders.next_id())
        tomorrow = datetime.fromtimestamp(int(seconds) + 86_400, tz=timezone.utc).date()
        assert str(value)[:8] in {f"{tomorrow:%Y%m%d}", f"{tomorrow + timedelta(days=1):%Y%m%d}"}
    finally:
        set_time_offset(orders, 0)
        for key in real_redis.scan_iter(match=f"{prefix}:*"):
            real_redis.delete(key)


# -- the example application's own suite ---------------------------------------------------------


def test_the_example_apps_suite_passes_without_its_redis() -> None:
    env = {
        **os.environ,
        "SHOP_REDIS_URL": "redis://127.0.0.1:1/0",  # a closed port: reaching it would fail
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.pop("PYTEST_ADDOPTS", None)
    env.pop("PYTHONPATH", None)
    done = subprocess.run(  # the pytest command, as a user types it (not python -m pytest)
        [Path(sys.executable).with_name("pytest"), "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "8 passed" in done.stdout, done.stdout
