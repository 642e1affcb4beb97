"""``sa-redis-ids maintain``: run the maintenance job once (``--once``) or on its schedule.

Which generators does a command line process know? Two ways to tell it:

* ``--app module:attribute`` (recommended): import the application's module that makes its
  ``RedisIds`` and generators (with their real options and ``floor=``) and maintain every one of
  them: pre-create the coming days' counters, purge old days, report pools. ``attribute`` may also
  be a function returning it. The current directory is on the import path, as for ``python -m``.
* ``--date-prefixed NS`` / ``--daily-code NS`` / ``--short-id NS`` (repeatable; one such flag for
  every registered strategy that is date-keyed or a pool and readable from its claims) on
  ``--redis-url``: each generator is rebuilt from the claim its namespace records on the nodes
  (the application's options; nodes that disagree are an error, a namespace without a claim has
  nothing to maintain). A claim does not say what ``floor=`` the application uses, so these
  **only purge and report**: they never create a day's counter, which after a data loss would
  restart the day below what the database holds. Creating counters ahead needs ``--app``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any, TextIO

from sa_redis_ids.cli.options import (
    add_embedded_option,
    add_redis_options,
    non_negative_int,
    redis_ids_from,
    refuse_embedded,
)
from sa_redis_ids.cli.output import add_json_option, plain, print_json
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.abilities import DayKeyed, Pool
from sa_redis_ids.generators.registry import strategies
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.maintenance.claims import generator_from_claims
from sa_redis_ids.maintenance.job import Maintenance, MaintenanceSummary


def namespace_flags() -> list[tuple[str, str]]:
    """The namespace options, ``(flag, strategy)``: one per registered strategy that maintenance
    has work for (date-keyed, or a pool) and that can be rebuilt from its node claims."""
    return [
        ("--" + each.name.replace("_", "-"), each.name)
        for each in strategies()
        if each.from_claims and (each.has(DayKeyed) or each.has(Pool))
    ]


def _flag_list() -> str:
    return "/".join(flag for flag, _ in namespace_flags())


DEFAULT_PRECREATE_DAYS = 2
NO_PRECREATE_NOTE = (
    "day counters are not created: generators rebuilt from the node claims have no floor; "
    "run with --app to create them ahead"
)


def add_app_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="the application's RedisIds (or a function returning it), e.g. myapp.ids:ids; "
        "its generators are used with their own options and Redis (no --redis-url then)",
    )


def load_app(spec: str) -> RedisIds:
    """Import ``module:attribute`` and return the ``RedisIds`` it names (calling it if needed)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError(f"--app {spec!r} must look like 'package.module:attribute'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--app: cannot import {module_name!r}: {exc}") from exc
    found: Any = module
    for part in attribute.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise ConfigError(f"--app: {module_name!r} has no attribute {attribute!r}")
    if not isinstance(found, RedisIds) and callable(found):
        try:
            found = found()
        except Exception as exc:  # the user's factory: say which one failed, in one line
            raise ConfigError(
                f"--app {spec!r}: calling {attribute}() failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(found, RedisIds):
        raise ConfigError(f"--app {spec!r} is a {type(found).__name__}, not a RedisIds")
    return found


def app_or_redis(args: argparse.Namespace) -> RedisIds:
    """The ``RedisIds`` of ``--app``, else the one the Redis options name."""
    if args.app:
        if args.redis_url:
            raise ConfigError("--app brings its own Redis; leave out --redis-url")
        return load_app(args.app)
    return redis_ids_from(args)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "maintain",
        help="pre-create and purge date-keyed counters, report ShortId pools",
        description="Run the maintenance job. With --app: create today's and the next days' "
        "counters (with the application's floors), purge days older than --keep-days, report "
        f"how full ShortId pools are. With {_flag_list()} NS instead: "
        "the generators are rebuilt from the claims the nodes record, and only purge and report "
        "(without the application's floor no day counter is created). Without --once it runs in "
        "the foreground on its schedule (hourly and 23:50 in each generator's time zone) until "
        "interrupted. It refuses the embedded in-process Redis (no --redis-url) unless --embedded "
        "is given: that Redis is empty at every start, so maintaining it changes nothing. With "
        "--app and --embedded the application's generators run on an embedded Redis, never on "
        "the application's own.",
    )
    parser.add_argument("--once", action="store_true", help="run once, print the summary, exit")
    parser.add_argument(
        "--keep-days",
        type=non_negative_int,
        default=7,
        metavar="N",
        help="keep the N most recent days, today included (at least 2; default 7)",
    )
    parser.add_argument(
        "--precreate-days",
        type=non_negative_int,
        default=None,
        metavar="N",
        help=f"with --app: create the counters of the N days after today too "
        f"(default {DEFAULT_PRECREATE_DAYS})",
    )
    add_app_option(parser)
    add_embedded_option(parser)
    add_json_option(parser, JSON_KEYS)
    for flag, what in namespace_flags():
        parser.add_argument(
            flag,
            action="append",
            default=[],
            metavar="NS",
            help=f"without --app: purge/report the {what} namespace NS, with the options its "
            "node claims record (repeatable)",
        )
    add_redis_options(parser)
    parser.set_defaults(run=run)


