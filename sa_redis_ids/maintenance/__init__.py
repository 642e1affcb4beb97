"""Keeping date-keyed counters healthy over months: pre-create, purge, report, reseed.

``ids.maintenance(keep_days=7, precreate_days=2)`` returns a `Maintenance` whose
``run_once()`` does one pass, ``schedule(scheduler)`` adds it to an APScheduler 3 scheduler and
``start()`` runs it in an embedded daemon ``BackgroundScheduler``. `reseed_from_table`
raises a generator's counters above what a database table already holds.
"""

from sa_redis_ids.maintenance.job import (
    DayCounterReport,
    Maintenance,
    MaintenanceError,
    MaintenanceSummary,
    PoolReport,
)

__all__ = [
    "DayCounterReport",
    "Maintenance",
    "MaintenanceError",
    "MaintenanceSummary",
    "PoolReport",
]
