"""``sa-redis-ids reseed NS --table T --column C``: raise Redis counters above a table's values.

Run it after Redis lost its data, or when a table that already has rows starts taking its IDs from
Redis. It reads the table (``MAX(column)``; per day for date-keyed strategies; every value for a
ShortId pool) and applies it with the generator's set-if-greater ``ensure_at_least`` (``reserve``
for pools), printing each counter before and after. Counters never move backwards, so it is safe to
run while the application runs, and twice.

A counter means something only with the options that made it (``start``, ``fmt``, ``length``,
``digits``, ``pool_size``…), so the generator is never guessed:

* ``--app module:attr`` takes it from the application (found by namespace; ``--strategy`` picks
  one when several share it);
* otherwise it is rebuilt from the claim the nodes record for the namespace; an option given here
  (``--start``, ``--fmt``…) must equal the recorded one, else nothing is written;
* when no node records a claim (Redis lost everything), ``--strategy`` and the application's
  options are required; the reseed then records that claim together with the counters, so an
  application with other options is refused by the nodes instead of misreading them.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.exc import SQLAlchemyError

from sa_redis_ids.cli.generators import (
    add_generator_options,
    claims_not_rebuilt,
    factory_name,
    find_generator,
    generator_from_nodes,
    refuse_options_with_app,
)
from sa_redis_ids.cli.maintain import add_app_option, app_or_redis, on_embedded_redis
from sa_redis_ids.cli.options import (
    DB_URL_ENV,
    add_embedded_option,
    add_redis_options,
    refuse_embedded,
)
from sa_redis_ids.cli.output import Progress, add_json_option, plain, print_json
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.abilities import Pool, Reseedable
from sa_redis_ids.generators.registry import Strategy, strategies
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.maintenance.reseed import ReseedReport, ReseedStep, reseed_from_table

PROGRESS_EVERY = 25
"""With more days than this, the days after the first this many are shown as progress on stderr
(a bar on a terminal, else a line per this many days) instead of a line each."""

JSON_KEYS = (
    "namespace, strategy, generator (class), config, table, column, database (password hidden), "
    "recorded_claim (whether the reseed recorded the claim), kind (counter, days or pool), rows, "
    "skipped, reserved, newly_taken, note, steps [{day, table_max, skipped, nodes [{node, before, "
    "after, raised}]}], ok"
)


def iso_day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a date like 2026-11-22") from None


def reseedable() -> list[Strategy]:
    """The registered strategies whose counters can be raised, or whose pools marked taken."""
    return [each for each in strategies() if each.has(Reseedable) or each.has(Pool)]


def register(sub: Any) -> None:
    among = reseedable()
    parser = sub.add_parser(
        "reseed",
        help="raise Redis counters above a table's current values",
        description="Read the highest values of TABLE.COLUMN (per day for date-keyed strategies, "
        "every value for short_id) and raise NAMESPACE's Redis counters above them with "
        "set-if-greater; counters never move backwards. Prints each counter before and after. "
        "The generator comes from --app, else from the claim the nodes record for NAMESPACE "
        "(options given must match it); with no claim on any node, give --strategy and the "
        "application's options, which the reseed records with the counters. It refuses the "
        "embedded in-process Redis (no --redis-url) unless --embedded is given. On a terminal a "
        "progress bar on stderr shows long walks (many days, many pool values).",
    )
    parser.add_argument("namespace", metavar="NAMESPACE")
    parser.add_argument("--table", required=True, help="table name (schema.table allowed)")
    parser.add_argument("--column", default="id", help="the column the generator fills (id)")
    parser.add_argument(
        "--strategy",
        choices=[each.name for each in among],
        default=None,
        help="the generator's strategy (default: the one the nodes record a claim of; "
        "with --app: found by namespace)",
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
    add_embedded_option(parser)
    add_json_option(parser, JSON_KEYS)
    add_generator_options(parser, among, per_call=False)
    add_redis_options(parser)
    parser.set_defaults(run=run)


def _record(report: ReseedReport, generator: Any, database: str, claimed: bool) -> dict[str, Any]:
    return {
        "namespace": report.namespace,
        "strategy": factory_name(generator),
        "generator": type(generator).__name__,
        "config": generator.config,
        "table": report.table,
        "column": report.column,
        "database": database,
        "recorded_claim": not claimed,
        "kind": report.kind,
        "rows": report.rows,
        "skipped": report.skipped,
        "reserved": report.reserved,
        "newly_taken": report.newly_taken,
        "note": report.note,
        "steps": [
            {
                "day": plain(step.day),
                "table_max": step.table_max,
                "skipped": step.skipped,
                "nodes": [
                    {
                        "node": change.node,
                        "before": change.before,
                        "after": change.after,
                        "raised": change.raised,
                    }
                    for change in step.nodes
                ],
            }
            for step in report.steps
        ],
        "ok": not report.empty_handed,
    }


class _Bars:
    """The progress of a long walk on stderr, one `Progress` per unit (days, values), each
    made at its first step with its total: a bar on a terminal, else a plain line every
    `PROGRESS_EVERY` steps; none for a unit that never advances."""

    def __init__(self, description: str, *, quiet: bool):
        self.description = description
        self.quiet = quiet
        self.shown: dict[str, Progress] = {}

    def advance(self, unit: str, done: int, total: int, *, start: int = 0, note: str = "") -> None:
        """``done`` of ``total`` (the first ``start`` were shown another way)."""
        shown = self.shown.get(unit)
        if shown is None:
            shown = self.shown[unit] = Progress(
                total,
                self.description,
                unit=unit,
                every=PROGRESS_EVERY,
                quiet=self.quiet,
                start=start,
            )
        shown.set_total(total)
        shown.update(done - shown.done, note)

    def __enter__(self) -> _Bars:
        return self

    def __exit__(self, *exc: object) -> None:
        for shown in self.shown.values():
            shown.close()


def _refuse_unreseedable(ids: RedisIds, namespace: str) -> None:
    """Refuse a namespace whose nodes record only claims of strategies reseed cannot raise
    (a snowflake's IDs come from Redis time, not from a counter)."""
    names = {each.name for each in reseedable()}
    recorded = claims_not_rebuilt(ids, namespace)
    if recorded and not names.intersection(recorded):
        described = ", ".join(f"a {kind} claim ({config!r})" for kind, config in recorded.items())
        raise ConfigError(
            f"the nodes record {described} for this namespace: its generator has no counter to "
            "raise and no pool to fill, so there is nothing to reseed",
            namespace=namespace,
        )


def run(args: argparse.Namespace) -> int:
    refuse_options_with_app(args)
    ids = app_or_redis(args)
    refuse_embedded(args, ids, "reseed")
    with on_embedded_redis(args, ids):
        return reseed_with(args, ids)


def reseed_with(args: argparse.Namespace, ids: RedisIds) -> int:
    """Reseed the generator the options name on ``ids``, with progress and the report."""
    claimed = True
    if args.app:
        generator = find_generator(ids, args.namespace, args.strategy)
    else:
        if args.strategy is None:
            _refuse_unreseedable(ids, args.namespace)
        generator, claimed = generator_from_nodes(ids, args.namespace, args)
    engine = create_engine(args.db_url)
    database = engine.url.render_as_string(hide_password=True)
    as_json = bool(args.json)

    def say(text: str) -> None:
        if not as_json:
            print(text, flush=True)

    say(
        f"reseeding {generator.namespace} ({type(generator).__name__}) from "
        f"{database} {args.table}.{args.column}"
    )
    if not claimed:
        say(
            f"  no node records a claim for {generator.namespace}: recording "
            f"{generator.config!r} with the counters"
        )
    bars = _Bars(f"reseed {generator.namespace}", quiet=as_json)

    walked: list[date] = []

    def progress(step: ReseedStep, done: int) -> None:
        if step.day is None or done <= PROGRESS_EVERY:
            say(f"  {step.describe()}")
        else:
            walked[:] = [step.day]

    def days_progress(done: int, total: int) -> None:
        if walked:  # after the first days, printed line by line
            note = f"now at {walked[0]}"
            bars.advance("days", done, total, start=done - 1, note=note)

    def rows_progress(done: int, total: int) -> None:
        bars.advance("values", done, total)

    try:
        with bars:
            report = reseed_from_table(
                generator,
                engine,
                args.table,
                args.column,
                since=args.since,
                progress=progress,
                rows_progress=rows_progress,
                days_progress=days_progress,
            )
    except SQLAlchemyError as exc:
        print(f"sa-redis-ids: error: database: {exc}".splitlines()[0], file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    if as_json:
        print_json(_record(report, generator, database, claimed))
    else:
        print(report.describe(), flush=True)
    if report.empty_handed:
        print(
            f"sa-redis-ids: error: {args.table}.{args.column} holds {report.rows} values but none "
            "is a value of this generator: nothing was reseeded (check --table, --column and the "
            "generator's options)",
            file=sys.stderr,
        )
        return 1
    return 0
