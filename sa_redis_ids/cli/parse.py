"""``sa-redis-ids parse VALUE --strategy …``: print the parts of an ID (time, shard, day, counter…).

Every registered strategy whose generators are
:class:`~sa_redis_ids.generators.abilities.Parseable` is offered, with the options it declares:
VALUE is decoded by a generator of those options (built, never called: no command reaches Redis,
but ``--redis-url`` repeated N times tells a sequence which of N nodes issued a value).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from datetime import date, datetime
from typing import Any

from sa_redis_ids.cli.generators import add_generator_options, given_options
from sa_redis_ids.cli.options import add_redis_options, redis_ids_from
from sa_redis_ids.generators.abilities import Parseable
from sa_redis_ids.generators.registry import Strategy, strategies

DEFAULT_STRATEGY = "snowflake"


def parseable() -> list[Strategy]:
    """The registered strategies whose values decode into parts."""
    return [each for each in strategies() if each.has(Parseable)]


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not an integer") from None


def register(sub: Any) -> None:
    among = parseable()
    names = [each.name for each in among]
    parser = sub.add_parser(
        "parse",
        help="print the parts of an ID",
        description="Decode VALUE into its parts: a snowflake ID into its UTC time, shard and "
        "sequence; a date-prefixed ID or a daily code into its day and counter; a sequence "
        "value into its node and counter; any registered strategy that can parse its values.",
    )
    parser.add_argument("value", metavar="VALUE")
    parser.add_argument(
        "--strategy",
        choices=names,
        default=DEFAULT_STRATEGY if DEFAULT_STRATEGY in names else None,
        required=DEFAULT_STRATEGY not in names,
        help=f"(default: {DEFAULT_STRATEGY})",
    )
    add_generator_options(
        parser,
        among,
        per_call=False,
        parse_only=True,
        title="generator options (default: the library's defaults)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_redis_options(parser)
    parser.set_defaults(run=run)


def _plain(value: Any) -> Any:
    return value.isoformat() if isinstance(value, (date, datetime)) else value


def run(args: argparse.Namespace) -> int:
    try:
        options = given_options(args, args.strategy)
        with warnings.catch_warnings():
            # Warnings about issuing IDs with these options (an old layout) do not concern decoding.
            warnings.simplefilter("ignore")
            generator = redis_ids_from(args).generator(args.strategy, "parse", **options)
        value: Any = args.value if generator.python_type is str else _integer(args.value)
        if not isinstance(generator, Parseable):
            raise ValueError(f"a {args.strategy} generator cannot parse its values")
        parts = generator.parse(value)
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
