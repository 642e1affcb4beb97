"""First-of-day initialisation from a floor: seeding under the Redlock, the lock-free hot path,
100 threads and several processes on a fresh day, N nodes, and Redis losing its data under an ORM
that inserts through ``floor_from_column``."""

from __future__ import annotations

import os
import threading
import time as clock
from collections.abc import Callable
from datetime import date, time, timedelta
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, MetaData, String, Table, insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from sa_redis_ids import (
    ConfigError,
    DayPurged,
    RedisIds,
    RedisUnavailable,
    floor_from_column,
    redis_id,
)
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from tests.conftest import Backend
from tests.support.days import seen_today, shift_to_local
from tests.support.forking import child_call_status
from tests.support.servers import RedisServer
from tests.support.uniqueness import draw_in_processes, duplicates, released_together

StartServers = Callable[[int], list[RedisServer]]
DAY = date(2031, 2, 3)
NOON = time(12)


def floor_41(day: date) -> int:
    """A module-level floor, so spawned processes can unpickle it."""
    return 41


class Counted:
    """A floor that records the days it was asked for and can be slowed down or changed."""

    def __init__(self, value: int, *, delay: float = 0.0):
        self.value = value
        self.delay = delay
        self.days: list[date] = []
        self._lock = threading.Lock()

    def __call__(self, day: date) -> int:
        with self._lock:
            self.days.append(day)
        clock.sleep(self.delay)
        return self.value


