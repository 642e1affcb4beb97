"""``sa-redis-ids reseed NS --table T --column C``: raise Redis counters above a table's values.

Run it after Redis lost its data, or when a table that already has rows starts taking its IDs from
Redis. It reads the table (``MAX(column)``; per day for date-keyed strategies; every value for a
ShortId pool) and applies it with the generator's set-if-greater ``ensure_at_least`` (``reserve``
for pools), printing each counter before and after. Counters never move backwards, so it is safe to
run while the application runs, and twice.

The generator must have the application's options: take it from the application with
``--app module:attr`` (looked up by namespace), or give the options here (``--start``, ``--fmt``…).
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from sa_redis_ids.cli.maintain import add_app_option, app_or_redis
from sa_redis_ids.cli.options import DB_URL_ENV, add_redis_options, positive_int
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.maintenance.reseed import ReseedStep, reseed_from_table
from sa_redis_ids.strategies.base import IdGenerator
from sa_redis_ids.strategies.daily_code import DailyCodeGenerator
from sa_redis_ids.strategies.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.strategies.sequence import SequenceGenerator
from sa_redis_ids.strategies.short_id import ShortIdGenerator

#: ``--strategy`` choices: the factory name, its generator class, and how the options build it.
STRATEGIES: dict[str, tuple[type[IdGenerator[Any]], Any]] = {
    "sequence": (
        SequenceGenerator,
        lambda ids, ns, a: ids.sequence(ns, start=a.start or 1, js_safe=a.js_safe),
    ),
    "date_prefixed": (
        DatePrefixedGenerator,
        lambda ids, ns, a: ids.date_prefixed(
            ns,
            fmt=a.fmt,
            length=a.length,
            start=a.start or 1,
            tz=a.tz or "UTC",
            js_safe=a.js_safe,
        ),
    ),
    "daily_code": (
        DailyCodeGenerator,
        lambda ids, ns, a: ids.daily_code(
            ns, prefix=a.code_prefix, digits=a.digits, tz=a.tz or "Asia/Shanghai"
        ),
    ),
    "short_id": (
        ShortIdGenerator,
        lambda ids, ns, a: ids.short_id(ns, pool_size=a.pool_size, offset=a.offset),
    ),
}

PROGRESS_EVERY = 25
"""With more days than this, print one progress line per this many days instead of every day."""


def iso_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-22") from None


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "reseed",
        help="raise Redis counters above a table's current values",
        description="Read the highest values of TABLE.COLUMN (per day for date-keyed strategies, "
        "every value for short_id) and raise NAMESPACE's Redis counters above them with "
        "set-if-greater; counters never move backwards. Prints each counter before and after.",
    )
    parser.add_argument("namespace", metavar="NAMESPACE")
    parser.add_argument("--table", required=True, help="table name (schema.table allowed)")
    parser.add_argument("--column", default="id", help="the column the generator fills (id)")
    parser.add_argument(
        "--strategy",
        choices=sorted(STRATEGIES),
        default=None,
        help="the generator's strategy (default: sequence; with --app: found by namespace)",
    )
    env_url = os.environ.get(DB_URL_ENV)
    parser.add_argument(
        "--db-url",
        default=env_url,
        required=not env_url,
        metavar="URL",
        help=f"SQLAlchemy database URL (default: ${DB_URL_ENV})",
    )
    parser.add_argument(
        "--since", type=iso_day, metavar="YYYY-MM-DD", help="date-keyed: only days from this on"
    )
    add_app_option(parser)
    options = parser.add_argument_group("generator options (without --app; match the app's)")
    options.add_argument("--start", type=int, default=None, help="sequence/date_prefixed start")
    options.add_argument("--js-safe", action="store_true", help="sequence/date_prefixed js_safe")
    options.add_argument("--fmt", default="YYYYMMDD", help="date_prefixed fmt (YYYYMMDD)")
    options.add_argument("--length", type=int, default=19, help="date_prefixed length (19)")
    options.add_argument("--tz", default=None, help="date_prefixed (UTC) / daily_code tz")
    options.add_argument("--code-prefix", default="IS", help="daily_code prefix (IS)")
    options.add_argument("--digits", type=positive_int, default=4, help="daily_code digits (4)")
    options.add_argument("--pool-size", type=positive_int, default=10_000_000, help="short_id")
    options.add_argument("--offset", type=int, default=10_000_000, help="short_id offset")
    add_redis_options(parser)
    parser.set_defaults(run=run)


def find_generator(ids: RedisIds, namespace: str, strategy: str | None) -> IdGenerator[Any]:
    """The application's generator of ``namespace`` (of ``strategy``, when several share it)."""
    found = [g for g in ids.generators if g.namespace == namespace]
    if strategy is not None:
        cls = STRATEGIES[strategy][0]
        found = [g for g in found if isinstance(g, cls)]
    if not found:
        what = f"{strategy} generator" if strategy else "generator"
        raise ConfigError(f"the application has no {what} of this namespace", namespace=namespace)
    if len(found) > 1:
        raise ConfigError(
            "several generators share this namespace; choose one with --strategy",
            namespace=namespace,
        )
    return found[0]


def run(args: argparse.Namespace) -> int:
    ids = app_or_redis(args)
    if args.app:
        generator = find_generator(ids, args.namespace, args.strategy)
    else:
        generator = STRATEGIES[args.strategy or "sequence"][1](ids, args.namespace, args)
    engine = create_engine(args.db_url)
    print(
        f"reseeding {generator.namespace} ({type(generator).__name__}) from "
        f"{engine.url.render_as_string(hide_password=True)} {args.table}.{args.column}",
        flush=True,
    )

    def progress(step: ReseedStep, done: int) -> None:
        if step.day is None or done <= PROGRESS_EVERY:
            print(f"  {step.describe()}", flush=True)
        elif done % PROGRESS_EVERY == 0:
            print(f"  … {done} days done, now at {step.day}", flush=True)

    try:
        report = reseed_from_table(
            generator, engine, args.table, args.column, since=args.since, progress=progress
        )
    except SQLAlchemyError as exc:
        print(f"sa-redis-ids: error: database: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(report.describe(), flush=True)
    return 0
