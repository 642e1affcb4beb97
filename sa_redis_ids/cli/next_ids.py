"""``sa-redis-ids next NS``: print new IDs of a namespace."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from sa_redis_ids.cli.options import add_redis_options, positive_int, redis_ids_from
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.strategies.base import IdGenerator

Builder = Callable[[RedisIds, str, argparse.Namespace], IdGenerator[Any]]

#: How each ``--strategy`` makes its generator from the parsed options.
STRATEGIES: dict[str, Builder] = {
    "sequence": lambda ids, ns, args: ids.sequence(ns, start=args.start),
}


def register(sub: Any) -> None:
    parser = sub.add_parser("next", help="print new IDs", description="Print new IDs of NAMESPACE.")
    parser.add_argument("namespace", metavar="NAMESPACE")
    parser.add_argument("--count", "-n", type=positive_int, default=1, help="how many (default 1)")
    parser.add_argument(
        "--strategy", choices=sorted(STRATEGIES), default="sequence", help="default: sequence"
    )
    parser.add_argument("--start", type=int, default=1, help="sequence: first value (default 1)")
    add_redis_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    ids = redis_ids_from(args)
    generator = STRATEGIES[args.strategy](ids, args.namespace, args)
    for value in generator.next_ids(args.count):
        print(value)
    return 0