JSON_KEYS = (
    "started_at (UTC, ISO 8601), ok, skipped, reason, precreate (whether day counters may be "
    "created), counters [{namespace, strategy, today, created [days], purged [days], "
    "purged_through}], pools [{namespace, issued, free, fill_ratio}], errors [{namespace, step, "
    "message}]; without --once one such document per line, one per run"
)


def build(args: argparse.Namespace) -> Maintenance:
    """The ``Maintenance`` the options describe, with its generators made."""
    named = [
        (kind, ns)
        for flag, kind in namespace_flags()
        for ns in getattr(args, flag[2:].replace("-", "_"), None) or []
    ]
    if args.app:
        if named:
            raise ConfigError(
                f"--app maintains every generator of the application; leave out {_flag_list()}"
            )
        ids = app_or_redis(args)
        refuse_embedded(args, ids, "maintain")
        if not ids.generators:
            raise ConfigError(f"no generators to maintain: --app {args.app} has made none")
        precreate_days = (
            DEFAULT_PRECREATE_DAYS if args.precreate_days is None else args.precreate_days
        )
        return ids.maintenance(keep_days=args.keep_days, precreate_days=precreate_days)
    if not named:
        raise ConfigError(
            "no generators to maintain: name the application with --app MODULE:ATTR or "
            f"namespaces with {_flag_list()}"
        )
    if args.precreate_days is not None:
        raise ConfigError(
            "--precreate-days needs --app: without the application's floor no day counter is "
            "created"
        )
    ids = redis_ids_from(args)
    maintenance = ids.maintenance(keep_days=args.keep_days, precreate=False)
    refuse_embedded(args, ids, "maintain")  # after the options' checks: those come first
    for kind, namespace in named:
        if generator_from_claims(ids, namespace, kind) is None:
            raise ConfigError(
                f"nothing to maintain for {namespace}: no node records a {kind} claim for it "
                "(the application has not used it here, or Redis lost its data)",
                namespace=namespace,
            )
    return maintenance  # it walks the generators made since


def describe(summary: MaintenanceSummary) -> str:
    """The summary as a few readable lines."""
    when = summary.started_at.strftime("%Y-%m-%d %H:%M:%S UTC")
    if summary.skipped:
        lines = [f"maintenance at {when}: skipped ({summary.reason})"]
    else:
        lines = [f"maintenance at {when}"]
        for r in summary.counters:
            created = ", ".join(map(str, r.created)) or "none"
            purged = ", ".join(map(str, r.purged)) or "none"
            lines.append(
                f"  {r.namespace} ({r.strategy}, today {r.today}): created {created}; "
                f"purged {purged}; purged through {r.purged_through or 'nothing'}"
            )
        for p in summary.pools:
            lines.append(
                f"  {p.namespace} (pool): {p.issued} issued, {p.free} free, {p.fill_ratio:.2%} full"
            )
    lines.extend(f"  error: {e.namespace} {e.step}: {e.message}" for e in summary.errors)
    return "\n".join(lines)


