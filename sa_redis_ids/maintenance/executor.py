"""An APScheduler 3 executor that runs each maintenance run in a daemon thread of its own.

APScheduler's default executor is a ``concurrent.futures`` thread pool, whose worker threads are
not daemons: the interpreter waits for them at exit, so a run waiting on a hung Redis would hold
the process's exit for a socket timeout or more, and its idle workers outlive the scheduler's
shutdown until the pool is garbage-collected. The embedded scheduler
([`Maintenance.start`][sa_redis_ids.maintenance.Maintenance.start]) runs at most one run at a time
(``max_instances=1``), a few an hour: a fresh daemon thread per run costs nothing, and
``shutdown(wait=True)`` waits for the run in progress.

Imported only when scheduling (APScheduler is an optional extra).
"""

from __future__ import annotations

import sys
import threading
from typing import Any

from apscheduler.executors.base import BaseExecutor, run_job

RUN_THREAD_NAME = "sa_redis_ids maintenance run"


class DaemonThreadExecutor(BaseExecutor):  # type: ignore[misc]  # APScheduler 3 is untyped
    """Runs each submitted job in a new daemon thread; ``shutdown(wait=True)`` joins them. A job
    submitted after ``shutdown`` (the scheduler's thread may be finishing a pass) is not run."""

    def __init__(self) -> None:
        super().__init__()
        self._running: set[threading.Thread] = set()
        self._running_lock = threading.Lock()
        self._stopped = False

    def _do_submit_job(self, job: Any, run_times: list[Any]) -> None:
        def main() -> None:
            try:
                try:
                    events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
                except BaseException:
                    self._run_job_error(job.id, *sys.exc_info()[1:])
                else:
                    self._run_job_success(job.id, events)
            finally:
                with self._running_lock:
                    self._running.discard(thread)

        thread = threading.Thread(target=main, name=RUN_THREAD_NAME, daemon=True)
        with self._running_lock:  # started under it: shutdown never joins one not yet started
            if self._stopped:
                return
            self._running.add(thread)
            thread.start()

    def shutdown(self, wait: bool = True) -> None:
        with self._running_lock:
            self._stopped = True
            running = list(self._running)
        if wait:
            for thread in running:
                if thread.ident is not None:  # (a signal may land between its add and start)
                    thread.join()
