"""Abilities by type, and the strategies' command-line options declared once in the registry."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.cli.maintain import namespace_flags
from sa_redis_ids.cli.parse import parseable
from sa_redis_ids.cli.reseed import reseedable
from sa_redis_ids.generators import registry
from sa_redis_ids.generators.abilities import DayKeyed, Parseable, Pool, Reseedable
from sa_redis_ids.generators.registry import OptionSpec, register_strategy, strategy
from sa_redis_ids.maintenance.claims import claim_kinds

if TYPE_CHECKING:  # mypy checks that the built-ins satisfy the protocols structurally
    from sa_redis_ids.generators.daily_code import DailyCodeGenerator
    from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
    from sa_redis_ids.generators.sequence import SequenceGenerator
    from sa_redis_ids.generators.short_id import ShortIdGenerator
    from sa_redis_ids.generators.snowflake import SnowflakeGenerator

    def _static(
        dp: DatePrefixedGenerator,
        dc: DailyCodeGenerator,
        seq: SequenceGenerator,
        sid: ShortIdGenerator,
        sf: SnowflakeGenerator,
    ) -> None:
        days: list[DayKeyed] = [dp, dc]
        counters: list[Reseedable] = [dp, dc, seq]
        pools: list[Pool] = [sid]
        parsers: list[Parseable] = [dp, dc, seq, sf]
        del days, counters, pools, parsers


ABILITIES = (DayKeyed, Pool, Reseedable, Parseable)


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        ("sequence", {Reseedable, Parseable}),
        ("snowflake", {Parseable}),
        ("short_id", {Pool}),
        ("date_prefixed", {DayKeyed, Reseedable, Parseable}),
        ("daily_code", {DayKeyed, Reseedable, Parseable}),
    ],
)
def test_each_builtin_has_its_abilities_by_type(factory: str, expected: set[type]) -> None:
    made = RedisIds.embedded().generator(factory, "ns")
    assert {a for a in ABILITIES if isinstance(made, a)} == expected
    assert {a for a in ABILITIES if strategy(factory).has(a)} == expected
    buffered = RedisIds.embedded().sequence("ns", block=10)
    assert not isinstance(buffered, Pool), "a buffer's stats() does not make a pool"


def test_the_commands_take_their_strategies_from_the_registry() -> None:
    builtin = {"daily_code", "date_prefixed", "sequence", "short_id"}
    assert builtin <= set(claim_kinds()) and "snowflake" not in claim_kinds()
    assert {"--daily-code", "--date-prefixed", "--short-id"} <= {f for f, _ in namespace_flags()}
    assert "--sequence" not in {f for f, _ in namespace_flags()}
    assert builtin <= {s.name for s in reseedable()}
    assert "snowflake" not in {s.name for s in reseedable()}
    assert {"snowflake", "sequence", "date_prefixed", "daily_code"} <= {s.name for s in parseable()}


def test_daily_code_maps_its_flag_and_recorded_name() -> None:
    spec = strategy("daily_code").option("--code-prefix")
    assert spec is not None and (spec.keyword, spec.config_name) == ("code_prefix", "prefix")


def test_digits_is_read_the_same_by_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["next", "c", "--strategy", "daily_code", "--digits", "x"],
        ["parse", "IS202611220001", "--strategy", "daily_code", "--digits", "x"],
        ["reseed", "c", "--table", "t", "--db-url", "sqlite://", "--digits", "x"],
    ):
        with pytest.raises(SystemExit) as caught:
            main(argv)
        assert caught.value.code == 2
        assert "'x' is not an integer" in capsys.readouterr().err


def test_parse_offers_every_parseable_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "7", "--strategy", "sequence", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "strategy": "sequence",
        "recognised": False,
        "value": 7,
        "node_index": 0,
        "counter": 7,
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ([OptionSpec("--prefix", "code_prefix")], "the command line's own"),
        ([OptionSpec("--a", "a"), OptionSpec("--a", "b")], "declares a flag twice"),
        (["--a"], "must be OptionSpec"),
    ],
)
def test_bad_option_declarations_are_refused(options: list[Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        register_strategy("bad_options", registry.strategy("sequence").build, options=options)
    assert "bad_options" not in {s.name for s in registry.strategies()}


@pytest.mark.parametrize(
    ("flag", "keyword"), [("start", "start"), ("--Start", "start"), ("--start", "not ok")]
)
def test_an_option_spec_checks_its_flag_and_keyword(flag: str, keyword: str) -> None:
    with pytest.raises(ConfigError):
        OptionSpec(flag, keyword)
