"""The five strategies the library ships, registered under their factory names, each with the
command-line options that shape it (the one place the command line learns them from)."""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import FORMATS, DatePrefixedGenerator
from sa_redis_ids.generators.registry import Build, Context, OptionSpec, register_strategy, switch
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.generators.snowflake import (
    LAYOUTS,
    SnowflakeGenerator,
    SnowflakeLayout,
    resolve_layout,
)
from sa_redis_ids.secret import secret_option


def _user_stacklevel() -> int:
    """The ``stacklevel`` of a warning raised here that points at the first caller outside this
    package (a factory may be reached through ``ids.sequence`` or ``ids.generator``)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("sa_redis_ids."):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def build_sequence(context: Context, namespace: str, **options: Any) -> SequenceGenerator:
    """Increasing integers; with N nodes each node issues its residue class."""
    return SequenceGenerator(context.nodes, context.prefix, namespace, **options)


def build_snowflake(
    context: Context, namespace: str, *, layout: Any = "default", **options: Any
) -> SnowflakeGenerator:
    """Time-ordered ms · shard · sequence IDs from Redis TIME."""
    resolved = resolve_layout(layout, stacklevel=_user_stacklevel())
    return SnowflakeGenerator(context.nodes, context.prefix, namespace, layout=resolved, **options)


def build_short_id(context: Context, namespace: str, **options: Any) -> ShortIdGenerator:
    """Random unique numbers from a fixed pool (a Redis bitmap)."""
    return ShortIdGenerator(context.nodes, context.prefix, namespace, **options)


def build_date_prefixed(context: Context, namespace: str, **options: Any) -> DatePrefixedGenerator:
    """Integers <date prefix><day counter>, the day by Redis time in a time zone."""
    return DatePrefixedGenerator(
        context.nodes, context.prefix, namespace, locker=context.day_lock, **options
    )


def build_daily_code(context: Context, namespace: str, **options: Any) -> DailyCodeGenerator:
    """Codes prefix + YYYYMMDD + N-digit counter restarting every day."""
    if "prefix" in options:  # the older name, easily confused with RedisIds(prefix=...)
        if "code_prefix" in options:
            raise ConfigError("give code_prefix= only (prefix= is its older name)")
        warnings.warn(
            "daily_code(prefix=...) is now daily_code(code_prefix=...): prefix= names the key "
            "prefix of RedisIds",
            DeprecationWarning,
            stacklevel=_user_stacklevel(),
        )
        options["code_prefix"] = options.pop("prefix")
    return DailyCodeGenerator(
        context.nodes, context.prefix, namespace, locker=context.day_lock, **options
    )


INTEGER = re.compile(r"-?[0-9]+")
"""The text of an integer option."""


def integer(text: str) -> int:
    """An option's integer: ASCII digits, perhaps after a ``-`` (no spaces, ``+`` or ``_``, which
    Python's ``int`` would take); its range is the factory's to check, with the option's name."""
    if not INTEGER.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer (digits 0-9, maybe after -)")
    return int(text)


def snowflake_layout(text: str) -> str | SnowflakeLayout:
    """A layout name, or ``EPOCH_MS:TIME/SHARD/SEQUENCE`` bits (``0:41/12/10``)."""
    if text in LAYOUTS:
        return text
    try:
        epoch, bits = text.split(":")
        time_bits, shard_bits, sequence_bits = (int(part) for part in bits.split("/"))
        return SnowflakeLayout(int(epoch), time_bits, shard_bits, sequence_bits)
    except ValueError as exc:  # ConfigError is a ValueError too
        names = ", ".join(LAYOUTS)
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a layout: use {names} or EPOCH_MS:TIME/SHARD/SEQUENCE bits "
            f"such as 0:41/12/10 ({exc})"
        ) from None


def date_format(text: str) -> str:
    """One of the date-prefixed formats."""
    if text not in FORMATS:
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {', '.join(FORMATS)}")
    return text


JS_SAFE = OptionSpec("--js-safe", "js_safe", "at most 2^53-1", parse=switch)
SECRET = OptionSpec(
    "--secret-env",
    "secret",
    "the environment variable holding the key of secret= (the key itself never goes on the "
    "command line)",
    parse=secret_option,
)


@dataclass(frozen=True)
class Builtin:
    """One shipped strategy: what ``register_strategy`` gets for it."""

    build: Build
    generator: type[IdGenerator[Any]]
    options: tuple[OptionSpec, ...]
    from_claims: bool = True


BUILTIN: dict[str, Builtin] = {
    "sequence": Builtin(
        build_sequence,
        SequenceGenerator,
        (OptionSpec("--start", "start", "first value", parse=integer), JS_SAFE),
    ),
    "snowflake": Builtin(
        build_snowflake,
        SnowflakeGenerator,
        (
            OptionSpec(
                "--layout",
                "layout",
                "default, compat (the classic 41/12/10 layout, ms since 1970), js_safe or "
                "EPOCH_MS:TIME/SHARD/SEQUENCE bits",
                parse=snowflake_layout,
            ),
            OptionSpec(
                "--tolerance-ms", "tolerance_ms", "clock step back tolerated", parse=integer
            ),
            OptionSpec("--shard", "shard", "shard of the IDs (default 0)", integer, per_call=True),
        ),
        from_claims=False,  # its config records the layout's bits, not the factory's keywords
    ),
    "short_id": Builtin(
        build_short_id,
        ShortIdGenerator,
        (
            OptionSpec("--pool-size", "pool_size", "pool size", parse=integer),
            OptionSpec("--offset", "offset", "first value of the pool", parse=integer),
        ),
    ),
    "date_prefixed": Builtin(
        build_date_prefixed,
        DatePrefixedGenerator,
        (
            OptionSpec("--fmt", "fmt", f"date format: {', '.join(FORMATS)}", parse=date_format),
            OptionSpec("--length", "length", "total digits", parse=integer),
            OptionSpec("--start", "start", "first counter of a day", parse=integer),
            OptionSpec("--tz", "tz", "time zone of the days (library default UTC)"),
            JS_SAFE,
            SECRET,
        ),
    ),
    "daily_code": Builtin(
        build_daily_code,
        DailyCodeGenerator,
        (
            OptionSpec(
                "--code-prefix", "code_prefix", "code prefix (default IS)", recorded="prefix"
            ),
            OptionSpec("--digits", "digits", "counter digits", parse=integer),
            OptionSpec("--tz", "tz", "time zone of the days (library default Asia/Shanghai)"),
            SECRET,
        ),
    ),
}
"""The library's strategies by factory name."""

for _name, _builtin in BUILTIN.items():
    register_strategy(
        _name,
        _builtin.build,
        generator=_builtin.generator,
        options=_builtin.options,
        from_claims=_builtin.from_claims,
        replace=True,
    )
