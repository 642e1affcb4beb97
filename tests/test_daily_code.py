"""DailyCode on every backend: code shape, restart at midnight (also under threads), expiry,
exhaustion, configuration errors, parsing, purging, and seed 004's 100-thread test."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import date, time, timedelta
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sa_redis_ids import ConfigError, DayMissing, DayPurged, RedisIds, SequenceExhausted
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from tests.conftest import Backend
from tests.support.days import day_end_ms, seen_today, shift_to, shift_to_local, utc
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates, released_together

StartServers = Callable[[int], list[RedisServer]]


def test_codes_are_prefix_day_and_a_counter_from_1(ids: RedisIds) -> None:
    codes = ids.daily_code("orders")
    label = seen_today(codes).strftime("%Y%m%d")
    assert [*codes.next_ids(3), codes.next_id()] == [f"IS{label}{c:04d}" for c in (1, 2, 3, 4)]
    assert codes.python_type is str
    assert (codes.max_length, codes.max_value) == (14, 9999)


def test_the_day_is_the_redis_day_in_shanghai_not_in_utc(ids: RedisIds) -> None:
    codes = ids.daily_code("orders", code_prefix="SO", digits=6)
    shift_to(codes, utc(2030, 11, 22, 16, 5))  # 00:05 on the 23rd in Shanghai
    assert codes.next_id() == "SO20301123000001"
    in_utc = ids.daily_code("orders_utc", code_prefix="SO", digits=6, tz="UTC")
    shift_to(in_utc, utc(2030, 11, 22, 16, 5))
    assert in_utc.next_id() == "SO20301122000001"


def test_the_days_key_expires_after_its_day_plus_the_grace(backend: Backend) -> None:
    codes = backend.ids().daily_code("orders", grace_days=3)
    day = date(2031, 1, 15)
    shift_to_local(codes, day, time(10))
    codes.next_ids(2)
    key = codes.keys.key("dc", "20310115")
    assert backend.client.get(key) == b"2"
    expected = day_end_ms(codes, day) + 3 * 86_400_000
    assert backend.client.pexpiretime(key) == expected


def test_a_day_whose_key_vanished_is_reported_missing_and_never_restarts_at_1(
    backend: Backend,
) -> None:
    codes = backend.ids().daily_code("orders", headroom=10)
    day = date(2031, 1, 15)
    shift_to_local(codes, day, time(10))
    assert codes.next_id() == "IS203101150001"
    backend.client.delete(codes.keys.key("dc", "20310115"))  # what an expiry or eviction does
    newcomer = backend.ids().daily_code("orders", headroom=10)  # a process that saw nothing
    shift_to_local(newcomer, day, time(10))
    with pytest.raises(DayMissing, match="vanished"):
        newcomer.next_id()
    assert backend.client.get(codes.keys.key("dc", "20310115")) is None, "nothing taken"
    # The process that issued code 1 heals the day above it, headroom included.
    assert codes.next_id() == "IS203101150012"
    assert codes.rewinds == 1
    assert newcomer.next_id() == "IS203101150013"
    shift_to_local(codes, day + timedelta(days=1), time(10))
    assert codes.next_id() == "IS203101160001"


def test_a_vanished_day_can_be_raised_from_a_known_value(backend: Backend) -> None:
    """A day whose counter vanished is raised above the known value by the headroom, as a
    heal: values past what the value was read from (a table) may have been issued."""
    codes = backend.ids().daily_code("orders")
    day = date(2031, 1, 15)
    shift_to_local(codes, day, time(10))
    codes.next_ids(3)
    backend.client.delete(codes.keys.key("dc", "20310115"))
    newcomer = backend.ids().daily_code("orders", headroom=10)
    shift_to_local(newcomer, day, time(10))
    newcomer.ensure_at_least("IS203101150005")
    assert newcomer.rewinds == 1
    assert newcomer.next_id() == "IS203101150016"


def test_exhausted_counter_raises_and_never_grows_a_digit(ids: RedisIds) -> None:
    codes = ids.daily_code("orders", digits=1)
    label = seen_today(codes).strftime("%Y%m%d")
    assert codes.next_ids(4) + [codes.next_id() for _ in range(5)] == [
        f"IS{label}{c}" for c in range(1, 10)
    ]
    with pytest.raises(SequenceExhausted) as caught:
        codes.next_id()
    assert caught.value.namespace == "orders"


def test_an_exhausting_batch_takes_nothing(ids: RedisIds) -> None:
    codes = ids.daily_code("orders", digits=2)
    codes.next_ids(97)
    with pytest.raises(SequenceExhausted):
        codes.next_ids(3)
    assert [codes.parse(c).counter for c in codes.next_ids(2)] == [98, 99]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"code_prefix": ""}, r"code_prefix must not be empty"),
        ({"code_prefix": "X" * 21}, r"code_prefix='X{21}' is 21 characters long; at most 20 fit"),
        ({"code_prefix": "I S"}, r"code_prefix='I S' may only hold A-Z a-z 0-9 _ and -"),
        ({"code_prefix": "IS:"}, r"may only hold"),
        ({"code_prefix": "订单"}, r"may only hold"),
        ({"code_prefix": 7}, r"code_prefix must be a str"),
        ({"digits": 0}, r"digits=0 is out of range; it must be from 1 to 18"),
        ({"digits": 19}, r"digits=19 is out of range; it must be from 1 to 18"),
        ({"tz": "Asia/Peking"}, r"tz='Asia/Peking' is not an IANA time zone"),
        ({"grace_days": -1}, r"grace_days=-1 is out of range"),
    ],
)
def test_bad_configurations_say_which_option_and_what_fits(
    ids: RedisIds, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        ids.daily_code("bad", **options)  # type: ignore[arg-type]


def test_prefixes_of_every_allowed_character_work(ids: RedisIds) -> None:
    codes = ids.daily_code("orders", code_prefix="a-Z_09" * 3 + "xy", digits=18)
    code = codes.next_id()
    assert len(code) == codes.max_length == 20 + 8 + 18
    assert codes.parse(code).counter == 1


def test_a_changed_prefix_on_a_used_namespace_is_caught_by_the_node(backend: Backend) -> None:
    backend.ids().daily_code("orders").next_id()
    with pytest.raises(ConfigError, match="prefix=SO"):
        backend.ids().daily_code("orders", code_prefix="SO").next_id()


# -- midnight ----------------------------------------------------------------------------------


def test_threads_crossing_midnight_get_unique_codes_of_their_day(backend: Backend) -> None:
    codes = backend.ids().daily_code("orders")
    day = date(2030, 12, 31)
    shift_to_local(codes, day, time(23, 59, 30))
    drawn: list[list[str]] = [[] for _ in range(6)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def draw(out: list[str]) -> None:
        try:
            while not stop.is_set():
                out.append(codes.next_id())
        except BaseException as exc:
            errors.append(exc)

    def wait_for(count: int) -> None:
        while not errors and min(len(out) for out in drawn) < count:
            stop.wait(0.005)

    threads = [threading.Thread(target=draw, args=(out,)) for out in drawn]
    for thread in threads:
        thread.start()
    wait_for(15)
    shift_to_local(codes, day + timedelta(days=1), time(0, 0, 30))  # midnight passes
    marks = [len(out) for out in drawn]
    wait_for(max(marks) + 15)
    stop.set()
    for thread in threads:
        thread.join()
    assert errors == []
    everything = [code for out in drawn for code in out]
    assert duplicates(everything) == {}
    by_day: dict[date, list[int]] = {}
    for code in everything:
        parts = codes.parse(code)
        by_day.setdefault(parts.day, []).append(parts.counter)
    assert set(by_day) == {day, day + timedelta(days=1)}
    for counters in by_day.values():  # each day restarts at 1 and has no gap
        assert sorted(counters) == list(range(1, len(counters) + 1))
    for out, mark in zip(drawn, marks, strict=True):
        days = [codes.parse(code).day for code in out]
        assert days == sorted(days), "a thread never goes back to the old day"
        assert days[-1] == day + timedelta(days=1)
        assert all(d == day + timedelta(days=1) for d in days[mark + 1 :])


# -- seed 004 ----------------------------------------------------------------------------------


def test_seed_004_hundred_threads_on_a_day_without_counter(backend: Backend) -> None:
    codes = backend.ids().daily_code("IS")
    day = date(2031, 2, 3)
    shift_to_local(codes, day, time(0, 0, 5))
    results, errors = released_together(codes.next_id, 100)
    assert errors == []
    assert len(set(results)) == 100
    assert {codes.parse(code).day for code in results} == {day}
    assert sorted(results) == [f"IS20310203{c:04d}" for c in range(1, 101)]


# -- parsing -----------------------------------------------------------------------------------


@cache
def _codes(prefix: str, digits: int) -> DailyCodeGenerator:
    return RedisIds.embedded().daily_code("p", code_prefix=prefix, digits=digits)


prefixes = st.text(st.sampled_from("ABCXYZabcxyz0189_-"), min_size=1, max_size=20)


@settings(max_examples=150, deadline=None)
@given(
    prefix=prefixes,
    digits=st.integers(1, 18),
    day=st.dates(date(1000, 1, 1), date(9999, 12, 31)),
    data=st.data(),
)
def test_compose_and_parse_round_trip(
    prefix: str, digits: int, day: date, data: st.DataObject
) -> None:
    codes = _codes(prefix, digits)
    counter = data.draw(st.integers(1, 10**digits - 1))
    code = codes.compose(day, counter)
    assert len(code) == codes.max_length
    parts = codes.parse(code)
    assert (parts.code, parts.prefix, parts.day, parts.counter) == (code, prefix, day, counter)


@settings(max_examples=150, deadline=None)
@given(
    prefix=prefixes,
    digits=st.integers(1, 8),
    day=st.dates(date(2000, 1, 1), date(2099, 12, 31)),
    data=st.data(),
)
def test_a_batch_is_composed_as_its_codes_one_by_one(
    prefix: str, digits: int, day: date, data: st.DataObject
) -> None:
    """A batch's codes (built a thousand counters at a time for long counters) are exactly the
    codes of its counters composed one by one, across thousands and with a node count's step."""
    codes = _codes(prefix, digits)
    top = 10**digits - 1
    step = data.draw(st.integers(1, 3))
    first = data.draw(st.integers(1, top))
    n = data.draw(st.integers(1, min(3000, (top - first) // step + 1)))
    expected = [codes.compose(day, counter) for counter in range(first, first + n * step, step)]
    assert codes._compose(codes._day_part(day), first, n, step) == expected


@settings(max_examples=150, deadline=None)
@given(
    prefix=prefixes,
    digits=st.integers(1, 6),
    day=st.dates(date(1000, 1, 1), date(9999, 12, 31)),
    data=st.data(),
)
def test_a_code_changed_in_one_place_is_refused_or_is_another_valid_code(
    prefix: str, digits: int, day: date, data: st.DataObject
) -> None:
    codes = _codes(prefix, digits)
    code = codes.compose(day, data.draw(st.integers(1, 10**digits - 1)))
    at = data.draw(st.integers(0, len(code)))
    replacement = data.draw(st.text(max_size=2))
    candidate = code[:at] + replacement + code[at + 1 :]
    try:
        parts = codes.parse(candidate)
    except ValueError:
        return
    assert codes.compose(parts.day, parts.counter) == candidate


@pytest.mark.parametrize(
    "bad",
    [
        "SO202611220001",  # another prefix
        "IS20261122001",  # one digit short
        "IS2026112200001",  # one digit long
        "IS202613220001",  # month 13
        "IS202602300001",  # 30 February
        "IS202611220000",  # counter 0 is never issued
        "IS2026112200a1",
        "IS２０２６11220001",  # non-ASCII digits
        20261122001,
        None,
    ],
)
def test_parse_refuses_what_is_not_a_code_of_this_generator(bad: object) -> None:
    with pytest.raises(ValueError):
        _codes("IS", 4).parse(bad)  # type: ignore[arg-type]


# -- purging -----------------------------------------------------------------------------------


def test_purge_deletes_old_days_and_a_purged_day_is_refused(backend: Backend) -> None:
    codes = backend.ids().daily_code("orders")
    day = date(2032, 3, 10)
    for d in (day - timedelta(days=2), day - timedelta(days=1), day):
        shift_to_local(codes, d, time(12))
        codes.next_ids(2)
    assert codes.days_present() == [day - timedelta(days=2), day - timedelta(days=1), day]
    assert codes.purge_before(day) == [day - timedelta(days=2), day - timedelta(days=1)]
    assert codes.days_present() == [day]
    assert codes.purged_through() == day - timedelta(days=1)
    assert backend.client.smembers(codes.keys.key("dc", "days")) == {b"20320310"}
    assert codes.purge_before(day - timedelta(days=10)) == []
    assert codes.purged_through() == day - timedelta(days=1), "the marker is never lowered"
    shift_to_local(codes, day - timedelta(days=1), time(23))
    with pytest.raises(DayPurged):
        codes.next_id()
    with pytest.raises(DayPurged):
        codes.precreate(day - timedelta(days=1))
    assert backend.client.exists(codes.keys.key("dc", "20320309")) == 0
    shift_to_local(codes, day, time(13))
    assert codes.parse(codes.next_id()).counter == 3


def test_precreate_and_ensure_at_least(ids: RedisIds) -> None:
    codes = ids.daily_code("orders")
    day = date(2033, 4, 4)
    assert codes.precreate(day) is True
    assert codes.precreate(day) is False
    codes.ensure_at_least(codes.compose(day, 41))
    codes.ensure_at_least(codes.compose(day, 7))  # lower: no effect
    shift_to_local(codes, day, time(8))
    assert codes.next_id() == "IS203304040042"


# -- nodes and processes -----------------------------------------------------------------------


def test_three_nodes_issue_disjoint_codes(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    codes = RedisIds.from_urls([s.url for s in servers]).daily_code("orders", digits=3)
    drawn = [codes.next_id() for _ in range(30)] + codes.next_ids(40)
    assert duplicates(drawn) == {}
    parts = [codes.parse(c) for c in drawn]
    assert {p.node_index for p in parts} == {0, 1, 2}
    assert all((p.counter - 1) % 3 == p.node_index for p in parts)


def test_processes_and_threads_never_share_a_code(real_backend: Backend) -> None:
    spec = real_backend.spec("daily_code", "orders", digits=6)
    values = draw_in_processes(spec, processes=2, threads=4, per_thread=300)
    assert len(values) == 2 * 4 * 300
    assert duplicates(values) == {}


def test_processes_on_three_nodes_never_share_a_code(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    spec = GeneratorSpec(
        {"urls": [s.url for s in servers]}, "dc", "daily_code", "orders", {"digits": 6}, batch=5
    )
    values = draw_in_processes(spec, processes=2, threads=4, per_thread=300)
    assert len(values) == 2 * 4 * 300
    assert duplicates(values) == {}


def test_the_older_prefix_name_warns_at_the_callers_line_and_both_names_are_refused() -> None:
    ids = RedisIds.embedded()
    with pytest.warns(DeprecationWarning, match="code_prefix") as caught:
        codes = ids.daily_code("legacy", prefix="SO", digits=6)
    assert caught[0].filename == __file__, "the warning points at the caller's line"
    assert codes.next_id().startswith("SO")
    with pytest.raises(ConfigError, match="code_prefix= only"):
        ids.daily_code("both", prefix="A", code_prefix="B")
    with pytest.raises(ConfigError, match="code_prefix= only"):
        ids.generator("daily_code", "both", prefix="A", code_prefix="B")
