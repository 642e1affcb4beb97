"""The five strategies the library ships, registered under their factory names."""

from __future__ import annotations

import warnings
from typing import Any

from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.generators.registry import Build, Context, register_strategy
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.generators.snowflake import SnowflakeGenerator, resolve_layout


def build_sequence(context: Context, namespace: str, **options: Any) -> SequenceGenerator:
    """Increasing integers; with N nodes each node issues its residue class."""
    return SequenceGenerator(context.nodes, context.prefix, namespace, **options)


def build_snowflake(
    context: Context, namespace: str, *, layout: Any = "default", **options: Any
) -> SnowflakeGenerator:
    """Time-ordered ms · shard · sequence IDs from Redis TIME."""
    resolved = resolve_layout(layout, stacklevel=5)
    return SnowflakeGenerator(context.nodes, context.prefix, namespace, layout=resolved, **options)


def build_short_id(context: Context, namespace: str, **options: Any) -> ShortIdGenerator:
    """Random unique numbers from a fixed pool (a Redis bitmap)."""
    return ShortIdGenerator(context.nodes, context.prefix, namespace, **options)


def build_date_prefixed(context: Context, namespace: str, **options: Any) -> DatePrefixedGenerator:
    """Integers <date prefix><day counter>, the day by Redis time in a time zone."""
    return DatePrefixedGenerator(
        context.nodes, context.prefix, namespace, locker=context.day_lock, **options
    )


def build_daily_code(
    context: Context, namespace: str, *, code_prefix: Any = None, **options: Any
) -> DailyCodeGenerator:
    """Codes prefix + YYYYMMDD + N-digit counter restarting every day."""
    if "prefix" in options:  # the older name, easily confused with RedisIds(prefix=...)
        legacy = options.pop("prefix")
        warnings.warn(
            "daily_code(prefix=...) is now daily_code(code_prefix=...): prefix= names the key "
            "prefix of RedisIds",
            DeprecationWarning,
            stacklevel=5,
        )
        code_prefix = legacy if code_prefix is None else code_prefix
    return DailyCodeGenerator(
        context.nodes,
        context.prefix,
        namespace,
        code_prefix="IS" if code_prefix is None else code_prefix,
        locker=context.day_lock,
        **options,
    )


BUILTIN: dict[str, Build] = {
    "sequence": build_sequence,
    "snowflake": build_snowflake,
    "short_id": build_short_id,
    "date_prefixed": build_date_prefixed,
    "daily_code": build_daily_code,
}
"""The library's strategies by factory name."""

for _name, _build in BUILTIN.items():
    register_strategy(_name, _build, replace=True)
