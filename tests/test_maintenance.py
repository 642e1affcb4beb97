"""The maintenance job: a simulated week, several instances, errors, pools, APScheduler, the CLI."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from sa_redis_ids import ConfigError, DayPurged, RedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.lock import lock_keys
from sa_redis_ids.maintenance import Maintenance, MaintenanceSummary
from sa_redis_ids.maintenance.job import LOCK_NAME
from sa_redis_ids.maintenance.scheduling import JOB_ID, MISFIRE_GRACE_TIME
from sa_redis_ids.testing import shift_time
from tests.conftest import Backend
from tests.support.servers import free_port
from tests.support.services import REDIS_URL

DAY_MS = 86_400_000
SHANGHAI = ZoneInfo("Asia/Shanghai")


def day_in(now: datetime, tz: ZoneInfo | timezone) -> date:
    return now.astimezone(tz).date()


def days(first: date, count: int) -> list[date]:
    return [first + timedelta(days=i) for i in range(count)]


def delete_prefix(client: redis.Redis, prefix: str) -> None:
    for key in list(client.scan_iter(match=f"{prefix}:*")):
        client.delete(key)


# -- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"keep_days": 1}, "keep_days"),
        ({"keep_days": 0}, "keep_days"),
        ({"keep_days": True}, "keep_days"),
        ({"precreate_days": -1}, "precreate_days"),
        ({"lock_ttl": 0}, "lock_ttl"),
        ({"fill_warning": 1.5}, "fill_warning"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RedisIds.embedded().maintenance(**options)


def test_naive_now_is_refused() -> None:
    maintenance = RedisIds.embedded().maintenance()
    with pytest.raises(ValueError, match="timezone-aware"):
        maintenance.run_once(datetime(2026, 11, 22, 12, 0))


# -- a simulated week ---------------------------------------------------------------------------


def test_a_simulated_week_precreates_purges_and_refuses_purged_days(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices", tz="UTC")
    codes = ids.daily_code("codes", tz="Asia/Shanghai")
    users = ids.sequence("users")
    start = datetime.now(timezone.utc)
    first_invoice = invoices.next_id()
    users.next_id()
    maintenance = ids.maintenance(keep_days=3, precreate_days=2)

    summaries: list[MaintenanceSummary] = []
    for k in range(8):
        summaries.append(maintenance.run_once(start + timedelta(days=k)))

    for k, summary in enumerate(summaries):
        now = start + timedelta(days=k)
        assert summary.ok and not summary.skipped, summary.line()
        assert summary.started_at == now
        assert [r.namespace for r in summary.counters] == ["invoices", "codes"]
        assert summary.pools == []
        for report, tz, gen in (
            (summary.counters[0], timezone.utc, invoices),
            (summary.counters[1], SHANGHAI, codes),
        ):
            today = day_in(now, tz)
            d0 = day_in(start, tz)
            assert report.today == today
            # The first run creates today (unless a value was already drawn) and two days ahead;
            # each later run adds the one new day at the far end.
            if k == 0:
                expected = days(today, 3)
                if gen is invoices:
                    expected.remove(today)  # next_id() already created it
                assert report.created == expected
            else:
                assert report.created == [today + timedelta(days=2)]
            # keep_days=3 keeps today and the two days before it.
            cutoff = today - timedelta(days=2)
            assert report.purged == ([cutoff - timedelta(days=1)] if cutoff > d0 else [])
            # The marker always rises to the day before the cutoff, even with nothing to delete.
            assert report.purged_through == cutoff - timedelta(days=1)

    last = start + timedelta(days=7)
    for gen, tz in ((invoices, timezone.utc), (codes, SHANGHAI)):
        today = day_in(last, tz)
        assert gen.days_present() == days(today - timedelta(days=2), 5)
        assert gen.purged_through() == today - timedelta(days=3)
        real_today = day_in(start, tz)
        with pytest.raises(DayPurged):
            gen.precreate(real_today)
    # A late writer on a purged day (here: the real today) is refused, never re-creates it.
    with pytest.raises(DayPurged):
        invoices.next_id()
    with pytest.raises(DayPurged):
        codes.next_id()
    assert first_invoice // 10**11 == int(day_in(start, timezone.utc).strftime("%Y%m%d"))
    assert users.next_id() == 2, "sequences are not touched"


def test_summary_line_and_properties_name_what_happened(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices")
    now = datetime.now(timezone.utc)
    today = day_in(now, timezone.utc)
    maintenance = ids.maintenance(keep_days=2, precreate_days=1)
    first = maintenance.run_once(now)
    assert first.created == {"invoices": [today, today + timedelta(days=1)]}
    assert first.purged == {}
    later = maintenance.run_once(now + timedelta(days=2))
    assert later.created == {"invoices": [today + timedelta(days=2), today + timedelta(days=3)]}
    assert later.purged == {"invoices": [today]}
    line = later.line()
    assert "\n" not in line
    assert (
        f"created invoices[{today + timedelta(days=2):%Y%m%d},{today + timedelta(days=3):%Y%m%d}]"
        in line
    )
    assert f"purged invoices[{today:%Y%m%d}]" in line
    assert "0 errors" in line
    assert maintenance.last_summary is later
    assert invoices.days_present() == [today + timedelta(days=d) for d in (1, 2, 3)]


def test_today_comes_from_redis_time_and_follows_the_generator_clock(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices", tz="UTC")
    codes = ids.daily_code("codes", tz="UTC")
    maintenance = ids.maintenance(keep_days=2, precreate_days=0)
    seconds, _ = ids.nodes.nodes[0].client.time()
    redis_today = datetime.fromtimestamp(int(seconds), tz=timezone.utc).date()
    with shift_time(invoices, 3 * DAY_MS):  # the clock of every generator of ``ids``
        summary = maintenance.run_once()
        assert invoices.next_id() // 10**11 == int(
            (redis_today + timedelta(days=3)).strftime("%Y%m%d")
        )
        by_ns = {r.namespace: r for r in summary.counters}
        # Around midnight the two readings may straddle it; both must be one of the two days.
        for namespace in ("invoices", "codes"):
            assert by_ns[namespace].today in {redis_today + timedelta(days=d) for d in (3, 4)}
        assert by_ns["codes"].created == [by_ns["codes"].today]
        assert codes.next_id().startswith(f"IS{by_ns['codes'].today:%Y%m%d}")


# -- several instances --------------------------------------------------------------------------


def _run_together(maintenances: list[Maintenance]) -> list[MaintenanceSummary]:
    barrier = threading.Barrier(len(maintenances))
    results: list[MaintenanceSummary | None] = [None] * len(maintenances)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            results[i] = maintenances[i].run_once()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(maintenances))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]


def _instances(make_ids: Any, count: int) -> list[Maintenance]:
    found = []
    for _ in range(count):
        instance_ids: RedisIds = make_ids()
        instance_ids.date_prefixed("invoices")
        instance_ids.daily_code("codes")
        found.append(instance_ids.maintenance(keep_days=3, precreate_days=2))
    return found


def test_instances_running_at_once_leave_the_work_to_one(backend: Backend) -> None:
    summaries = _run_together(_instances(backend.ids, 4))
    workers = [s for s in summaries if not s.skipped]
    skipped = [s for s in summaries if s.skipped]
    assert len(workers) == 1 and len(skipped) == 3
    assert all(s.reason == "another instance holds the maintenance lock" for s in skipped)
    assert all(s.ok for s in summaries)
    created = workers[0].created
    assert set(created) == {"invoices", "codes"} and all(len(d) == 3 for d in created.values())


def test_instances_on_three_independent_nodes_leave_the_work_to_one(
    redis_servers: Any,
) -> None:
    urls = [server.url for server in redis_servers(3)]
    summaries = _run_together(_instances(lambda: RedisIds.from_urls(urls), 3))
    assert sorted(s.skipped for s in summaries) == [False, True, True]
    worker = next(s for s in summaries if not s.skipped)
    assert all(len(d) == 3 for d in worker.created.values())
    check = RedisIds.from_urls(urls)
    today = check.date_prefixed("invoices").days_present()[0]
    assert check.date_prefixed("invoices").days_present() == days(today, 3)


def test_the_lease_holder_runs_again_and_others_wait_for_the_lease(backend: Backend) -> None:
    first, second = (
        backend.ids().maintenance(lock_ttl=60),
        backend.ids().maintenance(lock_ttl=60),
    )
    assert not first.run_once().skipped
    assert second.run_once().skipped
    assert not first.run_once().skipped, "the holder extends its own lease"
    lease_key, _fence = lock_keys(backend.prefix, "maintenance")
    assert backend.client.delete(lease_key) == 1  # what the lease's expiry does, without waiting
    assert not second.run_once().skipped
    assert first.run_once().skipped


def test_a_failing_generator_is_reported_and_the_others_are_maintained(
    backend: Backend,
) -> None:
    ids = backend.ids()
    broken = ids.date_prefixed("broken")
    healthy = ids.date_prefixed("healthy")
    now = datetime.now(timezone.utc)
    today = day_in(now, timezone.utc)
    broken.purge_before(today + timedelta(days=1))  # today is purged: precreating it must fail
    summary = ids.maintenance(keep_days=2, precreate_days=1).run_once(now)
    assert not summary.ok
    assert [(e.namespace, e.step) for e in summary.errors] == [("broken", "precreate")]
    assert str(today) in summary.errors[0].message
    assert summary.created == {
        "broken": [today + timedelta(days=1)],
        "healthy": [today, today + timedelta(days=1)],
    }
    assert healthy.days_present() == [today, today + timedelta(days=1)]
    assert "1 errors" in summary.line() and "error broken precreate" in summary.line()
    # A run with errors gives the lease back: another instance may try at once.
    other = backend.ids()
    other.date_prefixed("healthy")
    assert not other.maintenance().run_once(now).skipped


def test_pools_report_their_fill_and_a_full_one_warns(
    ids: RedisIds, caplog: pytest.LogCaptureFixture
) -> None:
    short = ids.short_id("short", pool_size=20, offset=100)
    roomy = ids.short_id("roomy", pool_size=1000, offset=1000)
    ids.sequence("buffered", block=10)  # has a stats() of its own: not a pool
    short.next_ids(17)
    roomy.next_ids(5)
    with caplog.at_level(logging.INFO, logger="sa_redis_ids.maintenance"):
        summary = ids.maintenance().run_once()
    assert summary.ok
    assert summary.fill == {"short": 0.85, "roomy": 0.005}
    assert [(p.issued, p.free) for p in summary.pools] == [(17, 3), (5, 995)]
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.name == "sa_redis_ids.maintenance"
    ]
    assert len(warnings) == 1 and "short" in warnings[0] and "85.0%" in warnings[0]
    info = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and r.name == "sa_redis_ids.maintenance"
    ]
    assert info == [summary.line()]
    assert "fill short=85.0% roomy=0.5%" in summary.line()


def test_an_unreachable_redis_is_reported_not_raised() -> None:
    ids = RedisIds.from_url(f"redis://127.0.0.1:{free_port()}/0")
    ids.date_prefixed("invoices")
    summary = ids.maintenance().run_once()
    assert summary.skipped and not summary.ok
    assert summary.errors[0].step == "today"
    ids.close()


# -- APScheduler --------------------------------------------------------------------------------


def test_default_trigger_fires_hourly_and_before_midnight_in_each_zone() -> None:
    ids = RedisIds.embedded()
    ids.daily_code("codes", tz="Asia/Shanghai")
    ids.date_prefixed("invoices", tz="America/New_York")
    maintenance = ids.maintenance()
    assert maintenance.time_zones() == ["America/New_York", "Asia/Shanghai"]
    trigger = maintenance.trigger()
    fire = datetime(2026, 11, 22, 15, 20, tzinfo=timezone.utc)
    seen = []
    for _ in range(6):
        fire = trigger.get_next_fire_time(None, fire + timedelta(seconds=1))
        seen.append(fire.astimezone(timezone.utc).strftime("%H:%M"))
    # 23:50 in Shanghai is 15:50 UTC; 23:50 in New York (EST) is 04:50 UTC.
    assert seen == ["15:50", "16:00", "17:00", "18:00", "19:00", "20:00"]
    later = datetime(2026, 11, 23, 4, 10, tzinfo=timezone.utc)
    assert trigger.get_next_fire_time(None, later).astimezone(timezone.utc).strftime("%H:%M") == (
        "04:50"
    )


def test_schedule_adds_a_coalesced_single_instance_job_and_shutdown_removes_it() -> None:
    ids = RedisIds.embedded()
    maintenance = ids.maintenance()
    scheduler = BackgroundScheduler(timezone=timezone.utc)
    scheduler.start(paused=True)
    try:
        job = maintenance.schedule(scheduler)
        assert (job.id, job.coalesce, job.max_instances) == (JOB_ID, True, 1)
        assert job.misfire_grace_time == MISFIRE_GRACE_TIME
        assert scheduler.get_job(JOB_ID) is not None
        maintenance.shutdown()
        assert scheduler.get_job(JOB_ID) is None
        assert scheduler.running, "an application's scheduler is not shut down"
    finally:
        scheduler.shutdown()


def test_the_job_fires_in_a_real_background_scheduler_and_stops_cleanly() -> None:
    ids = RedisIds.embedded()  # the scheduler is under test here; the backends are covered above
    invoices = ids.date_prefixed("invoices")
    maintenance = ids.maintenance(keep_days=2, precreate_days=1)
    scheduler = BackgroundScheduler(timezone=timezone.utc)
    results: list[MaintenanceSummary] = []
    failures: list[BaseException] = []
    fired = threading.Event()

    def listener(event: JobExecutionEvent) -> None:
        if event.exception is not None:
            failures.append(event.exception)
        else:
            results.append(event.retval)
        if len(results) + len(failures) >= 3:
            fired.set()

    scheduler.add_listener(listener, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    maintenance.schedule(scheduler, trigger=IntervalTrigger(seconds=0.2))
    scheduler.start()
    try:
        assert fired.wait(30), "the job did not fire three times"
    finally:
        scheduler.shutdown(wait=True)
    assert not scheduler.running
    assert failures == []
    assert all(isinstance(r, MaintenanceSummary) and r.ok for r in results)
    today = invoices.days_present()[0]
    assert results[0].created == {"invoices": [today, today + timedelta(days=1)]}
    assert all(r.created == {} for r in results[1:]), "later runs find the work done"
    count = len(results)
    time.sleep(0.5)
    assert len(results) == count, "no run after shutdown"


def test_start_runs_at_once_in_a_daemon_thread_and_shutdown_stops_it(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices")
    maintenance = ids.maintenance(precreate_days=1)
    scheduler = maintenance.start()
    try:
        assert scheduler.running and scheduler.get_job(JOB_ID) is not None
        assert maintenance.start() is scheduler, "start() twice keeps one scheduler"
        deadline = time.monotonic() + 30
        while maintenance.last_summary is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        maintenance.shutdown()
    assert not scheduler.running
    assert maintenance.last_summary is not None and maintenance.last_summary.ok
    assert len(invoices.days_present()) == 2
    assert not [t for t in threading.enumerate() if t.name == "APScheduler"]


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def redis_prefix(real_redis: redis.Redis) -> Any:
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    delete_prefix(real_redis, prefix)


def test_cli_maintain_once_purges_and_reports_with_the_recorded_options(
    redis_prefix: str, capsys: pytest.CaptureFixture[str]
) -> None:
    app = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    invoices = app.date_prefixed("invoices", fmt="YYMMDD", length=12, tz="Asia/Tokyo")
    invoices.next_id()
    today = invoices.days_present()[0]
    old = today - timedelta(days=10)
    invoices.ensure_at_least(invoices.compose(old, 5))
    app.short_id("short", pool_size=1000, offset=5000).next_ids(3)
    argv = ["maintain", "--once", "--redis-url", REDIS_URL, "--prefix", redis_prefix]
    status = main([*argv, "--date-prefixed", "invoices", "--short-id", "short"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert out.startswith("note: day counters are not created: generators rebuilt from the node")
    assert f"invoices (DatePrefixed, today {today}): created none; purged {old}" in out
    assert "short (pool): 3 issued, 997 free, 0.30% full" in out
    assert invoices.days_present() == [today], "no day was created ahead"
    assert invoices.next_id() == invoices.compose(today, 2)


def test_cli_maintain_after_a_data_loss_creates_and_claims_nothing(
    redis_prefix: str, real_redis: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["maintain", "--once", "--redis-url", REDIS_URL, "--prefix", redis_prefix]
    assert main([*argv, "--date-prefixed", "invoices"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sa-redis-ids: error: nothing to maintain for invoices: no node records")
    assert len(err.splitlines()) == 1
    assert list(real_redis.scan_iter(match=f"{redis_prefix}:*")) == []
    # The application, with options of its own and its floor, is not refused afterwards.
    app = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    invoices = app.date_prefixed("invoices", length=16, floor=lambda day: 41, headroom=0)
    assert invoices.parse(invoices.next_id()).counter == 42


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--keep-days", "1", "--date-prefixed", "x"], "keep_days=1"),
        ([], "no generators to maintain"),
        (["--precreate-days", "3", "--date-prefixed", "x"], "--precreate-days needs --app"),
        (["--app", "myapp:ids", "--short-id", "x"], "--app maintains every generator"),
    ],
)
def test_cli_maintain_rejects_bad_options(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["maintain", "--once", *argv]) == 1
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1


def test_cli_maintain_uses_the_application_object(
    redis_prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    module = f"app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(
        "from sa_redis_ids import RedisIds\n"
        f"ids = RedisIds.from_url({REDIS_URL!r}, prefix={redis_prefix!r})\n"
        "codes = ids.daily_code('codes', code_prefix='OR', digits=5, tz='Europe/Berlin')\n"
        "def make():\n"
        "    return ids\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        status = main(["maintain", "--once", "--app", f"{module}:make", "--precreate-days", "0"])
        out = capsys.readouterr().out
        assert status == 0, out
        assert "codes (DailyCode, today " in out
        codes = sys.modules[module].codes
        assert codes.days_present() == [codes.days_present()[0]]
        assert main(["maintain", "--once", "--app", f"{module}:nothing"]) == 1
        assert "no attribute 'nothing'" in capsys.readouterr().err
    finally:
        sys.modules.pop(module, None)


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_cli_maintain_runs_in_the_foreground_until_stopped_and_releases_its_lease(
    redis_prefix: str, stop: signal.Signals
) -> None:
    """Ctrl-C (SIGINT) or a service manager's SIGTERM ends ``maintain`` cleanly: exit status 0
    and the lease released, so another instance takes over at once (not after ``lock_ttl``)."""
    RedisIds.from_url(REDIS_URL, prefix=redis_prefix).date_prefixed("invoices").next_id()
    client = redis.Redis.from_url(REDIS_URL)
    lease = lock_keys(redis_prefix, LOCK_NAME)[0]
    # PYTHONFAULTHANDLER: a SIGABRT prints every thread's stack, for the report of a hang.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    # Ctrl-C as a terminal delivers it: a child inherits SIGINT's blocking and an ignored handler
    # from its parent, and the suite's process may have either from what ran before (worker
    # processes, servers), which would leave the child deaf to the signal this test sends.
    code = (
        "import signal, sys; signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
        "signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from sa_redis_ids.cli import main; sys.exit(main())"
    )
    argv = ["maintain", "--redis-url", REDIS_URL, "--prefix", redis_prefix]
    process = subprocess.Popen(
        [sys.executable, "-c", code, *argv, "--date-prefixed", "invoices"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(3)]
        while not lines[-1].startswith("  invoices"):
            lines.append(process.stdout.readline())
            assert lines[-1], "".join(lines)
        assert client.exists(lease), "a clean run keeps its lease until the next one"
        process.send_signal(stop)
        try:
            _, err = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, stacks = process.communicate(timeout=30)
            pytest.fail(f"maintain did not stop within 30 s of {stop.name}; its threads:\n{stacks}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert not client.exists(lease), "the lease is released on the way out"
    client.close()
    assert lines[0].startswith("note: day counters are not created")
    assert lines[1].startswith("maintenance scheduled: hourly and at 23:50 in UTC")
    assert lines[2].startswith("maintenance at ")
    assert "created none" in lines[-1]