def as_record(summary: MaintenanceSummary, *, precreate: bool) -> dict[str, Any]:
    """The summary as the ``--json`` document (see `JSON_KEYS`)."""
    return {
        "started_at": plain(summary.started_at),
        "ok": summary.ok,
        "skipped": summary.skipped,
        "reason": summary.reason,
        "precreate": precreate,
        "counters": plain(summary.counters),
        "pools": plain(summary.pools),
        "errors": plain(summary.errors),
    }


def run(args: argparse.Namespace) -> int:
    maintenance = build(args)
    assert isinstance(maintenance.ids, RedisIds)
    with on_embedded_redis(args, maintenance.ids):
        return run_built(args, maintenance)


def on_embedded_redis(args: argparse.Namespace, ids: RedisIds) -> AbstractContextManager[Any]:
    """With ``--app`` and ``--embedded``: run the application's generators, rebuilt with their own
    options, on a new embedded Redis for the block (``RedisIds.use``), so the application's Redis
    is never written; otherwise nothing changes."""
    if not (args.app and args.embedded):
        return contextlib.nullcontext()
    if all(node.name == "embedded" for node in ids.nodes.nodes):
        return contextlib.nullcontext()  # the application's Redis is the embedded one already
    return ids.use(RedisIds.embedded(prefix=ids.prefix))


def run_built(args: argparse.Namespace, maintenance: Maintenance) -> int:
    """Run ``maintenance`` once (``--once``, giving up its lease at the end) or on its schedule."""
    as_json = bool(getattr(args, "json", False))
    if not maintenance.precreate:
        print(f"note: {NO_PRECREATE_NOTE}", file=sys.stderr if as_json else sys.stdout, flush=True)

    def report(summary: MaintenanceSummary) -> None:
        if as_json:
            print_json(as_record(summary, precreate=maintenance.precreate))
        else:
            print(describe(summary), flush=True)

    if args.once:
        try:
            summary = maintenance.run_once()
        finally:
            maintenance.release_lease()  # a later run is not this one: it must not be skipped
        report(summary)
        return 0 if summary.ok else 1
    return run_forever(maintenance, report, announce=sys.stderr if as_json else sys.stdout)


def run_forever(
    maintenance: Maintenance,
    report: Callable[[MaintenanceSummary], None] | None = None,
    *,
    announce: TextIO | None = None,
) -> int:
    """A foreground ``BlockingScheduler`` with the job (run at once, then on schedule)."""
    from sa_redis_ids.maintenance.scheduling import blocking_scheduler

    scheduler = blocking_scheduler()

    def job() -> None:
        summary = maintenance.run_once()
        if report is None:
            print(describe(summary), flush=True)
        else:
            report(summary)

    from sa_redis_ids.maintenance.scheduling import add_job

    add_job(scheduler, job, maintenance.trigger(), run_now=True)
    zones = ", ".join(maintenance.time_zones())
    print(
        f"maintenance scheduled: hourly and at 23:50 in {zones}; Ctrl-C stops",
        file=announce or sys.stdout,
        flush=True,
    )
    with _stopped_by_sigterm():
        try:
            scheduler.start()
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            if scheduler.running:
                scheduler.shutdown(wait=True)
            maintenance.release_lease()
    return 0


@contextlib.contextmanager
def _stopped_by_sigterm() -> Iterator[None]:
    """While the foreground scheduler runs, SIGTERM (what systemd, Docker and Kubernetes send to
    stop a service) ends it as Ctrl-C does: the running job finishes and the lease is released,
    so another instance can take over at once instead of after ``lock_ttl``. Python's default
    would end the process on the spot, lease held. Only the main thread can set a handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        # Once: a second SIGTERM while the job finishes must not cut the lease's release short.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(0)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
