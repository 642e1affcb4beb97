# mypy: disable-error-code="arg-type"
"""A catalogue of bad inputs: every public entry refuses them in words, before anything reaches Redis.

Each case names the entry, the bad input, the exception type expected (``ConfigError``,
``ValueError`` or ``TypeError``, never a ``KeyError``, ``AttributeError``, ``OverflowError`` or a
Redis error) and what the message must name (the option, or the value). Constructors and factories
run on a client that fails the test if anything touches it; generator methods run on every backend
of the table and must leave no key behind. Property tests (derandomized, see ``conftest.py``) check
``parse``/``compose`` round trips over digit strings drawn one digit at a time, so that edges such
as year 9999 or day-of-year 999 come up.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry
from sqlalchemy import BigInteger, Column, DateTime, MetaData, Numeric, String, Table, create_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sa_redis_ids import ConfigError, RedisIds, floor_from_column, redis_id, register
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.buffering import Buffering
from sa_redis_ids.cli import main
from sa_redis_ids.generators.date_prefixed import FORMATS
from sa_redis_ids.generators.registry import OptionSpec, register_strategy, strategies
from sa_redis_ids.generators.registry import strategy as registry_strategy
from sa_redis_ids.generators.snowflake import LAYOUTS, SnowflakeLayout
from sa_redis_ids.metrics import disable_metrics, enable_opentelemetry, enable_prometheus
from sa_redis_ids.validation import check_redis_url
from tests.conftest import Backend
from tests.support.clients import Untouchable, UntouchableAsync, async_ids_on
from tests.support.services import REDIS_URL

inf, nan = math.inf, math.nan

BAD_BOOLS: list[Any] = ["yes", None, 0, 1, "True", 1.0]
BAD_SECONDS: list[Any] = [0, -1, None, "1", inf, -inf, nan, True, [1]]
BAD_INTS: list[Any] = [None, "1", 1.5, True, nan, [1]]
BAD_URLS: list[Any] = [
    None,
    42,
    "",
    "localhost:6379",
    "http://localhost:6379",
    "redis://",
    "redis://:6379/0",
    "redis://localhost:6379/abc",
    "redis://localhost:6379/-1",
    "redis://localhost:6379/1.5",
    "redis://localhost:6379/99999999999",
    "redis://localhost:6379?db=x",
    "redis://localhost:abc/0",
    "redis://localhost:0/0",
    "redis://localhost:99999/0",
    "rediss://",
    "unix://",
]


def untouched() -> RedisIds:
    return RedisIds(Untouchable())


@dataclass(frozen=True)
class Case:
    """One bad call: ``call(ids)`` must raise ``errors`` with a message naming one of ``names``."""

    id: str
    call: Callable[..., object]
    errors: type[Exception] | tuple[type[Exception], ...]
    names: tuple[str, ...]


def case(
    id: str,
    call: Callable[..., object],
    names: str | tuple[str, ...],
    errors: type[Exception] | tuple[type[Exception], ...] = ConfigError,
) -> Any:
    # A test's id is the same in every process (``object at 0x...`` would differ: a parallel
    # run's workers must collect the same tests).
    stable = re.sub(r" at 0x[0-9a-f]+", "", id)
    return pytest.param(
        Case(stable, call, errors, (names,) if isinstance(names, str) else names), id=stable
    )


def check(c: Case, ids: RedisIds) -> None:
    with pytest.raises(Exception) as caught:
        c.call(ids)
    judge(c, caught.value)


def judge(c: Case, exc: BaseException) -> None:
    """``exc`` is the typed error ``c`` expects, naming what it must name."""
    assert isinstance(exc, c.errors), f"{type(exc).__name__}: {exc}"
    assert type(exc) in (ConfigError, ValueError, TypeError), type(exc)
    message = str(exc).lower()
    assert any(name.lower() in message for name in c.names), (c.names, str(exc))


# -- constructors ---------------------------------------------------------------------------------


def _constructor_cases() -> list[Any]:
    cases: list[Any] = []
    for value in BAD_SECONDS:
        if value != 0:  # retry_after=0 is allowed: retry a down node at once
            cases += [
                case(
                    f"retry_after={value!r}",
                    lambda _, v=value: RedisIds(Untouchable(), retry_after=v),
                    "retry_after",
                ),
                case(
                    f"from_urls retry_after={value!r}",
                    lambda _, v=value: RedisIds.from_urls(["redis://a:1"], retry_after=v),
                    "retry_after",
                ),
            ]
        cases += [
            case(
                f"replica_timeout={value!r}",
                lambda _, v=value: RedisIds(Untouchable(), replica_timeout=v),
                "replica_timeout",
            ),
            case(
                f"from_url socket_timeout={value!r}",
                lambda _, v=value: RedisIds.from_url("redis://localhost:6379/0", socket_timeout=v),
                "socket_timeout",
            ),
            case(
                f"from_url connect_timeout={value!r}",
                lambda _, v=value: RedisIds.from_url("redis://localhost:6379/0", connect_timeout=v),
                "connect_timeout",
            ),
            case(
                f"from_urls socket_timeout={value!r}",
                lambda _, v=value: RedisIds.from_urls(
                    ["redis://a:1", "redis://b:1"], socket_timeout=v
                ),
                "socket_timeout",
            ),
            case(
                f"from_sentinel socket_timeout={value!r}",
                lambda _, v=value: RedisIds.from_sentinel(["h:26379"], "m", socket_timeout=v),
                "socket_timeout",
            ),
            case(
                f"from_sentinel connect_timeout={value!r}",
                lambda _, v=value: RedisIds.from_sentinel(["h:26379"], "m", connect_timeout=v),
                "connect_timeout",
            ),
        ]
    for value in BAD_BOOLS:
        cases += [
            case(
                f"strict={value!r}", lambda _, v=value: RedisIds(Untouchable(), strict=v), "strict"
            ),
            case(
                f"embedded strict={value!r}",
                lambda _, v=value: RedisIds.embedded(strict=v),
                "strict",
            ),
            case(
                f"from_url cluster={value!r}",
                lambda _, v=value: RedisIds.from_url("redis://localhost:6379", cluster=v),
                "cluster",
            ),
        ]
    for value in [-1, *BAD_INTS]:
        cases.append(
            case(
                f"replicas={value!r}",
                lambda _, v=value: RedisIds(Untouchable(), replicas=v),
                "replicas",
            )
        )
    for url in BAD_URLS:
        cases += [
            case(f"from_url {url!r}", lambda _, u=url: RedisIds.from_url(u), ("url", "port")),
            case(
                f"from_urls [{url!r}]",
                lambda _, u=url: RedisIds.from_urls(["redis://a:1", u]),
                ("url", "port"),
            ),
        ]
    cases += [
        case("RedisIds(None)", lambda _: RedisIds(None), "client"),
        case("RedisIds(url)", lambda _: RedisIds("redis://localhost"), "client"),
        case("RedisIds([])", lambda _: RedisIds([]), "client"),
        case("RedisIds(42)", lambda _: RedisIds(42), "client"),
        case("prefix=''", lambda _: RedisIds(Untouchable(), prefix=""), "prefix"),
        case("prefix=1", lambda _: RedisIds(Untouchable(), prefix=1), "prefix"),
        case("prefix with braces", lambda _: RedisIds(Untouchable(), prefix="a{b}"), "prefix"),
        case("embedded replicas=1", lambda _: RedisIds.embedded(replicas=1), "replicas"),
        case("from_urls str", lambda _: RedisIds.from_urls("redis://a:1"), "list"),
        case("from_urls []", lambda _: RedisIds.from_urls([]), "list"),
        case("from_urls twice", lambda _: RedisIds.from_urls(["redis://a:1"] * 2), "same url"),
        case("from_sentinel str", lambda _: RedisIds.from_sentinel("h:1", "m"), "sentinels"),
        case("from_sentinel no port", lambda _: RedisIds.from_sentinel(["h"], "m"), "sentinel"),
        case("from_sentinel port 0", lambda _: RedisIds.from_sentinel([("h", 0)], "m"), "sentinel"),
        case(
            "from_sentinel service ''",
            lambda _: RedisIds.from_sentinel(["h:1"], ""),
            "service_name",
        ),
        case(
            "from_sentinel service None",
            lambda _: RedisIds.from_sentinel(["h:1"], None),
            "service_name",
        ),
    ]
    return cases


@pytest.mark.parametrize("c", _constructor_cases())
def test_constructors_refuse_bad_options(c: Case) -> None:
    check(c, untouched())


# -- factories, lock, maintenance, Buffering (nothing may reach Redis) -----------------------------


def _option_cases(
    factory: str, option: str, values: list[Any], fixed: dict[str, Any] | None = None
) -> list[Any]:
    def call(ids: RedisIds, value: Any) -> object:
        return getattr(ids, factory)("ns", **{**(fixed or {}), option: value})

    return [
        case(f"{factory} {option}={value!r}", lambda ids, v=value: call(ids, v), option)
        for value in values
    ]


def _factory_cases() -> list[Any]:
    floors = [1, "x", object()]
    blocks = [0, -1, 2.5, "10", True, Buffering(10, max_block=5)]
    headrooms = [-1, "1", 1.5, True, 2**70]
    tzs = ["Mars/Base", None, 5, ""]
    cases = [
        *_option_cases("sequence", "start", [-1, 2**63, *BAD_INTS]),
        *_option_cases("sequence", "start", [2**53], {"js_safe": True}),
        *_option_cases("sequence", "js_safe", BAD_BOOLS),
        *_option_cases("sequence", "block", blocks),
        *_option_cases("sequence", "floor", floors),
        *_option_cases("sequence", "headroom", headrooms),
        *_option_cases("date_prefixed", "fmt", ["YYYY", None, 5, "yyyymmdd"]),
        *_option_cases("date_prefixed", "length", [7, 20, "19", None, 1.5, True]),
        *_option_cases("date_prefixed", "length", [17], {"js_safe": True}),
        *_option_cases("date_prefixed", "start", [-1, 10**11, *BAD_INTS]),
        *_option_cases("date_prefixed", "tz", tzs),
        *_option_cases("date_prefixed", "js_safe", BAD_BOOLS),
        *_option_cases("date_prefixed", "floor", floors),
        *_option_cases("date_prefixed", "block", blocks),
        *_option_cases("date_prefixed", "headroom", headrooms),
        *_option_cases("daily_code", "code_prefix", ["", "a b", None, 5, "x" * 21, "é"]),
        *_option_cases("daily_code", "digits", [0, 19, *BAD_INTS]),
        *_option_cases("daily_code", "tz", tzs),
        *_option_cases("daily_code", "grace_days", [-1, 367, *BAD_INTS]),
        *_option_cases("daily_code", "floor", floors),
        *_option_cases("daily_code", "headroom", headrooms),
        *_option_cases("snowflake", "layout", ["nope", None, 5]),
        *_option_cases("snowflake", "tolerance_ms", [-1, *BAD_INTS]),
        *_option_cases("snowflake", "floor", floors),
        *_option_cases("snowflake", "headroom", headrooms),
        *_option_cases("short_id", "pool_size", [0, -1, *BAD_INTS]),
        *_option_cases("short_id", "offset", [-1, 2**63, *BAD_INTS]),
        *_option_cases("short_id", "floor", floors),
    ]
    for name in ["", "two words", "a{b}", None, 42, "x" * 101]:
        cases.append(
            case(f"sequence namespace={name!r}", lambda ids, n=name: ids.sequence(n), "namespace")
        )
    for value in BAD_SECONDS:
        for option in ["ttl", "timeout", "retry_delay"]:
            if option == "timeout" and value == 0:  # timeout=0: one attempt, no waiting
                continue
            cases.append(
                case(
                    f"lock {option}={value!r}",
                    lambda ids, o=option, v=value: ids.lock("l", **{o: v}),
                    option,
                )
            )
        if value is not None:
            cases.append(
                case(
                    f"lock node_timeout={value!r}",
                    lambda ids, v=value: ids.lock("l", node_timeout=v),
                    "node_timeout",
                )
            )
            cases.append(
                case(
                    f"lock fence_ttl={value!r}",
                    lambda ids, v=value: ids.lock("l", fence_ttl=v),
                    "fence_ttl",
                )
            )
        cases.append(
            case(
                f"maintenance lock_ttl={value!r}",
                lambda ids, v=value: ids.maintenance(lock_ttl=v),
                "lock_ttl",
            )
        )
        cases.append(
            case(
                f"Buffering target_seconds={value!r}",
                lambda _, v=value: Buffering(target_seconds=v),
                "target_seconds",
            )
        )
    for name in [None, "", 5, "a b"]:
        cases.append(case(f"lock name={name!r}", lambda ids, n=name: ids.lock(n), "name"))
    for value in [1.5, 0, -0.1, "0.8", nan, inf, True, None]:
        cases.append(
            case(
                f"maintenance fill_warning={value!r}",
                lambda ids, v=value: ids.maintenance(fill_warning=v),
                "fill_warning",
            )
        )
    for value in [1, 1.0, 0, -0.5, "0.1", nan, inf, True]:
        cases.append(
            case(
                f"Buffering prefetch={value!r}",
                lambda _, v=value: Buffering(prefetch=v),
                "prefetch",
            )
        )
    for value in BAD_BOOLS:
        cases.append(
            case(
                f"maintenance precreate={value!r}",
                lambda ids, v=value: ids.maintenance(precreate=v),
                "precreate",
            )
        )
    for value in [1, -1, *BAD_INTS]:
        cases.append(
            case(
                f"maintenance keep_days={value!r}",
                lambda ids, v=value: ids.maintenance(keep_days=v),
                "keep_days",
            )
        )
        cases.append(
            case(
                f"maintenance precreate_days={value!r}",
                lambda ids, v=value: ids.maintenance(precreate_days=-1 if v == 1 else v),
                "precreate_days",
            )
        )
    for option in ["block", "min_block", "max_block"]:
        for value in [0, -1, 1.5, "10", True]:
            cases.append(
                case(
                    f"Buffering {option}={value!r}",
                    lambda _, o=option, v=value: Buffering(**{o: v}),
                    option,
                )
            )
    cases.append(case("Buffering clock=5", lambda _: Buffering(clock=5), "clock"))
    return cases


@pytest.mark.parametrize("c", _factory_cases())
def test_factories_and_options_refuse_bad_input_before_redis(c: Case) -> None:
    check(c, untouched())


# -- generator methods, on every backend: refused, and no key written -----------------------------


def _method_cases() -> list[Any]:
    V, T = ValueError, TypeError
    either = (ValueError, TypeError)
    cases: list[Any] = []
    for n in [-1, 1.5, "3", None, True, 10**8]:
        for factory in ["sequence", "date_prefixed", "daily_code", "snowflake", "short_id"]:
            cases.append(
                case(
                    f"{factory}.next_ids({n!r})",
                    lambda ids, f=factory, n=n: getattr(ids, f)("ns").next_ids(n),
                    "count",
                    either,
                )
            )
    for shard in [-1, "0", 4096, None, True]:
        cases.append(
            case(
                f"snowflake shard={shard!r}",
                lambda ids, s=shard: ids.snowflake("ns").next_ids(1, shard=s),
                "shard",
                either,
            )
        )
    for value in [-1, "1", None, 2**63, 1.5, True]:
        cases.append(
            case(
                f"sequence.parse({value!r})",
                lambda ids, v=value: ids.sequence("ns").parse(v),
                (repr(value), "value"),
                V,
            )
        )
        cases.append(
            case(
                f"snowflake.parse({value!r})",
                lambda ids, v=value: ids.snowflake("ns").parse(v),
                (str(value), type(value).__name__),
                V,
            )
        )
        cases.append(
            case(
                f"date_prefixed.parse({value!r})",
                lambda ids, v=value: ids.date_prefixed("ns").parse(v),
                (repr(value), str(value)),
                V,
            )
        )
    for code in [
        5,
        None,
        "",
        "IS2026112200001",
        "XX202611220001",
        "IS202613220001",
        "IS20261122000a",
        "IS202611220000",
        "IS099911220001",
    ]:
        cases.append(
            case(
                f"daily_code.parse({code!r})",
                lambda ids, c=code: ids.daily_code("ns").parse(c),
                repr(code),
                V,
            )
        )
    cases.append(
        case(
            "date_prefixed.parse(YYYYDDD overflow)",
            lambda ids: ids.date_prefixed("ns", fmt="YYYYDDD", length=14, start=0).parse(
                99_987_310_000_000
            ),
            "99987310000000",
            V,
        )
    )
    for value in [-1, 2**63, 2**64, "5", None, 1.5, True]:
        cases.append(
            case(
                f"sequence.ensure_at_least({value!r})",
                lambda ids, v=value: ids.sequence("ns").ensure_at_least(v),
                "value",
                either,
            )
        )
    cases.append(
        case(
            "js_safe sequence.ensure_at_least(2**53)",
            lambda ids: ids.sequence("ns", js_safe=True).ensure_at_least(2**53),
            "9007199254740991",
            V,
        )
    )
    for value in [-1, "x", None, 2026_13_01_00000000001]:
        cases.append(
            case(
                f"date_prefixed.ensure_at_least({value!r})",
                lambda ids, v=value: ids.date_prefixed("ns").ensure_at_least(v),
                (repr(value), str(value)),
                V,
            )
        )
    cases.append(
        case(
            "daily_code.ensure_at_least(5)",
            lambda ids: ids.daily_code("ns").ensure_at_least(5),
            "5",
            V,
        )
    )
    bad_days: list[Any] = ["2026-11-22", None, 20261122, 1.5, date.min, date.max]
    for factory in ["date_prefixed", "daily_code"]:
        for day in bad_days:
            cases.append(
                case(
                    f"{factory}.precreate({day!r})",
                    lambda ids, f=factory, d=day: getattr(ids, f)("ns").precreate(d),
                    "day",
                    either,
                )
            )
            if day != date.max:  # purging before the last day there is: allowed (see below)
                cases.append(
                    case(
                        f"{factory}.purge_before({day!r})",
                        lambda ids, f=factory, d=day: getattr(ids, f)("ns").purge_before(d),
                        "day",
                        either,
                    )
                )
    cases.append(
        case(
            "YYDDD precreate(1999-01-01)",
            lambda ids: ids.date_prefixed("ns", fmt="YYDDD", length=17).precreate(date(1999, 1, 1)),
            "2000-01-01",
            V,
        )
    )
    cases.append(
        case(
            "YYMMDD precreate(2100-01-01)",
            lambda ids: ids.date_prefixed("ns", fmt="YYMMDD", length=17).precreate(
                date(2100, 1, 1)
            ),
            "2099-12-31",
            V,
        )
    )
    for values in [12345678, "12345678", None, b"1"]:
        cases.append(
            case(
                f"short_id.reserve({values!r})",
                lambda ids, v=values: ids.short_id("ns").reserve(v),
                "values",
                T,
            )
        )
    for values in [["12345678"], [None], [9_999_999], [20_000_000], [10_000_000, -1], [True]]:
        cases.append(
            case(
                f"short_id.reserve({values!r})",
                lambda ids, v=values: ids.short_id("ns").reserve(v),
                ("short id", "pool"),
                V,
            )
        )
    for value in ["1", None, -1, 2**63, 9_999_999, 1.5, True]:
        for method in ["release", "is_taken"]:
            cases.append(
                case(
                    f"short_id.{method}({value!r})",
                    lambda ids, m=method, v=value: getattr(ids.short_id("ns"), m)(v),
                    ("short id", "pool"),
                    V,
                )
            )
    return cases


@pytest.mark.parametrize("c", _method_cases())
def test_generator_methods_refuse_bad_input_and_write_nothing(c: Case, backend: Backend) -> None:
    check(c, backend.ids())
    assert backend.keys() == [], "a refused call wrote to Redis"


@pytest.mark.parametrize("c", _method_cases())
def test_generator_methods_refuse_bad_input_on_asyncio_too(c: Case, backend: Backend) -> None:
    async def refused() -> BaseException:
        ids = async_ids_on(backend)
        try:
            with pytest.raises(Exception) as caught:
                answer = c.call(ids)
                if inspect.isawaitable(answer):
                    await answer
            return caught.value
        finally:
            await ids.aclose()

    judge(c, asyncio.run(refused()))
    assert backend.keys() == [], "a refused call wrote to Redis"


# -- the strategy registry, column floors, Sentinel and replicas, on both front ends ------------

FRONTS = [pytest.param(RedisIds, id="sync"), pytest.param(AsyncRedisIds, id="async")]


def untouched_front(front: type[RedisIds] | type[AsyncRedisIds]) -> Any:
    return front(Untouchable() if front is RedisIds else UntouchableAsync())


def _registry_cases() -> list[Any]:
    build = registry_strategy("sequence").build

    def register_with(**options: Any) -> Callable[[Any], object]:
        return lambda _: register_strategy("catalogue_strategy", build, **options)

    cases = [
        case(f"register replace={v!r}", register_with(replace=v), "replace")
        for v in ["no", 1, None]
    ]
    cases += [
        case(f"register from_claims={v!r}", register_with(from_claims=v), "from_claims")
        for v in ["no", 1, None]
    ]
    cases += [
        case(f"register summary={v!r}", register_with(summary=v), "summary") for v in [5, None]
    ]
    cases += [
        case(f"register options={v!r}", register_with(options=v), "options")
        for v in [5, "--x", None]
    ]
    twice = [OptionSpec("--first", "start"), OptionSpec("--second", "start")]
    cases.append(case("register two flags, one keyword", register_with(options=twice), "keyword"))
    cases += [
        case(f"register config_kind={v!r}", register_with(config_kind=v), "config_kind")
        for v in ["a:b", "Seq Kind", 5, None, "sequence", "short_id"]
    ]
    return cases


@pytest.mark.parametrize("c", _registry_cases())
def test_register_strategy_refuses_bad_input_in_words(c: Case) -> None:
    check(c, untouched())
    assert "catalogue_strategy" not in {each.name for each in strategies()}


def test_a_strategy_may_keep_its_own_name_as_its_kind_on_replace() -> None:
    sequence = registry_strategy("sequence")
    register_strategy(
        "sequence",
        sequence.build,
        generator=sequence.generator,
        options=sequence.options,
        from_claims=sequence.from_claims,
        replace=True,
    )
    assert registry_strategy("sequence") == sequence


FLOOR_TABLE = Table(
    "catalogue_floor",
    MetaData(),
    Column("id", BigInteger),
    Column("name", String(20)),
    Column("at", DateTime),
    Column("code", String(20)),
    Column("amount", Numeric(10, 2)),
)


def _floor_cases() -> list[Any]:
    engine = create_engine("sqlite://")
    c = FLOOR_TABLE.c
    numeric = ["sequence", "snowflake", "short_id", "date_prefixed"]
    cases = [
        case(
            f"{factory} floor_from_column({column.name})",
            lambda ids, f=factory, col=column: getattr(ids, f)(
                "ns", floor=floor_from_column(engine, col)
            ),
            f"catalogue_floor.{column.name}",
        )
        for factory in numeric
        for column in (c.name, c.at, c.amount)
    ]
    cases.append(
        case(
            "daily_code floor_from_column(BigInteger)",
            lambda ids: ids.daily_code("ns", floor=floor_from_column(engine, c.id)),
            "catalogue_floor.id",
        )
    )
    arities: list[tuple[str, Callable[..., Any]]] = [
        ("sequence", lambda day: 0),
        ("snowflake", lambda a, b: 0),
        ("short_id", lambda day: []),
        ("date_prefixed", lambda: 0),
        ("daily_code", lambda day, other: 0),
    ]
    cases += [
        case(
            f"{factory} floor of the wrong arity",
            lambda ids, f=factory, fl=floor: getattr(ids, f)("ns", floor=fl),
            "floor=",
        )
        for factory, floor in arities
    ]
    return cases


def _connection_cases() -> list[Any]:
    cases = [
        case(
            f"from_sentinel sentinel_kwargs={v!r}",
            lambda ids, v=v: type(ids).from_sentinel(["h:26379"], "m", sentinel_kwargs=v),
            "sentinel_kwargs",
        )
        for v in ["x", 5, [("password", "p")]]
    ]
    for value in [2**63, 1001]:
        cases += [
            case(
                f"replicas={value}",
                lambda ids, v=value: type(ids)(ids.nodes.nodes[0].client, replicas=v),
                "replicas",
            ),
            case(
                f"from_url replicas={value}",
                lambda ids, v=value: type(ids).from_url("redis://localhost:6379/0", replicas=v),
                "replicas",
            ),
            case(
                f"from_sentinel replicas={value}",
                lambda ids, v=value: type(ids).from_sentinel(["h:26379"], "m", replicas=v),
                "replicas",
            ),
        ]
    return cases


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize("c", _floor_cases() + _connection_cases())
def test_floors_and_connections_refuse_bad_input_on_both_front_ends(
    c: Case, front: type[RedisIds] | type[AsyncRedisIds]
) -> None:
    check(c, untouched_front(front))


def test_a_lazy_column_of_the_wrong_type_is_refused_when_the_floor_is_read(
    backend: Backend,
) -> None:
    engine = create_engine("sqlite://")
    users = backend.ids().sequence(
        "ns", floor=floor_from_column(engine, lambda: FLOOR_TABLE.c.name)
    )
    with pytest.raises(ConfigError, match=r"catalogue_floor\.name"):
        users.next_id()


@pytest.mark.parametrize("floor", [[2**70], [-1], [10], [2**63]])
def test_a_short_id_floor_outside_the_pool_is_refused_in_words_sync_and_async(
    backend: Backend, floor: list[int]
) -> None:
    options = {"pool_size": 100, "offset": 100, "floor": lambda: floor}
    with pytest.raises(ConfigError, match=r"floor\(\) returned"):
        backend.ids().short_id("pool", **options).next_id()

    async def on_asyncio() -> None:
        ids = async_ids_on(backend)
        try:
            await ids.short_id("pool", **options).next_id()
        finally:
            await ids.aclose()

    with pytest.raises(ConfigError, match=r"floor\(\) returned"):
        asyncio.run(on_asyncio())
    assert not backend.ids().short_id("pool", pool_size=100, offset=100).stats().issued


@pytest.mark.parametrize("front", FRONTS)
def test_a_db_the_server_does_not_have_is_a_configuration_error(
    real_redis: Any, front: type[RedisIds] | type[AsyncRedisIds]
) -> None:
    ids = front.from_url(REDIS_URL.rsplit("/", 1)[0] + "/99", prefix="db99")
    if isinstance(ids, RedisIds):
        with pytest.raises(ConfigError, match="database index of the Redis URL"):
            ids.sequence("users").next_id()
        ids.close()
        return

    async def on_asyncio() -> None:
        try:
            await ids.sequence("users").next_id()
        finally:
            await ids.aclose()

    with pytest.raises(ConfigError, match="database index of the Redis URL"):
        asyncio.run(on_asyncio())


def test_the_catalogue_holds_hundreds_of_cases() -> None:
    total = len(_constructor_cases()) + len(_factory_cases()) + len(_method_cases())
    total += len(_registry_cases()) + len(_floor_cases()) + len(_connection_cases())
    assert total >= 300, total


# -- values that are fine are accepted and do the right thing -------------------------------------


def test_a_datetime_counts_as_its_day(ids: RedisIds) -> None:
    codes = ids.daily_code("dt", tz="UTC")
    assert codes.precreate(datetime(2030, 1, 2, 23, 59)) is True
    assert codes.precreate(date(2030, 1, 2)) is False


def test_purging_before_a_yy_format_begins_is_a_no_op(ids: RedisIds) -> None:
    gen = ids.date_prefixed("yy", fmt="YYDDD", length=17)
    assert gen.purge_before(date(1999, 1, 1)) == []


def test_ensure_at_least_the_largest_value_is_accepted(ids: RedisIds) -> None:
    seq = ids.sequence("top", js_safe=True)
    assert seq.ensure_at_least(2**53 - 1)[0][2] == 2**53 - 1


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost",
        "redis://localhost:6379",
        "redis://localhost:6379/",
        "redis://localhost:6379/15",
        "redis://user:secret@localhost:6379/0",
        "rediss://[::1]:6380/2?ssl_cert_reqs=none",
        "redis://localhost:6379?db=3",
        "unix:///tmp/redis.sock?db=1",
    ],
)
def test_good_urls_are_accepted(url: str) -> None:
    assert check_redis_url(url) == url
    RedisIds.from_url(url).close()


@pytest.mark.parametrize(
    "url",
    ["redis://user:hunter2@localhost:6379/abc", "redis://user:hun#ter2@localhost:6379/0"],
)
def test_a_refused_url_does_not_show_its_password(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        RedisIds.from_url(url)
    assert "hunter2" not in str(caught.value) and "ter2" not in str(caught.value)
    assert "***" in str(caught.value)


def test_retry_after_0_retries_a_down_node_at_once() -> None:
    assert RedisIds(Untouchable(), retry_after=0).nodes.retry_after == 0


# -- metrics -------------------------------------------------------------------------------------


def _metrics_cases() -> list[Any]:
    def prometheus(**options: Any) -> Callable[[RedisIds], object]:
        return lambda ids: enable_prometheus(ids, CollectorRegistry(), **options)

    cases: list[Any] = []
    for bad in [None, "ids", 5, object()]:
        cases += [
            case(f"enable_prometheus({bad!r})", lambda _, b=bad: enable_prometheus(b), "ids"),
            case(f"enable_opentelemetry({bad!r})", lambda _, b=bad: enable_opentelemetry(b), "ids"),
            case(f"disable_metrics({bad!r})", lambda _, b=bad: disable_metrics(b), "ids"),
        ]
    for bad in [5, "registry", object(), {}]:
        cases.append(
            case(
                f"registry={bad!r}",
                lambda ids, b=bad: enable_prometheus(ids, registry=b),
                "registry",
            )
        )
    for bad in [5, "1,2", [], [-1, 1], [0, 1], [1, 1], [2, 1], [nan], [True, 2], ["1"], {1: 2}]:
        cases.append(case(f"buckets={bad!r}", prometheus(buckets=bad), "buckets"))
    for bad in BAD_SECONDS:
        cases.append(
            case(f"refresh_seconds={bad!r}", prometheus(refresh_seconds=bad), "refresh_seconds")
        )
    for bad in [5, "meter", object(), CollectorRegistry()]:
        cases.append(
            case(
                f"meter={bad!r}",
                lambda ids, b=bad: enable_opentelemetry(ids, meter=b),
                "meter",
            )
        )
    return cases


@pytest.mark.parametrize("c", _metrics_cases())
def test_metrics_entries_refuse_bad_input(c: Case) -> None:
    ids = untouched()
    check(c, ids)
    assert ids.nodes.observer is None, "nothing was attached"


def test_good_buckets_and_refresh_seconds_are_accepted() -> None:
    sink = enable_prometheus(
        untouched(), CollectorRegistry(), buckets=(0.001, 0.5, inf), refresh_seconds=0.5
    )
    assert sink.refresh_seconds == 0.5


# -- the command line: one line on stderr, never a traceback --------------------------------------

CLI_CASES = [
    ["next", "ns", "--count", "99999999999"],
    ["next", "ns", "--count", "0"],
    ["next", "ns", "--count", "x"],
    ["next", "bad ns"],
    ["next", "ns", "--redis-url", "redis://localhost:6379/abc"],
    ["next", "ns", "--redis-url", "redis://"],
    ["next", "ns", "--redis-url", "http://x"],
    ["next", "ns", "--strategy", "date_prefixed", "--length", "5"],
    ["next", "ns", "--strategy", "date_prefixed", "--fmt", "YYYY"],
    ["next", "ns", "--strategy", "daily_code", "--digits", "0"],
    ["next", "ns", "--strategy", "short_id", "--pool-size", "-1"],
    ["next", "ns", "--strategy", "sequence", "--start", "-5"],
    ["next", "ns", "--strategy", "snowflake", "--shard", "99999"],
    ["next", "ns", "--strategy", "snowflake", "--tolerance-ms", "-1"],
    ["next", "ns", "--strategy", "snowflake", "--layout", "0:99/1/1"],
    ["next", "ns", "--strategy", "nope"],
    ["maintain", "--app", "json:dumps", "--once"],
    ["maintain", "--app", "no_such_module_xyz:ids", "--once"],
    ["maintain", "--app", "json:no_such_attribute", "--once"],
    ["maintain", "--app", "json", "--once"],
    ["maintain", "--keep-days", "1", "--once"],
    [
        "parse",
        "99987310000000",
        "--strategy",
        "date_prefixed",
        "--fmt",
        "YYYYDDD",
        "--length",
        "14",
        "--start",
        "0",
    ],
    ["parse", "x"],
    ["parse", "-1"],
    ["parse", "99999999999999999999999"],
    ["parse", "5", "--strategy", "date_prefixed", "--length", "99"],
    ["parse", "5", "--strategy", "daily_code", "--digits", "-1"],
    ["parse", "IS", "--strategy", "daily_code"],
    ["parse", "5", "--layout", "nope"],
    ["next", "ns", "--cluster", "--redis-url", "redis://127.0.0.1:1"],
    ["demo", "--db-url", "nope://x"],
    ["nope"],
    [],
]


@pytest.mark.parametrize("argv", CLI_CASES, ids=[" ".join(a) or "<none>" for a in CLI_CASES])
def test_cli_errors_are_one_line(
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)
    status: object
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse's own errors
        status = exc.code
    err = capsys.readouterr().err
    assert status not in (0, None)
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err
    if lines[0].startswith("usage:"):  # argparse prints the usage line first
        lines = lines[1:]
    assert len(lines) == 1, err
    assert lines[0].startswith("sa-redis-ids"), err


def test_a_closed_pipe_ends_next_quietly(tmp_path: Path) -> None:
    script = shutil.which("sa-redis-ids", path=str(Path(sys.executable).parent))
    assert script
    env = {k: v for k, v in os.environ.items() if not k.startswith("SA_REDIS_IDS_")}
    process = subprocess.Popen(
        [script, "next", "ns", "--count", "200000"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    assert process.stdout.readline().strip() == b"1"
    process.stdout.close()  # what `| head -1` does
    err = process.stderr.read().decode()
    process.wait(timeout=60)
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert err == ""
    assert process.returncode == 141


# -- properties (derandomized by the profile in conftest.py) --------------------------------------


def digits(low: int, high: int) -> st.SearchStrategy[int]:
    """Integers of ``low`` to ``high`` digits, each digit drawn alone (edges such as 9999 come up)."""
    return st.integers(low, high).flatmap(
        lambda n: st.text("0123456789", min_size=n, max_size=n).map(int)
    )


@st.composite
def date_prefixed(draw: st.DrawFn) -> Any:
    fmt = draw(st.sampled_from(sorted(FORMATS)))
    full_year = fmt.startswith("YYYY")
    length = draw(st.integers(max(8, FORMATS[fmt] + 1), 19 if full_year else 18))
    start = draw(st.sampled_from([0, 1]))
    return untouched().date_prefixed("p", fmt=fmt, length=length, start=start)


@st.composite
def prefixed_values(draw: st.DrawFn) -> tuple[Any, int]:
    """A generator and a value whose date part leans to the edges (year 0 or 9999, day 0 or 999)."""
    gen = draw(date_prefixed())
    width = FORMATS[gen.fmt]
    year_width = 4 if gen.fmt.startswith("YYYY") else 2
    edge_years = (
        ["0000", "0001", "1999", "2000", "9998", "9999"] if year_width == 4 else ["00", "99"]
    )
    year = draw(
        st.sampled_from(edge_years)
        | st.text("0123456789", min_size=year_width, max_size=year_width)
    )
    rest_width = width - year_width
    edge_rest = (
        ["0000", "0101", "0229", "1231", "1332", "9999"]
        if rest_width == 4
        else ["000", "001", "365", "366", "367", "731", "873", "999"]
    )
    rest = draw(
        st.sampled_from(edge_rest) | st.text("0123456789", min_size=rest_width, max_size=rest_width)
    )
    counter = draw(st.integers(0, 10 ** (gen.length - width) - 1))
    return gen, int(f"{year}{rest}{counter:0{gen.length - width}d}")


@settings(max_examples=300)
@given(gen=date_prefixed(), value=digits(1, 19))
def test_date_prefixed_parse_is_a_value_error_or_a_round_trip(gen: Any, value: int) -> None:
    try:
        parts = gen.parse(value)
    except ValueError:
        return
    assert gen.compose(parts.day, parts.counter) == value


@settings(max_examples=500)
@given(drawn=prefixed_values())
def test_date_prefixed_parse_of_edge_dates_is_a_value_error_or_a_round_trip(
    drawn: tuple[Any, int],
) -> None:
    gen, value = drawn
    try:
        parts = gen.parse(value)
    except ValueError:
        return
    assert gen.compose(parts.day, parts.counter) == value


def test_day_366_of_the_last_year_is_a_value_error_not_an_overflow() -> None:
    """Found by the property above: 9999 is no leap year, so its day 366 would be in 10000."""
    gen = untouched().date_prefixed("p", fmt="YYYYDDD", length=19)
    with pytest.raises(ValueError, match="day of year 366 does not exist in 9999"):
        gen.parse(int("9999366" + "0" * 11 + "1"))


@settings(max_examples=300)
@given(
    layout=st.sampled_from([*LAYOUTS.values(), SnowflakeLayout(0, 40, 3, 20)]),
    value=digits(1, 20),
)
def test_snowflake_parse_is_a_value_error_or_a_round_trip(
    layout: SnowflakeLayout, value: int
) -> None:
    try:
        parts = layout.parse(value)
    except ValueError:
        return
    assert layout.compose(parts.ms, parts.shard, parts.sequence) == value


@settings(max_examples=300)
@given(digits=st.integers(1, 6), text=st.text("IS0123456789x-", max_size=24))
def test_daily_code_parse_is_a_value_error_or_a_round_trip(digits: int, text: str) -> None:
    gen = untouched().daily_code("c", digits=digits)
    try:
        parts = gen.parse(text)
    except ValueError:
        return
    assert gen.compose(parts.day, parts.counter) == text


@settings(max_examples=300)
@given(
    text=st.one_of(
        st.text(max_size=40),
        st.builds(
            "{}://{}{}{}".format,
            st.sampled_from(["redis", "rediss", "unix"]),
            st.text("abc.:[]@0123456789", max_size=12),
            st.sampled_from(["", ":", ":6379", ":0", ":65536", ":x"]),
            st.text("/0123456789abc?=&db-", max_size=10),
        ),
    )
)
def test_a_redis_url_is_accepted_or_refused_in_words(text: str) -> None:
    try:
        check_redis_url(text)
    except ConfigError as exc:
        assert "url" in str(exc).lower()


# -- the ORM entries ------------------------------------------------------------------------------


def _orm_cases() -> list[tuple[str, Callable[[Any, Any], object], type[Exception], str]]:
    return [
        ("register(model, 'seq')", lambda m, g: register(m, "seq"), TypeError, "ID generator"),
        ("register(42, gen)", lambda m, g: register(42, g), ConfigError, "mapped class"),
        (
            "register(model, gen, attr='nope')",
            lambda m, g: register(m, g, "nope"),
            ConfigError,
            "nope",
        ),
        ("register(model, gen, attr=5)", lambda m, g: register(m, g, 5), ConfigError, "5"),
        ("register on a VARCHAR", lambda m, g: register(m, g, "name"), ConfigError, "cannot hold"),
        ("redis_id('x')", lambda m, g: redis_id("x"), TypeError, "ID generator"),
        ("redis_id(None)", lambda m, g: redis_id(None), TypeError, "ID generator"),
    ]


@pytest.mark.parametrize(
    ("call", "error", "words"), [c[1:] for c in _orm_cases()], ids=[c[0] for c in _orm_cases()]
)
def test_orm_entries_refuse_bad_input(
    call: Callable[[Any, Any], object], error: type[Exception], words: str
) -> None:
    class Base(DeclarativeBase):
        pass

    class Model(Base):
        __tablename__ = "inputs_model"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        name: Mapped[str] = mapped_column(String(5))

    generator = untouched().sequence("orm")
    with pytest.raises(error, match=words):
        call(Model, generator)
