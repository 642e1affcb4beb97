"""The maintenance run: pre-create upcoming day counters, purge old ones, report ShortId pools.

One `Maintenance.run_once` walks every generator its [`RedisIds`][sa_redis_ids.RedisIds] made:

* **date-keyed** generators ([`DayKeyed`][sa_redis_ids.generators.abilities.DayKeyed]: DatePrefixed,
  DailyCode, any registered strategy with that ability) get the counters of *today* and the ``precreate_days`` days after it created ahead of
  time (with their floor, under the first-of-day lock, where one is configured), so midnight's first
  request is a plain increment. Days older than the ``keep_days`` most recent ones (today counted)
  are deleted with ``purge_before(today − (keep_days − 1))``, which also raises the purge marker so
  a late writer can never re-create them. ``precreate=False`` leaves creation to the generators'
  own first use (where their floor applies) and only purges. *Today* is the generator's own day: Redis ``TIME`` (or the
  injected ``now``) in the generator's time zone.
* **pool** generators ([`Pool`][sa_redis_ids.generators.abilities.Pool]: ShortId) report how
  full they are.

Other generators are walked and left alone: the job asks each one for its abilities by type,
never for its strategy's name.

Several app instances may run the job. A Redlock named ``maintenance`` decides which one does the
work; the winner keeps it for ``lock_ttl`` seconds (a lease, not released after a clean run, and
extended by the holder's next run), so instances whose schedulers fire a little apart still count as
one run, and the others return a summary that says they skipped. A run with errors releases the
lease so another instance may try; so does ``Maintenance.release_lease()``, which a one-off run
calls when it is done. Every step is idempotent: a lapsed lease costs only repeated
work.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Protocol

import redis

from sa_redis_ids.errors import ConfigError, LockHeld, LockNotAcquired, SaRedisIdsError
from sa_redis_ids.forksafe import ForkSafe
from sa_redis_ids.generators.abilities import DayKeyed, Pool
from sa_redis_ids.generators.day_window import local_day
from sa_redis_ids.redis.identity import server_identity
from sa_redis_ids.redis.plans import run_plan
from sa_redis_ids.validation import check_bool, check_seconds, check_share

if TYPE_CHECKING:
    from collections.abc import Sequence

    from apscheduler.job import Job
    from apscheduler.schedulers.base import BaseScheduler

    from sa_redis_ids.generators.base import IdGenerator
    from sa_redis_ids.lock import Redlock
    from sa_redis_ids.redis.nodes import Node, NodeSet

logger = logging.getLogger("sa_redis_ids.maintenance")


class Maintained(Protocol):
    """What the job needs of the instance it maintains (a [`RedisIds`][sa_redis_ids.RedisIds]):
    the generators it made, its nodes and a lock on them."""

    @property
    def generators(self) -> list[IdGenerator[Any]]: ...

    @property
    def nodes(self) -> NodeSet: ...

    def lock(
        self,
        name: str,
        *,
        ttl: float = ...,
        timeout: float = ...,
        nodes: Sequence[Node] | None = ...,
    ) -> Redlock: ...


LOCK_NAME = "maintenance"
LEASE_WAIT = 1.0
"""Seconds a run waits for the maintenance lock before it leaves the work to the holder."""
DEFAULT_LOCK_TTL = 60.0
DEFAULT_FILL_WARNING = 0.8
MAX_PRECREATE_DAYS = 366


@dataclass(frozen=True)
class DayCounterReport:
    """What one run did to one date-keyed generator."""

    namespace: str
    strategy: str
    today: date
    """The generator's current day, in its own time zone."""
    created: list[date]
    """Days whose counter this run created (the others already existed)."""
    purged: list[date]
    """Days whose counter this run deleted."""
    purged_through: date | None
    """The purge marker after the run: no day up to it can ever be issued again."""


@dataclass(frozen=True)
class PoolReport:
    """How full one ShortId pool is."""

    namespace: str
    issued: int
    free: int
    fill_ratio: float


@dataclass(frozen=True)
class MaintenanceError:
    """A step that failed; the run went on with the other generators."""

    namespace: str
    step: str
    """``lock``, ``today``, ``precreate``, ``purge`` or ``stats``."""
    message: str