def count_locks(ids: RedisIds, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the name of every Redlock ``ids`` makes from now on."""
    names: list[str] = []
    original = ids.lock

    def lock(name: str, **kwargs: Any) -> Any:
        names.append(name)
        return original(name, **kwargs)

    monkeypatch.setattr(ids, "lock", lock)
    return names


# -- seeding and the hot path ------------------------------------------------------------------


def test_a_missing_day_is_seeded_above_the_floor_once_then_no_lock(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = backend.ids()
    locks = count_locks(ids, monkeypatch)
    floor = Counted(41)
    invoices = ids.date_prefixed("invoices", length=12, floor=floor, headroom=0)
    shift_to_local(invoices, DAY, NOON)
    assert invoices.next_id() == 20310203_0042
    assert invoices.next_ids(3) == [20310203_0043, 20310203_0044, 20310203_0045]
    assert invoices.next_id() == 20310203_0046
    assert floor.days == [DAY]
    assert locks == ["invoices.dp.20310203"], "only the first call of the day takes the lock"


def test_a_seed_after_a_loss_adds_the_drift_of_the_mark_of_the_day(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a loss, a day's counter is seeded as a heal: above the floor and this process's mark
    of the day, by the headroom plus the mark's drift. Values another process drew after an
    earlier heal, not yet in the table, lie a headroom above the floor; only the drift (what the
    node's pace says the others drew since this process's mark) can reach above them."""
    ids = backend.ids()
    floor = Counted(5)
    invoices = ids.date_prefixed("invoices", length=12, floor=floor, headroom=100)
    shift_to_local(invoices, DAY, NOON)
    assert invoices.next_id() == 20310203_0106  # seeded at the floor plus the headroom
    for key in backend.client.scan_iter(match=f"{ids.prefix}:*"):
        backend.client.delete(key)
    floor.value = 50  # others' values reached the table; this process's mark (106) is older
    monkeypatch.setattr(invoices.high, "drift", lambda index, most, period="": min(most, 900))
    assert invoices.next_id() == 20310203_0106 + 100 + 900 + 1


def test_daily_codes_are_seeded_above_the_floor(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = backend.ids()
    locks = count_locks(ids, monkeypatch)
    floor = Counted(120)
    codes = ids.daily_code("orders", floor=floor, headroom=0)
    shift_to_local(codes, DAY, NOON)
    assert [codes.next_id(), *codes.next_ids(2)] == [
        "IS203102030121",
        "IS203102030122",
        "IS203102030123",
    ]
    shift_to_local(codes, DAY + timedelta(days=1), time(0, 0, 10))
    floor.value = 0
    assert codes.next_id() == "IS203102040001"
    assert floor.days == [DAY, DAY + timedelta(days=1)]
    assert locks == ["orders.dc.20310203", "orders.dc.20310204"]


def test_an_existing_counter_above_the_floor_is_left_alone_and_the_floor_read_once(
    backend: Backend,
) -> None:
    plain = backend.ids().daily_code("orders")
    shift_to_local(plain, DAY, NOON)
    plain.next_ids(5)
    floor = Counted(3)
    seeded = backend.ids().daily_code("orders", floor=floor)
    shift_to_local(seeded, DAY, NOON)
    assert [seeded.next_id(), seeded.next_id()] == ["IS203102030006", "IS203102030007"]
    assert floor.days == [DAY], "read once per process and node, at first use"
    assert seeded.rewinds == 0


def test_an_existing_counter_below_the_floor_is_raised_at_first_use(backend: Backend) -> None:
    plain = backend.ids().daily_code("orders")
    shift_to_local(plain, DAY, NOON)
    plain.next_ids(5)  # then the node is rewound while no process with a floor runs
    floor = Counted(900)
    seeded = backend.ids().daily_code("orders", floor=floor, headroom=50)
    shift_to_local(seeded, DAY, NOON)
    assert seeded.next_id() == "IS203102030951"
    assert seeded.rewinds == 1
    assert floor.days == [DAY]


def test_the_floor_is_read_under_the_lock(backend: Backend) -> None:
    ids = backend.ids()
    floor = Counted(10)
    codes = ids.daily_code("orders", floor=floor, headroom=0)
    shift_to_local(codes, DAY, NOON)
    result: list[str] = []
    worker = threading.Thread(target=lambda: result.append(codes.next_id()))
    with ids.lock("orders.dc.20310203", ttl=30):  # another instance is seeding this day
        worker.start()
        worker.join(0.3)
        assert worker.is_alive(), "the first call of the day waits for the lock"
        assert floor.days == []
        floor.value = 77  # the other instance inserted rows up to counter 77 meanwhile
    worker.join(15)
    assert result == ["IS203102030078"]


def test_seed_004_hundred_threads_with_a_floor_on_a_fresh_day(backend: Backend) -> None:
    floor = Counted(41, delay=0.05)
    codes = backend.ids().daily_code("IS", floor=floor, headroom=0)
    shift_to_local(codes, DAY, time(0, 0, 5))
    results, errors = released_together(codes.next_id, 100)
    assert errors == []
    assert sorted(results) == [f"IS20310203{c:04d}" for c in range(42, 142)]
    assert floor.days == [DAY], "one thread seeds; the others find the counter"


def test_processes_racing_on_a_fresh_day_seed_once_and_never_share_a_code(
    real_backend: Backend,
) -> None:
    spec = real_backend.spec("daily_code", "orders", digits=6, tz="UTC", floor=floor_41, headroom=0)
    values = draw_in_processes(spec, processes=2, threads=5, per_thread=40)
    assert duplicates(values) == {}
    check = real_backend.ids().daily_code("orders", digits=6, tz="UTC")
    by_day: dict[date, list[int]] = {}
    for value in values:
        parts = check.parse(value)
        by_day.setdefault(parts.day, []).append(parts.counter)
    for counters in by_day.values():  # seeded once: 42, 43, … without a gap
        assert sorted(counters) == list(range(42, 42 + len(counters)))


# -- the floor's contract ----------------------------------------------------------------------


def test_a_floor_returning_a_bad_value_is_a_config_error_and_takes_nothing(
    ids: RedisIds,
) -> None:
    floor = Counted(-3)
    invoices = ids.date_prefixed("invoices", length=12, floor=floor, headroom=0)
    shift_to_local(invoices, DAY, NOON)
    with pytest.raises(ConfigError, match=r"floor\(2031-02-03\) returned -3"):
        invoices.next_id()
    assert invoices.days_present() == []
    floor.value = 5
    assert invoices.next_id() == 20310203_0006


def test_a_failing_floor_fails_the_call_and_the_next_call_retries(ids: RedisIds) -> None:
    answers: list[Any] = [RuntimeError("database down"), 8]

    def floor(day: date) -> int:
        answer = answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return int(answer)

    invoices = ids.date_prefixed("invoices", length=12, floor=floor, headroom=0)
    shift_to_local(invoices, DAY, NOON)
    with pytest.raises(RuntimeError, match="database down"):
        invoices.next_id()
    assert invoices.next_id() == 20310203_0009


def test_precreate_seeds_from_the_floor(ids: RedisIds) -> None:
    floor = Counted(300)
    invoices = ids.date_prefixed("invoices", length=12, floor=floor, headroom=0)
    assert invoices.precreate(DAY) is True
    assert invoices.precreate(DAY) is False
    assert floor.days == [DAY]
    shift_to_local(invoices, DAY, NOON)
    assert invoices.next_id() == 20310203_0301


def test_a_purged_day_is_refused_before_any_floor_is_read(ids: RedisIds) -> None:
    floor = Counted(3)
    invoices = ids.date_prefixed("invoices", floor=floor, headroom=0)
    invoices.purge_before(DAY + timedelta(days=1))
    shift_to_local(invoices, DAY, NOON)
    with pytest.raises(DayPurged):
        invoices.next_id()
    with pytest.raises(DayPurged):
        invoices.precreate(DAY)
    assert floor.days == []


def test_a_floor_needs_the_lock_of_a_redis_ids(ids: RedisIds) -> None:
    bare = DatePrefixedGenerator(ids.nodes, ids.prefix, "bare", floor=floor_41, headroom=0)
    with pytest.raises(ConfigError, match="needs a lock"):
        bare.next_id()


def test_asking_again_with_another_floor_is_refused(ids: RedisIds) -> None:
    first = ids.daily_code("orders", floor=floor_41, headroom=0)
    assert ids.daily_code("orders", floor=floor_41, headroom=0) is first
    with pytest.raises(ConfigError, match="floor"):
        ids.daily_code("orders")
    with pytest.raises(ConfigError, match="floor"):
        ids.daily_code("orders", floor=Counted(1), headroom=0)


# -- several nodes -------------------------------------------------------------------------------


def test_each_node_seeds_its_own_residue_above_the_floor(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    invoices = RedisIds.from_urls([s.url for s in servers]).date_prefixed(
        "invoices", length=12, floor=Counted(100), headroom=0
    )
    shift_to_local(invoices, DAY, NOON)
    first = [invoices.next_id() for _ in range(3)]
    assert sorted(first) == [20310203_0101, 20310203_0102, 20310203_0103]
    assert invoices.next_ids(3)[0] in {20310203_0104, 20310203_0105, 20310203_0106}


def test_one_of_two_nodes_down_neither_stops_a_floored_day_nor_precreation(
    redis_servers: StartServers, caplog: pytest.LogCaptureFixture
) -> None:
    servers = redis_servers(2)
    ids = RedisIds.from_urls([s.url for s in servers])
    invoices = ids.date_prefixed("invoices", length=12, floor=Counted(100), headroom=0)
    shift_to_local(invoices, DAY, NOON)
    servers[1].kill()
    values = [invoices.next_id() for _ in range(3)]  # node 0 alone seeds its counter of the day
    assert values == [20310203_0101, 20310203_0103, 20310203_0105]
    assert invoices.precreate(DAY + timedelta(days=1)) is True, "the reachable node is seeded"
    assert ids.nodes.nodes[1].name in caplog.text, "the unreachable node is reported"
    servers[0].kill()
    with pytest.raises(RedisUnavailable) as caught:
        invoices.precreate(DAY + timedelta(days=2))
    assert set(caught.value.errors) == {node.name for node in ids.nodes.nodes}


def test_one_node_losing_its_data_continues_above_what_was_issued(
    redis_servers: StartServers,
) -> None:
    servers = redis_servers(3)
    issued: list[str] = []

    def floor(day: date) -> int:  # what a table of the issued codes would answer
        return max((codes.parse(c).counter for c in issued if codes.parse(c).day == day), default=0)

    codes = RedisIds.from_urls([s.url for s in servers]).daily_code(
        "orders", floor=floor, headroom=0
    )
    shift_to_local(codes, DAY, NOON)
    for _ in range(10):
        issued += [codes.next_id(), *codes.next_ids(2)]
    servers[1].client().flushall()
    for _ in range(10):
        issued += [codes.next_id(), *codes.next_ids(2)]
    assert duplicates(issued) == {}
    assert len(issued) == 60


# -- floor_from_column on the databases ------------------------------------------------------------


def test_floor_from_column_reads_only_the_days_range(engine: Engine, create_tables: Any) -> None:
    metadata = MetaData()
    invoices_table = Table("fod_floor_inv", metadata, Column("id", BigInteger, primary_key=True))
    codes_table = Table("fod_floor_codes", metadata, Column("code", String(30), primary_key=True))
    create_tables(metadata)
    ids = RedisIds.embedded()
    invoices = ids.date_prefixed("inv", length=12)
    codes = ids.daily_code("codes", code_prefix="A_")
    invoice_floor = floor_from_column(engine, invoices_table.c.id).bind(invoices)
    code_floor = floor_from_column(sessionmaker(engine), codes_table.c.code).bind(codes)
    day = DAY
    with engine.begin() as conn:
        conn.execute(
            insert(invoices_table),
            [
                {"id": invoices.compose(day - timedelta(days=1), 9999)},
                {"id": invoices.compose(day, 17)},
                {"id": invoices.compose(day, 5)},
                {"id": invoices.compose(day + timedelta(days=1), 1)},
            ],
        )
        conn.execute(
            insert(codes_table),
            [
                {"code": codes.compose(day - timedelta(days=1), 9999)},
                {"code": codes.compose(day, 23)},
                {"code": codes.compose(day, 4)},
                {"code": "AX" + codes.compose(day, 8000)[2:]},  # another prefix
                {"code": codes.compose(day, 9000) + "0"},  # longer: another generator's
            ],
        )
    assert invoice_floor(day) == 17
    assert invoice_floor(day + timedelta(days=2)) == 0
    assert code_floor(day) == 23
    assert code_floor(day + timedelta(days=1)) == 0


def test_floor_from_column_refuses_what_cannot_work(engine: Engine) -> None:
    column = Column("id", BigInteger)
    with pytest.raises(TypeError, match="Engine or a sessionmaker"):
        floor_from_column("sqlite://", column)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a column"):
        floor_from_column(engine, 42)
    with pytest.raises(TypeError, match="not bound"):
        floor_from_column(engine, column)(DAY)


# -- Redis loses its data under the ORM ------------------------------------------------------------


def test_flushall_mid_day_then_orm_inserts_never_reuse_an_id(
    redis_servers: StartServers, engine: Engine, create_tables: Any
) -> None:
    (server,) = redis_servers(1)
    ids = RedisIds.from_url(server.url, prefix="fod")
    invoice_ids = ids.date_prefixed("invoices", floor=floor_from_column(engine, lambda: Invoice.id))
    order_codes = ids.daily_code(
        "orders", floor=floor_from_column(sessionmaker(engine), lambda: Invoice.code)
    )

    class Base(DeclarativeBase):
        pass

    class Invoice(Base):
        __tablename__ = "fod_invoices"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(invoice_ids)
        )
        code: Mapped[str] = mapped_column(
            String(order_codes.max_length), unique=True, default=redis_id(order_codes)
        )
        note: Mapped[str] = mapped_column(String(20))

    create_tables(Base.metadata)
    shift_to_local(invoice_ids, DAY, NOON)
    shift_to_local(order_codes, DAY, NOON)

    def insert_rows(note: str, count: int) -> None:
        with Session(engine) as session:
            session.add_all([Invoice(note=f"{note} {i}") for i in range(count)])
            session.commit()

    insert_rows("before", 25)
    server.client().flushall()  # Redis restarts empty in the middle of the day
    restarted = RedisIds.from_url(server.url, prefix="other").date_prefixed("invoices")
    shift_to_local(restarted, DAY, NOON)
    assert restarted.parse(restarted.next_id()).counter == 1, "without a floor it starts over"
    insert_rows("after", 25)  # no IntegrityError

    with Session(engine) as session:
        rows = session.query(Invoice).all()
    assert len(rows) == 50
    assert duplicates([r.id for r in rows]) == {} and duplicates([r.code for r in rows]) == {}
    before = [r for r in rows if r.note.startswith("before")]
    after = [r for r in rows if r.note.startswith("after")]
    assert min(r.id for r in after) > max(r.id for r in before)
    assert min(r.code for r in after) > max(r.code for r in before)
    assert {invoice_ids.parse(r.id).day for r in rows} == {seen_today(invoice_ids)} == {DAY}


def test_a_child_forked_while_a_thread_seeds_a_day_does_not_hang(real_backend: Backend) -> None:
    parent = os.getpid()
    seeding, release = threading.Event(), threading.Event()

    def floor(day: date) -> int:
        if os.getpid() == parent:
            seeding.set()
            release.wait(10)  # the parent's thread holds the seeding lock meanwhile
        return 0

    codes = real_backend.ids().daily_code("orders", floor=floor)
    shift_to_local(codes, DAY + timedelta(days=1), NOON)  # a day no counter exists for yet
    first = threading.Thread(target=codes.next_id)
    first.start()
    assert seeding.wait(5)
    assert child_call_status(codes.next_id, release) == 0
    first.join(10)


def test_a_node_whose_day_another_process_is_seeding_is_passed_over(
    redis_servers: StartServers,
) -> None:
    servers = redis_servers(2)
    ids = RedisIds.from_urls([s.url for s in servers])
    codes = ids.daily_code("orders", floor=Counted(0), headroom=0)
    shift_to_local(codes, DAY, NOON)
    first_node = ids.nodes.nodes[0]
    with ids.lock("orders.dc.20310203", ttl=30, nodes=[first_node]):  # another process seeds it
        code = codes.next_id()  # the call goes to node 0 first, waits briefly, then node 1
    assert codes.parse(code).node_index == 1
