"""APScheduler 3 glue: the default trigger, adding the job, the embedded background scheduler.

APScheduler is an optional extra (``pip install 'sa_redis_ids[scheduler]'``); it is imported only
when scheduling, so ``run_once`` works without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.day_window import zone

JOB_ID = "sa_redis_ids.maintenance"
HOURLY_MINUTE = 0
"""The default trigger fires at this minute of every hour (UTC) …"""
BEFORE_MIDNIGHT = (23, 50)
"""… and at this local time in every generator's time zone, to create tomorrow ahead of midnight."""
MISFIRE_GRACE_TIME = 3600
"""Seconds a run may start late (scheduler busy or paused) and still run; late runs coalesce."""


def _apscheduler() -> Any:
    try:
        import apscheduler
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "scheduling maintenance needs APScheduler 3: pip install 'sa_redis_ids[scheduler]'"
        ) from exc
    return apscheduler


def default_trigger(time_zones: Sequence[str]) -> Any:
    """Hourly at minute 0 (UTC), plus 23:50 local in each of ``time_zones``.

    The hourly run keeps today's counters and the purge current; the 23:50 runs make sure the
    next day exists before midnight in every zone a generator counts days in.
    """
    _apscheduler()
    from apscheduler.triggers.combining import OrTrigger
    from apscheduler.triggers.cron import CronTrigger

    hour, minute = BEFORE_MIDNIGHT
    triggers = [CronTrigger(minute=HOURLY_MINUTE, timezone=timezone.utc)]
    triggers.extend(
        CronTrigger(hour=hour, minute=minute, timezone=zone(name)) for name in sorted(time_zones)
    )
    return OrTrigger(triggers)


def add_job(scheduler: Any, func: Callable[[], Any], trigger: Any, *, run_now: bool = False) -> Any:
    """Add (or replace) the maintenance job on ``scheduler``: coalesced, one instance at a time."""
    _apscheduler()
    options: dict[str, Any] = {}
    if run_now:
        options["next_run_time"] = datetime.now(timezone.utc)
    return scheduler.add_job(
        func,
        trigger,
        id=JOB_ID,
        name="sa_redis_ids maintenance",
        coalesce=True,
        max_instances=1,
        misfire_grace_time=MISFIRE_GRACE_TIME,
        replace_existing=True,
        **options,
    )


def background_scheduler() -> Any:
    """A new ``BackgroundScheduler`` in UTC (not started): its thread and each run's are daemon
    threads (`sa_redis_ids.maintenance.executor`)."""
    _apscheduler()
    from apscheduler.schedulers.background import BackgroundScheduler

    from sa_redis_ids.maintenance.executor import DaemonThreadExecutor

    return BackgroundScheduler(
        daemon=True, timezone=timezone.utc, executors={"default": DaemonThreadExecutor()}
    )


def blocking_scheduler() -> Any:
    """A new ``BlockingScheduler`` in UTC, for the foreground ``sa-redis-ids maintain`` (each run
    in a daemon thread, as for `background_scheduler`)."""
    _apscheduler()
    from apscheduler.schedulers.blocking import BlockingScheduler

    from sa_redis_ids.maintenance.executor import DaemonThreadExecutor

    return BlockingScheduler(timezone=timezone.utc, executors={"default": DaemonThreadExecutor()})
