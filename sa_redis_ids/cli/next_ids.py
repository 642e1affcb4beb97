"""``sa-redis-ids next NS``: print new IDs of a namespace.

The generator is the application's (``--app module:attr``), else the one the node claims of the
namespace describe (an option given here must equal the recorded one), else (no claim anywhere)
one from the options given and the library's defaults. On a real Redis a node without a claim for
the namespace means it is new there or Redis lost its data; values taken then could repeat IDs the
database holds, so ``next`` refuses unless ``--new`` says the namespace is new. The embedded Redis
starts empty on every run and needs no ``--new``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sa_redis_ids.cli.generators import (
    add_generator_options,
    call_options,
    factory_name,
    find_generator,
    generator_from_nodes,
    refuse_options_with_app,
)
from sa_redis_ids.cli.maintain import add_app_option, app_or_redis
from sa_redis_ids.cli.options import add_redis_options, count
from sa_redis_ids.cli.output import add_json_option, print_json
from sa_redis_ids.errors import ConfigError, SaRedisIdsError
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.registry import strategies, strategy
from sa_redis_ids.ids import RedisIds


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "next",
        help="print new IDs",
        description="Print new IDs of NAMESPACE, from the application's generator (--app) or "
        "one with the options the nodes record for NAMESPACE. On a real Redis, a namespace "
        "without a claim on every node is refused unless --new says it is new.",
    )
    parser.add_argument("namespace", metavar="NAMESPACE")
    parser.add_argument("--count", "-n", type=count, default=1, help="how many (default 1)")
    parser.add_argument(
        "--strategy",
        choices=[each.name for each in strategies()],
        default=None,
        help="default: the one the nodes record a claim of, else sequence",
    )
    parser.add_argument(
        "--new",
        action="store_true",
        help="the namespace is new on this Redis: record its claim where none exists",
    )
    add_app_option(parser)
    add_json_option(
        parser,
        "namespace, strategy, config (the options that shape the values, as the nodes record "
        "them), ids (the values in the order issued: numbers, or strings for daily codes)",
    )
    add_generator_options(parser)
    add_redis_options(parser)
    parser.set_defaults(run=run)


def is_embedded(ids: RedisIds) -> bool:
    """Whether every node is the in-process Redis (empty at every start: nothing to protect)."""
    return all(node.name == "embedded" for node in ids.nodes.nodes)


def generator_for(ids: RedisIds, args: argparse.Namespace) -> IdGenerator[Any]:
    """The generator ``next`` takes values from (see the module doc)."""
    if args.app:
        return find_generator(ids, args.namespace, args.strategy)
    generator, _ = generator_from_nodes(ids, args.namespace, args, default="sequence")
    if not args.new and not is_embedded(ids):
        unclaimed = [node.name for node, claim in generator.recorded_claims() if claim is None]
        if unclaimed:
            raise ConfigError(
                f"{', '.join(unclaimed)} records no claim for this namespace: it is new there "
                f"(pass --new to start it with {generator.config!r}) or Redis lost its data "
                "(reseed it first, or use --app so the application's floor applies)",
                namespace=args.namespace,
            )
    return generator


def run(args: argparse.Namespace) -> int:
    refuse_options_with_app(args)
    ids = app_or_redis(args)
    generator = generator_for(ids, args)
    kind = factory_name(generator)
    per_call = call_options(args, kind)
    try:
        values = generator.next_ids(args.count, **per_call)
    except ValueError as exc:
        if not per_call or isinstance(exc, SaRedisIdsError):
            raise
        # A per-call option (--shard) the generator refused: a usage error, like a bad flag.
        flags = ", ".join(o.flag for o in strategy(kind).options if o.keyword in per_call)
        print(f"sa-redis-ids: error: {flags}: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print_json(
            {
                "namespace": generator.namespace,
                "strategy": kind,
                "config": generator.config,
                "ids": values,
            }
        )
        return 0
    for value in values:
        print(value)
    return 0