@dataclass(frozen=True)
class MaintenanceSummary:
    """The outcome of one `Maintenance.run_once`."""

    started_at: datetime
    """UTC time of the run: Redis ``TIME`` (or the injected ``now``)."""
    skipped: bool = False
    """True when another instance holds the maintenance lock, so this one did nothing."""
    reason: str = ""
    counters: list[DayCounterReport] = field(default_factory=list)
    pools: list[PoolReport] = field(default_factory=list)
    errors: list[MaintenanceError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """No step failed (a skipped run is ok: another instance did the work)."""
        return not self.errors

    @property
    def created(self) -> dict[str, list[date]]:
        """Namespace → days created in this run (only namespaces where something was created)."""
        return {r.namespace: r.created for r in self.counters if r.created}

    @property
    def purged(self) -> dict[str, list[date]]:
        """Namespace → days purged in this run (only namespaces where something was purged)."""
        return {r.namespace: r.purged for r in self.counters if r.purged}

    @property
    def fill(self) -> dict[str, float]:
        """ShortId namespace → fill ratio (0.0 – 1.0)."""
        return {p.namespace: p.fill_ratio for p in self.pools}

    def line(self) -> str:
        """The whole summary in one log line."""
        when = self.started_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.skipped:
            text = f"maintenance {when}: skipped ({self.reason})"
            return text + "".join(
                f"; error {e.namespace} {e.step}: {e.message}" for e in self.errors
            )

        def days(mapping: dict[str, list[date]]) -> str:
            return (
                " ".join(
                    f"{ns}[{','.join(d.strftime('%Y%m%d') for d in found)}]"
                    for ns, found in mapping.items()
                )
                or "none"
            )

        pools = " ".join(f"{p.namespace}={p.fill_ratio:.1%}" for p in self.pools) or "none"
        parts = [
            f"maintenance {when}: {len(self.counters)} date-keyed, {len(self.pools)} pools",
            f"created {days(self.created)}",
            f"purged {days(self.purged)}",
            f"fill {pools}",
            f"{len(self.errors)} errors",
        ]
        parts.extend(f"error {e.namespace} {e.step}: {e.message}" for e in self.errors)
        return "; ".join(parts)

    def __str__(self) -> str:
        return self.line()


def strategy_name(generator: object) -> str:
    """A readable strategy name for reports: ``DatePrefixed``, ``DailyCode``, ``ShortId``…"""
    return type(generator).__name__.removesuffix("Generator")


class Maintenance(ForkSafe):
    """The maintenance job of one [`RedisIds`][sa_redis_ids.RedisIds] (``ids.maintenance()``).

    ``keep_days``: how many most recent days keep their counters, today included (at least 2, so
    yesterday survives the midnight run). ``precreate_days``: how many days after today are created
    ahead (0: only today). ``lock_ttl``: seconds the winning instance holds the maintenance lock.
    ``fill_warning``: a pool at least this full is logged as a warning. ``precreate=False`` only
    purges and reports: for generators whose ``floor=`` is unknown (rebuilt from the node claims by
    the command line), which must not create a day's counter below what the database holds.
    """

    def __init__(
        self,
        ids: Maintained,
        *,
        keep_days: int = 7,
        precreate_days: int = 2,
        lock_ttl: float = DEFAULT_LOCK_TTL,
        fill_warning: float = DEFAULT_FILL_WARNING,
        precreate: bool = True,
    ):
        if isinstance(keep_days, bool) or not isinstance(keep_days, int) or keep_days < 2:
            raise ConfigError(
                f"keep_days={keep_days!r} must be an int of at least 2: purging yesterday at "
                "midnight would cut off writers that are still finishing it"
            )
        if (
            isinstance(precreate_days, bool)
            or not isinstance(precreate_days, int)
            or not 0 <= precreate_days <= MAX_PRECREATE_DAYS
        ):
            raise ConfigError(
                f"precreate_days={precreate_days!r} must be an int from 0 to {MAX_PRECREATE_DAYS}"
            )
        lock_ttl = check_seconds("lock_ttl", lock_ttl)
        fill_warning = check_share("fill_warning", fill_warning, low=0.0, high=1.0, low_open=True)
        precreate = check_bool("precreate", precreate)
        self.ids = ids
        self.keep_days = keep_days
        self.precreate_days = precreate_days
        self.lock_ttl = float(lock_ttl)
        self.fill_warning = float(fill_warning)
        self.precreate = bool(precreate)
        self.last_summary: MaintenanceSummary | None = None
        """The summary of the most recent run (of this object)."""
        self._scheduler: BaseScheduler | None = None
        self._owns_scheduler = False
        self._job: Job | None = None
        self._run_lock = threading.Lock()
        self._lease: Any = None
        self.watch_forks()

    def after_fork_in_child(self) -> None:
        """A forked child runs none of its parent's maintenance: the scheduler (its threads are
        the parent's) and the lease (the parent's to extend or release) are forgotten, the run
        lock renewed (a run of the parent may have held it). ``start()`` starts the child's own."""
        self._run_lock = threading.Lock()
        self._scheduler, self._job, self._owns_scheduler, self._lease = None, None, False, None

    # -- one run ---------------------------------------------------------------------------------

    def run_once(self, now: datetime | None = None) -> MaintenanceSummary:
        """Do one maintenance pass (or skip it if another instance holds the lock).

        ``now`` (a timezone-aware datetime) replaces Redis ``TIME`` for deciding which day is today;
        without it each generator's day comes from Redis (plus the generator's test clock offset).
        Per-generator failures are logged and listed in ``errors``; the other generators are still
        maintained. Returns the summary (also kept as ``last_summary``) and logs it in one line.
        """
        if now is not None and (now.tzinfo is None or now.utcoffset() is None):
            raise ValueError("run_once(now=...) needs a timezone-aware datetime")
        with self._run_lock:
            summary = self._run(now)
        self.last_summary = summary
        if summary.errors:
            logger.error("%s", summary.line())
        else:
            logger.info("%s", summary.line())
        for pool in summary.pools:
            if pool.fill_ratio >= self.fill_warning:
                logger.warning(
                    "ShortId pool %s is %.1f%% full (%d free): widen pool_size before it runs out",
                    pool.namespace,
                    pool.fill_ratio * 100,
                    pool.free,
                )
        return summary

    def _run(self, now: datetime | None) -> MaintenanceSummary:
        redis_ms: int | None = None
        if now is None:
            try:
                redis_ms = self._redis_time_ms()
            except SaRedisIdsError as exc:
                return MaintenanceSummary(
                    started_at=datetime.now(timezone.utc),
                    skipped=True,
                    reason="Redis unavailable",
                    errors=[MaintenanceError("*", "today", str(exc))],
                )
            started = datetime.fromtimestamp(redis_ms / 1000, tz=timezone.utc)
        else:
            started = now.astimezone(timezone.utc)

        try:
            lock = self._take_lease()
        except LockNotAcquired as exc:
            if exc.errors and all(isinstance(e, LockHeld) for e in exc.errors.values()):
                return MaintenanceSummary(
                    started_at=started,
                    skipped=True,
                    reason="another instance holds the maintenance lock",
                )
            return MaintenanceSummary(
                started_at=started,
                skipped=True,
                reason="maintenance lock unavailable",
                errors=[MaintenanceError("*", "lock", str(exc))],
            )
        except SaRedisIdsError as exc:
            return MaintenanceSummary(
                started_at=started,
                skipped=True,
                reason="maintenance lock unavailable",
                errors=[MaintenanceError("*", "lock", str(exc))],
            )

        counters: list[DayCounterReport] = []
        pools: list[PoolReport] = []
        errors: list[MaintenanceError] = []
        for generator in self.ids.generators:
            if isinstance(generator, DayKeyed):
                report = self._maintain_days(generator, now, redis_ms, errors)
                if report is not None:
                    counters.append(report)
            if isinstance(generator, Pool):
                pool = self._pool_report(generator, errors)
                if pool is not None:
                    pools.append(pool)
        if errors:
            # Let another instance (or the next run) try again at once instead of after the lease.
            self._lease = None
            self._release(lock)
        return MaintenanceSummary(started_at=started, counters=counters, pools=pools, errors=errors)

    def _maintain_days(
        self,
        generator: IdGenerator[Any],
        now: datetime | None,
        redis_ms: int | None,
        errors: list[MaintenanceError],
    ) -> DayCounterReport | None:
        ns = generator.namespace
        assert isinstance(generator, DayKeyed)
        gen: DayKeyed = generator
        try:
            today = self.today_of(generator, now=now, redis_ms=redis_ms)
        except Exception as exc:
            logger.exception("maintenance: cannot tell today's day for %s", ns)
            errors.append(MaintenanceError(ns, "today", str(exc)))
            return None
        created: list[date] = []
        for ahead in range(self.precreate_days + 1 if self.precreate else 0):
            day = today + timedelta(days=ahead)
            try:
                if gen.precreate(day):
                    created.append(day)
            except Exception as exc:
                logger.exception("maintenance: precreating %s of %s failed", day, ns)
                errors.append(MaintenanceError(ns, "precreate", f"{day}: {exc}"))
        purged: list[date] = []
        try:
            purged = list(gen.purge_before(self.purge_cutoff(today)))
        except Exception as exc:
            logger.exception("maintenance: purging %s failed", ns)
            errors.append(MaintenanceError(ns, "purge", str(exc)))
        try:
            marker: date | None = gen.purged_through()
        except Exception as exc:
            errors.append(MaintenanceError(ns, "purge", f"reading the purge marker: {exc}"))
            marker = None
        return DayCounterReport(
            namespace=ns,
            strategy=strategy_name(generator),
            today=today,
            created=created,
            purged=sorted(purged),
            purged_through=marker,
        )

    def _pool_report(
        self, generator: IdGenerator[Any], errors: list[MaintenanceError]
    ) -> PoolReport | None:
        assert isinstance(generator, Pool)
        try:
            stats = generator.stats()
        except Exception as exc:
            logger.exception("maintenance: reading the pool of %s failed", generator.namespace)
            errors.append(MaintenanceError(generator.namespace, "stats", str(exc)))
            return None
        return PoolReport(
            namespace=generator.namespace,
            issued=int(stats.issued),
            free=int(stats.free),
            fill_ratio=float(stats.fill_ratio),
        )

    def purge_cutoff(self, today: date) -> date:
        """The oldest day kept: days strictly before it are purged (``today − (keep_days − 1)``)."""
        return today - timedelta(days=self.keep_days - 1)

    def today_of(
        self,
        generator: IdGenerator[Any],
        *,
        now: datetime | None = None,
        redis_ms: int | None = None,
    ) -> date:
        """The generator's current day in its time zone, from ``now`` or from Redis ``TIME``.

        The Redis reading follows the generator's Redis clock, so a test that moved it
        (``sa_redis_ids.testing.shift_time``) moves its maintenance day too.
        """
        if not isinstance(generator, DayKeyed):
            raise ConfigError(
                f"a {generator.strategy} generator is not date-keyed: it has no day of its own",
                namespace=generator.namespace,
            )
        clock = generator.clock
        if now is not None:
            return now.astimezone(clock.tz).date()
        ms = self._redis_time_ms() if redis_ms is None else redis_ms
        return local_day(ms + generator.redis_clock.shift_ms, clock.tz)

    def _redis_time_ms(self) -> int:
        def action(node: Node) -> int:
            seconds, micros = node.client.time()
            return int(seconds) * 1000 + int(micros) // 1000

        return self.ids.nodes.call(LOCK_NAME, action)

    def _take_lease(self) -> Any:
        """The maintenance lock for ``lock_ttl`` seconds: the lease this object still holds,
        extended, or a new one (``LockNotAcquired`` when another instance holds it)."""
        if self._lease is not None:
            try:
                self._lease.extend(self.lock_ttl)
                return self._lease
            except SaRedisIdsError:
                self._lease = None  # lapsed or taken over: compete for it like everyone else
        # A short wait, not a single attempt: instances that start together can split the nodes
        # between them so that none has a majority; Redlock's retry with a random delay settles it.
        lock = self.ids.lock(
            LOCK_NAME, ttl=self.lock_ttl, timeout=LEASE_WAIT, nodes=self._lease_nodes()
        )
        lock.acquire()
        self._lease = lock
        return lock

    def _lease_nodes(self) -> list[Node]:
        """The nodes the maintenance lock is taken on: the first node of each Redis server.

        Databases of one server listed as nodes (``/0`` and ``/1``) issue disjoint values, but
        they share that server's fate: a Redlock over both would count one server twice, and is
        refused. A lock on one of them is what that server can give. Every instance lists the
        nodes in the same order, so all choose the same ones. A node whose server cannot be
        identified now (down) is kept: the lock then needs it too, as it would anyway."""
        chosen: list[Node] = []
        seen: set[str] = set()
        for node in self.ids.nodes.nodes:
            try:
                identity = run_plan(server_identity(node))
            except (redis.RedisError, OSError):
                chosen.append(node)
                continue
            if identity not in seen:
                seen.add(identity)
                chosen.append(node)
        return chosen

    def release_lease(self) -> None:
        """Give up the maintenance lock this object holds, if any, so that the next run of any
        instance does the work at once instead of skipping until the lease lapses. A one-off run
        (``sa-redis-ids maintain --once``) calls it when done; a scheduled job keeps its lease."""
        with self._run_lock:
            lease, self._lease = self._lease, None
        if lease is not None:
            self._release(lease)

    @staticmethod
    def _release(lock: Any) -> None:
        try:
            lock.release()
        except SaRedisIdsError:
            logger.warning("maintenance: releasing the lock failed; it lapses by itself")

    # -- scheduling ------------------------------------------------------------------------------

    def time_zones(self) -> list[str]:
        """The IANA names of the date-keyed generators' time zones (``["UTC"]`` if there are none)."""
        names = {g.clock.tz_name for g in self.ids.generators if isinstance(g, DayKeyed)}
        return sorted(names) or ["UTC"]

    def trigger(self) -> Any:
        """The default trigger: see `sa_redis_ids.maintenance.scheduling.default_trigger`."""
        from sa_redis_ids.maintenance.scheduling import default_trigger

        return default_trigger(self.time_zones())

    def schedule(
        self, scheduler: BaseScheduler, *, trigger: Any = None, run_now: bool = False
    ) -> Job:
        """Add the job to an application's APScheduler 3 scheduler and return the ``Job``.

        Default trigger: hourly, plus shortly before midnight in each date-keyed generator's time
        zone (taken now: schedule after creating the generators). ``coalesce=True``, one instance
        at a time, and a misfire grace time of an hour. ``run_now=True`` also runs it at once.
        """
        from sa_redis_ids.maintenance.scheduling import add_job

        job = add_job(scheduler, self._job_main, trigger or self.trigger(), run_now=run_now)
        self._scheduler = scheduler
        self._job = job
        return job

    def start(self, *, run_now: bool = True) -> BaseScheduler:
        """The embedded default: a daemon ``BackgroundScheduler`` running the job; returned started.

        ``run_now`` (default True) runs the job at once as well, so today's counters exist right
        after the application starts.
        """
        from sa_redis_ids.maintenance.scheduling import background_scheduler

        if self._owns_scheduler and self._scheduler is not None and self._scheduler.running:
            return self._scheduler
        scheduler = background_scheduler()
        self.schedule(scheduler, run_now=run_now)
        self._owns_scheduler = True
        scheduler.start()
        return scheduler

    def shutdown(self, *, wait: bool = True) -> None:
        """Stop the scheduler ``start()`` made (waiting for a running job), or remove the job from
        an application's scheduler that ``schedule()`` was given (never shutting that one down)."""
        scheduler, job = self._scheduler, self._job
        self._scheduler, self._job = None, None
        if scheduler is None:
            return
        if self._owns_scheduler:
            self._owns_scheduler = False
            if scheduler.running:
                scheduler.shutdown(wait=wait)
        elif job is not None:
            from apscheduler.jobstores.base import JobLookupError

            with contextlib.suppress(JobLookupError):  # already removed by the application
                job.remove()

    def _job_main(self) -> MaintenanceSummary:
        return self.run_once()

    def __repr__(self) -> str:
        return (
            f"Maintenance(keep_days={self.keep_days}, precreate_days={self.precreate_days}, "
            f"lock_ttl={self.lock_ttl}, precreate={self.precreate})"
        )
