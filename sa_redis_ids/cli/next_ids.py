"""``sa-redis-ids next NS``: print new IDs of a namespace."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from sa_redis_ids.cli.options import add_redis_options, positive_int, redis_ids_from
from sa_redis_ids.cli.parse import snowflake_layout
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.strategies.base import IdGenerator
from sa_redis_ids.strategies.snowflake import (
    DEFAULT_TOLERANCE_MS,
    SnowflakeGenerator,
    check_shard,
)

Builder = Callable[[RedisIds, str, argparse.Namespace], IdGenerator[Any]]

#: How each ``--strategy`` makes its generator from the parsed options.
STRATEGIES: dict[str, Builder] = {
    "sequence": lambda ids, ns, args: ids.sequence(ns, start=args.start),
    "date_prefixed": lambda ids, ns, args: ids.date_prefixed(
        ns,
        fmt=args.fmt,
        length=args.length,
        start=args.start,
        js_safe=args.js_safe,
        **({"tz": args.tz} if args.tz else {}),
    ),
    "daily_code": lambda ids, ns, args: ids.daily_code(
        ns, prefix=args.code_prefix, digits=args.digits, **({"tz": args.tz} if args.tz else {})
    ),
    "snowflake": lambda ids, ns, args: ids.snowflake(
        ns, layout=args.layout, tolerance_ms=args.tolerance_ms
    ),
    "short_id": lambda ids, ns, args: ids.short_id(
        ns, pool_size=args.pool_size, offset=args.offset
    ),
}


def register(sub: Any) -> None:
    parser = sub.add_parser("next", help="print new IDs", description="Print new IDs of NAMESPACE.")
    parser.add_argument("namespace", metavar="NAMESPACE")
    parser.add_argument("--count", "-n", type=positive_int, default=1, help="how many (default 1)")
    parser.add_argument(
        "--strategy", choices=sorted(STRATEGIES), default="sequence", help="default: sequence"
    )
    parser.add_argument(
        "--start", type=int, default=1, help="sequence: first value; date_prefixed: first counter"
    )
    parser.add_argument(
        "--fmt",
        default="YYYYMMDD",
        help="date_prefixed: YYYYMMDD, YYMMDD, YYYYDDD or YYDDD (default YYYYMMDD)",
    )
    parser.add_argument(
        "--length", type=int, default=19, help="date_prefixed: total digits (default 19)"
    )
    parser.add_argument("--js-safe", action="store_true", help="date_prefixed: stay at most 2^53-1")
    parser.add_argument(
        "--tz", default=None, help="date_prefixed (default UTC), daily_code (default Asia/Shanghai)"
    )
    parser.add_argument("--code-prefix", default="IS", help="daily_code: code prefix (default IS)")
    parser.add_argument(
        "--digits", type=positive_int, default=4, help="daily_code: counter digits (default 4)"
    )
    parser.add_argument(
        "--layout",
        type=snowflake_layout,
        default="default",
        help="snowflake: default, compat, js_safe or EPOCH_MS:TIME/SHARD/SEQUENCE bits",
    )
    parser.add_argument("--shard", type=int, default=0, help="snowflake: shard (default 0)")
    parser.add_argument(
        "--tolerance-ms",
        type=int,
        default=DEFAULT_TOLERANCE_MS,
        help=f"snowflake: clock step back tolerated (default {DEFAULT_TOLERANCE_MS})",
    )
    parser.add_argument(
        "--pool-size", type=int, default=10_000_000, help="short_id: pool size (default 10000000)"
    )
    parser.add_argument(
        "--offset", type=int, default=10_000_000, help="short_id: first value (default 10000000)"
    )
    add_redis_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    ids = redis_ids_from(args)
    generator = STRATEGIES[args.strategy](ids, args.namespace, args)
    if isinstance(generator, SnowflakeGenerator):
        try:
            check_shard(args.shard, generator.layout)
        except ValueError as exc:
            print(f"sa-redis-ids: error: --shard: {exc}", file=sys.stderr)
            return 2
        values = generator.next_ids(args.count, shard=args.shard)
    else:
        values = generator.next_ids(args.count)
    for value in values:
        print(value)
    return 0
