"""``sa-redis-ids parse VALUE --strategy …``: print the parts of an ID (time, shard, day, counter…).

Each strategy with parts has an entry in :data:`PARSERS`. Snowflake IDs decode without Redis; a
date-prefixed value is decoded by a generator of the given format (no command reaches Redis, but
``--redis-url`` repeated N times tells which of N nodes issued it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable
from datetime import date, datetime
from typing import Any

from sa_redis_ids.cli.options import add_redis_options, redis_ids_from
from sa_redis_ids.generators.date_prefixed import FORMATS
from sa_redis_ids.generators.snowflake import LAYOUTS, SnowflakeLayout

Decoder = Callable[[str, argparse.Namespace], Any]
"""Decode VALUE (as typed: codes are text) with the parsed options into a dataclass record."""


def snowflake_layout(text: str) -> str | SnowflakeLayout:
    """argparse type: a layout name, or ``EPOCH_MS:TIME/SHARD/SEQUENCE`` bits (``0:41/12/10``)."""
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


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def _snowflake(value: str, args: argparse.Namespace) -> Any:
    layout = args.layout
    return (LAYOUTS[layout] if isinstance(layout, str) else layout).parse(_integer(value))


def _date_prefixed(value: str, args: argparse.Namespace) -> Any:
    generator = redis_ids_from(args).date_prefixed(
        "parse", fmt=args.fmt, length=args.length, start=args.start
    )
    return generator.parse(_integer(value))


def _daily_code(value: str, args: argparse.Namespace) -> Any:
    generator = redis_ids_from(args).daily_code(
        "parse", code_prefix=args.code_prefix, digits=args.digits
    )
    return generator.parse(value)


#: How each ``--strategy`` decodes a value.
PARSERS: dict[str, Decoder] = {
    "snowflake": _snowflake,
    "date_prefixed": _date_prefixed,
    "daily_code": _daily_code,
}


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "parse",
        help="print the parts of an ID",
        description="Decode VALUE: a snowflake ID into its UTC time, shard and sequence; a "
        "date-prefixed ID or a daily code into its day and counter.",
    )
    parser.add_argument("value", metavar="VALUE")
    parser.add_argument("--strategy", choices=sorted(PARSERS), default="snowflake")
    parser.add_argument(
        "--layout",
        type=snowflake_layout,
        default="default",
        help="snowflake: default, compat (seed 003, ms since 1970), js_safe, or "
        "EPOCH_MS:TIME/SHARD/SEQUENCE bits (default: default)",
    )
    parser.add_argument(
        "--fmt", choices=list(FORMATS), default="YYYYMMDD", help="date_prefixed: date format"
    )
    parser.add_argument("--length", type=int, default=19, help="date_prefixed: total digits")
    parser.add_argument("--start", type=int, default=1, help="date_prefixed: first counter")
    parser.add_argument("--code-prefix", default="IS", help="daily_code: code prefix (default IS)")
    parser.add_argument("--digits", type=int, default=4, help="daily_code: counter digits")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_redis_options(parser)
    parser.set_defaults(run=run)


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (date, datetime)) else value


def run(args: argparse.Namespace) -> int:
    try:
        parts = PARSERS[args.strategy](args.value, args)
    except ValueError as exc:
        print(f"sa-redis-ids: error: {exc}", file=sys.stderr)
        return 1
    record = {field.name: _plain(getattr(parts, field.name)) for field in dataclasses.fields(parts)}
    if args.json:
        print(json.dumps(record))
    else:
        width = max(len(name) for name in record)
        for name, value in record.items():
            print(f"{name + ':':<{width + 1}} {value}")
    return 0
