"""DatePrefixed on every backend: values, formats, bounds, exhaustion, midnight, time zones,
purging, reseeding, parsing, and uniqueness across nodes, threads and processes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sa_redis_ids import ConfigError, DayPurged, RedisIds, SequenceExhausted
from sa_redis_ids.bounds import BIGINT_MAX, JS_SAFE_MAX
from sa_redis_ids.generators.date_prefixed import FORMATS, HORIZON, DatePrefixedGenerator
from sa_redis_ids.testing import redis_time_ms, shift_time
from tests.conftest import Backend
from tests.support.days import day_end_ms, seen_today, shift_to, shift_to_local, utc
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates

StartServers = Callable[[int], list[RedisServer]]


def expected_prefix(fmt: str, day: date) -> str:
    """The date prefix written out independently of the library."""
    return {
        "YYYYMMDD": day.strftime("%Y%m%d"),
        "YYMMDD": day.strftime("%y%m%d"),
        "YYYYDDD": day.strftime("%Y%j"),
        "YYDDD": day.strftime("%y%j"),
    }[fmt]


# -- values and formats ----------------------------------------------------------------------


def test_values_are_todays_prefix_and_a_padded_counter(ids: RedisIds) -> None:
    invoices = ids.date_prefixed("invoices")
    today = seen_today(invoices)
    values = [*invoices.next_ids(3), invoices.next_id()]
    prefix = today.strftime("%Y%m%d")
    assert [str(v) for v in values] == [f"{prefix}{c:011d}" for c in (1, 2, 3, 4)]
    assert all(len(str(v)) == 19 for v in values)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_every_format_writes_its_date_prefix(ids: RedisIds, fmt: str) -> None:
    gen = ids.date_prefixed(f"f_{fmt}", fmt=fmt, length=14, start=7)
    shift_to(gen, utc(2028, 2, 29, 12))  # a leap day: day 060 of the year
    value = gen.next_id()
    assert str(value).zfill(14) == expected_prefix(fmt, date(2028, 2, 29)) + "7".zfill(
        14 - FORMATS[fmt]
    )
    parts = gen.parse(value)
    assert (parts.day, parts.counter, parts.node_index) == (date(2028, 2, 29), 7, 0)


def test_yy_formats_of_years_2000_to_2009_keep_their_leading_zero_when_parsed(
    ids: RedisIds,
) -> None:
    gen = ids.date_prefixed("early", fmt="YYDDD", length=10)
    shift_to(gen, utc(2005, 1, 9, 12))
    value = gen.next_id()
    assert value == 5009_00001  # "05009" + "00001": the int drops the leading zero
    assert gen.parse(value).day == date(2005, 1, 9)


def test_next_ids_zero_is_empty_and_refused_counts_take_nothing(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices")
    assert gen.next_ids(0) == []
    with pytest.raises(ValueError, match="0 or more"):
        gen.next_ids(-1)
    assert gen.parse(gen.next_id()).counter == 1


def test_the_namespace_keeps_one_hash_with_one_field_per_day(backend: Backend) -> None:
    gen = backend.ids().date_prefixed("invoices")
    with shift_time(gen, 0):
        today = seen_today(gen)
        gen.next_ids(5)
    with shift_time(gen, 86_400_000):
        gen.next_ids(2)
    hash_key = gen.keys.key("dp")
    fields = backend.client.hgetall(hash_key)
    tomorrow = today + timedelta(days=1)
    assert fields == {
        today.strftime("%Y%m%d").encode(): b"5",
        tomorrow.strftime("%Y%m%d").encode(): b"2",
    }
    assert gen.days_present() == [today, tomorrow]


def test_take_block_carries_the_redis_time_and_the_day_end(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices", tz="Asia/Shanghai")
    shift_to_local(gen, date(2030, 6, 1), time(23, 0))
    block = gen._take_block(4)
    assert block.day == date(2030, 6, 1)
    assert [gen.parse(v).counter for v in block.values] == [1, 2, 3, 4]
    assert block.day_end_ms == day_end_ms(gen, date(2030, 6, 1))
    assert 0 < block.day_end_ms - block.redis_now_ms <= 3_600_000


# -- bounds and configuration ----------------------------------------------------------------


def test_default_configuration_fits_bigint_until_the_year_9223(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices")
    assert gen.max_value == 9223_12_31_99999999999 <= BIGINT_MAX
    assert gen.last_day == date(9223, 12, 31)
    assert gen.max_length == 19
    assert gen.capacity_per_day == 10**11 - 1


def test_js_safe_configuration_stays_under_2_pow_53(ids: RedisIds) -> None:
    gen = ids.date_prefixed("js", length=16, js_safe=True)
    assert gen.max_value == 9007_12_31_99999999 <= JS_SAFE_MAX
    assert gen.last_day == date(9007, 12, 31)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"fmt": "YYYY-MM-DD"}, r"fmt='YYYY-MM-DD' is not a date format; use one of YYYYMMDD"),
        ({"length": 20}, r"length=20 is out of range; it must be from 8 to 19"),
        ({"length": 7}, r"length=7 is out of range"),
        ({"length": 8}, r"length=8 with fmt=YYYYMMDD leaves the counter no digits.*length>=9"),
        (
            {"fmt": "YYMMDD", "length": 19},
            r"length=19 with fmt=YYMMDD reaches 9912319999999999999 on 2099-12-31, past "
            r"9223372036854775807 \(signed BIGINT\); use length<=18",
        ),
        (
            {"length": 17, "js_safe": True},
            r"length=17 with fmt=YYYYMMDD .* past 9007199254740991 .*use length<=16 or "
            r"js_safe=False",
        ),
        ({"fmt": "YYDDD", "length": 16, "js_safe": True}, r"use length<=15 or js_safe=False"),
        ({"length": 10, "start": 100}, r"start=100 is out of range; it must be from 0 to 99"),
        ({"start": -1}, r"start=-1 is out of range"),
        ({"tz": "Mars/Olympus"}, r"tz='Mars/Olympus' is not an IANA time zone"),
    ],
)
def test_bad_configurations_say_which_option_and_what_fits(
    ids: RedisIds, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        ids.date_prefixed("bad", **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("js_safe", [False, True])
def test_every_accepted_configuration_fits_its_limit_through_the_horizon(
    fmt: str, js_safe: bool
) -> None:
    ids = RedisIds.embedded()
    accepted = []
    for length in range(8, 20):
        try:
            gen = ids.date_prefixed(f"n{length}", fmt=fmt, length=length, js_safe=js_safe)
        except ConfigError:
            continue
        accepted.append(length)
        limit = JS_SAFE_MAX if js_safe else BIGINT_MAX
        assert gen.max_value <= limit
        assert gen.max_value == gen.compose(gen.last_day, 10**gen.counter_digits - 1)
        assert gen.last_day >= HORIZON
        if gen.last_day < gen.first_day.max and gen.last_day != date(2099, 12, 31):
            after = gen.last_day + timedelta(days=1)  # the format could go on: the limit stops it
            assert gen.compose(after, 10**gen.counter_digits - 1) > limit
    assert accepted == list(range(max(8, FORMATS[fmt] + 1), accepted[-1] + 1))


def test_a_day_past_what_the_format_covers_is_exhausted_not_wrapped(ids: RedisIds) -> None:
    gen = ids.date_prefixed("yy", fmt="YYMMDD", length=12)
    shift_to(gen, utc(2100, 1, 1, 12))
    with pytest.raises(SequenceExhausted, match="2000-01-01 to 2099-12-31"):
        gen.next_id()


def test_same_options_give_the_same_generator_and_others_are_refused(ids: RedisIds) -> None:
    assert ids.date_prefixed("inv") is ids.date_prefixed("inv")
    with pytest.raises(ConfigError, match="already exists"):
        ids.date_prefixed("inv", length=18)


def test_a_changed_length_on_a_used_namespace_is_caught_by_the_node(backend: Backend) -> None:
    backend.ids().date_prefixed("inv").next_id()
    with pytest.raises(ConfigError, match="length=18"):
        backend.ids().date_prefixed("inv", length=18).next_id()


# -- exhaustion --------------------------------------------------------------------------------


def test_a_small_counter_is_exhausted_and_never_grows_a_digit(ids: RedisIds) -> None:
    gen = ids.date_prefixed("small", length=10)  # two counter digits: 01 … 99
    values = gen.next_ids(90) + [gen.next_id() for _ in range(9)]
    assert len(set(values)) == 99
    assert all(len(str(v)) == 10 for v in values)
    assert gen.parse(values[-1]).counter == 99
    with pytest.raises(SequenceExhausted) as caught:
        gen.next_id()
    assert caught.value.namespace == "small"


def test_an_exhausting_batch_takes_nothing(ids: RedisIds) -> None:
    gen = ids.date_prefixed("small", length=10)
    gen.next_ids(95)
    with pytest.raises(SequenceExhausted):
        gen.next_ids(5)
    assert [gen.parse(v).counter for v in gen.next_ids(4)] == [96, 97, 98, 99]


def test_an_exhausted_day_does_not_stop_the_next_day(ids: RedisIds) -> None:
    gen = ids.date_prefixed("small", length=10)
    shift_to(gen, utc(2031, 5, 5, 23, 50))
    gen.next_ids(99)
    with pytest.raises(SequenceExhausted):
        gen.next_id()
    shift_to(gen, utc(2031, 5, 6, 0, 10))
    assert gen.next_id() == 20310506_01


# -- midnight and time zones -------------------------------------------------------------------


def test_midnight_crossed_through_the_seam_restarts_the_counter(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices", tz="Europe/Paris")
    day = date(2029, 8, 14)
    shift_to_local(gen, day, time(23, 59, 0))
    before = [*gen.next_ids(3), gen.next_id()]
    shift_to_local(gen, day + timedelta(days=1), time(0, 1, 0))
    after = [*gen.next_ids(2), gen.next_id()]
    assert duplicates(before + after) == {}
    assert [(gen.parse(v).day, gen.parse(v).counter) for v in before] == [
        (day, c) for c in (1, 2, 3, 4)
    ]
    assert [(gen.parse(v).day, gen.parse(v).counter) for v in after] == [
        (day + timedelta(days=1), c) for c in (1, 2, 3)
    ]


@pytest.mark.parametrize(
    ("tz", "instant", "day"),
    [
        # 16:30 UTC is already the next day in Shanghai (UTC+8, no DST).
        ("UTC", utc(2030, 11, 22, 16, 30), date(2030, 11, 22)),
        ("Asia/Shanghai", utc(2030, 11, 22, 15, 58), date(2030, 11, 22)),
        ("Asia/Shanghai", utc(2030, 11, 22, 16, 2), date(2030, 11, 23)),
        # Europe/Berlin springs forward on 2030-03-31 (a 23-hour day) …
        ("Europe/Berlin", utc(2030, 3, 30, 22, 58), date(2030, 3, 30)),
        ("Europe/Berlin", utc(2030, 3, 30, 23, 2), date(2030, 3, 31)),
        ("Europe/Berlin", utc(2030, 3, 31, 21, 58), date(2030, 3, 31)),
        ("Europe/Berlin", utc(2030, 3, 31, 22, 2), date(2030, 4, 1)),
        # … and falls back on 2030-10-27 (a 25-hour day).
        ("Europe/Berlin", utc(2030, 10, 26, 21, 58), date(2030, 10, 26)),
        ("Europe/Berlin", utc(2030, 10, 26, 22, 2), date(2030, 10, 27)),
        ("Europe/Berlin", utc(2030, 10, 27, 22, 58), date(2030, 10, 27)),
        ("Europe/Berlin", utc(2030, 10, 27, 23, 2), date(2030, 10, 28)),
        # America/New_York: a DST zone west of UTC.
        ("America/New_York", utc(2030, 3, 10, 4, 58), date(2030, 3, 9)),
        ("America/New_York", utc(2030, 3, 10, 5, 2), date(2030, 3, 10)),
        ("America/New_York", utc(2030, 3, 11, 3, 58), date(2030, 3, 10)),
        ("America/New_York", utc(2030, 3, 11, 4, 2), date(2030, 3, 11)),
    ],
)
def test_the_day_follows_the_time_zone_through_dst(
    ids: RedisIds, tz: str, instant: object, day: date
) -> None:
    gen = ids.date_prefixed("tz", tz=tz)
    shift_to(gen, instant)  # type: ignore[arg-type]
    block = gen._take_block(1)
    assert block.day == day
    assert gen.parse(block.values[0]).day == day
    length_hours = {date(2030, 3, 31): 23, date(2030, 10, 27): 25}.get(day, 24)
    if tz == "Europe/Berlin":
        start = block.day_end_ms - day_end_ms(gen, day - timedelta(days=1))
        assert start == length_hours * 3_600_000


def test_a_window_far_from_the_redis_time_is_recentred(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices")
    gen.clock.recenter(0)  # a window around 1970: the script reports the miss, Python recentres
    assert gen.parse(gen.next_id()).day == seen_today(gen)


# -- purging, precreating, reseeding ---------------------------------------------------------


@pytest.mark.parametrize("strategy", ["date_prefixed", "daily_code"])
def test_a_day_whose_purge_has_begun_is_refused_by_a_running_generator(
    backend: Backend, strategy: str
) -> None:
    """A purge raises the marker before it deletes the days: from that moment a generator that
    is drawing from the day (the scripts' fast path) is refused, although the counter is still
    there."""
    gen = getattr(backend.ids(), strategy)("invoices")
    day = date(2032, 1, 10)
    shift_to_local(gen, day, time(12))
    gen.next_ids(2)
    gen.next_id()
    backend.client.set(gen.purge_key, day.strftime("%Y%m%d"))
    with pytest.raises(DayPurged):
        gen.next_id()


@pytest.mark.parametrize("strategy", ["date_prefixed", "daily_code"])
def test_a_call_on_the_last_day_of_the_window_moves_the_window_on(
    backend: Backend, strategy: str
) -> None:
    """The script tells a call that lands on the last day of its window the Redis time (no
    one-integer reply there), so the window follows the day without a refused call."""
    gen = getattr(backend.ids(), strategy)("invoices")
    day = date(2032, 1, 10)
    shift_to_local(gen, day, time(12))
    gen.next_id()
    gen.next_id()
    assert gen.clock.days == [day - timedelta(days=1), day, day + timedelta(days=1)]
    other = getattr(backend.ids(), strategy)("invoices")  # another process opens the day
    shift_to_local(other, day + timedelta(days=1), time(0, 5))
    other.next_id()
    # Redis time moves on past midnight; the window stays where the last reply put it
    after_midnight = datetime.combine(day + timedelta(days=1), time(0, 5), tzinfo=gen.clock.tz)
    gen.redis_clock.shift_ms = int(after_midnight.timestamp() * 1000) - redis_time_ms(gen)
    assert gen.parse(gen.next_id()).day == day + timedelta(days=1)
    assert gen.clock.days == [day, day + timedelta(days=1), day + timedelta(days=2)]


def test_a_purged_day_is_refused_and_the_marker_never_goes_down(backend: Backend) -> None:
    gen = backend.ids().date_prefixed("invoices")
    day = date(2032, 1, 10)
    for d in (day - timedelta(days=2), day - timedelta(days=1), day):
        shift_to_local(gen, d, time(12))
        gen.next_ids(2)
    assert gen.purge_before(day) == [day - timedelta(days=2), day - timedelta(days=1)]
    assert gen.purged_through() == day - timedelta(days=1)
    assert gen.days_present() == [day]
    assert gen.purge_before(day - timedelta(days=5)) == []
    assert gen.purged_through() == day - timedelta(days=1), "the marker is never lowered"
    shift_to_local(gen, day - timedelta(days=1), time(23, 30))  # a late writer on a purged day
    with pytest.raises(DayPurged) as caught:
        gen.next_id()
    assert caught.value.namespace == "invoices"
    with pytest.raises(DayPurged):
        gen.precreate(day - timedelta(days=1))
    with pytest.raises(DayPurged):
        gen.ensure_at_least(gen.compose(day - timedelta(days=1), 50))
    assert gen.days_present() == [day], "nothing re-created the purged day"
    shift_to_local(gen, day, time(13))
    assert gen.parse(gen.next_id()).counter == 3


def test_precreate_makes_a_day_ready_once(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices")
    day = date(2033, 7, 1)
    assert gen.precreate(day) is True
    assert gen.precreate(day) is False
    assert day in gen.days_present()
    shift_to_local(gen, day, time(0, 5))
    assert gen.parse(gen.next_id()).counter == 1


def test_ensure_at_least_raises_the_days_counter_and_never_lowers_it(ids: RedisIds) -> None:
    gen = ids.date_prefixed("invoices")
    day = date(2033, 7, 2)
    shift_to_local(gen, day, time(9))
    gen.next_ids(3)
    ((_, before, after),) = gen.ensure_at_least(gen.compose(day, 500))
    assert (before, after) == (3, 500)
    ((_, before, after),) = gen.ensure_at_least(gen.compose(day, 20))
    assert (before, after) == (500, 500), "a lower value leaves the counter alone"
    assert gen.parse(gen.next_id()).counter == 501
    other = day + timedelta(days=1)
    gen.ensure_at_least(gen.compose(other, 9))  # a day without a counter yet is created
    shift_to_local(gen, other, time(9))
    assert gen.parse(gen.next_id()).counter == 10


# -- parsing -----------------------------------------------------------------------------------


@cache
def _generator(fmt: str, length: int, start: int, js_safe: bool) -> DatePrefixedGenerator:
    return RedisIds.embedded().date_prefixed(
        "p", fmt=fmt, length=length, start=start, js_safe=js_safe
    )


@st.composite
def configured(draw: st.DrawFn) -> DatePrefixedGenerator:
    fmt = draw(st.sampled_from(list(FORMATS)))
    js_safe = draw(st.booleans())
    longest = {(True, True): 16, (True, False): 15, (False, True): 19, (False, False): 18}
    full_year = fmt.startswith("YYYY")
    length = draw(st.integers(max(8, FORMATS[fmt] + 1), longest[js_safe, full_year]))
    start = draw(st.integers(0, min(5, 10 ** (length - FORMATS[fmt]) - 1)))
    return _generator(fmt, length, start, js_safe)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), gen=configured())
def test_compose_and_parse_round_trip_within_bounds(
    data: st.DataObject, gen: DatePrefixedGenerator
) -> None:
    day = data.draw(st.dates(gen.first_day, gen.last_day))
    counter = data.draw(st.integers(gen.start, 10**gen.counter_digits - 1))
    value = gen.compose(day, counter)
    assert 0 <= value <= gen.max_value
    assert len(str(value)) <= gen.length
    parts = gen.parse(value)
    assert (parts.day, parts.counter, parts.value) == (day, counter, value)


@settings(max_examples=150, deadline=None)
@given(gen=configured(), value=st.integers(0, BIGINT_MAX))
def test_parse_accepts_exactly_the_values_compose_makes(
    gen: DatePrefixedGenerator, value: int
) -> None:
    try:
        parts = gen.parse(value)
    except ValueError:
        return
    assert gen.compose(parts.day, parts.counter) == value


def test_parse_refuses_what_is_not_a_value() -> None:
    gen = _generator("YYYYMMDD", 12, 1, False)
    for bad in [-1, 10**12, 2026_13_01_0001, 2026_02_30_0001, 2026_11_22_0000, "202611220001"]:
        with pytest.raises(ValueError):
            gen.parse(bad)  # type: ignore[arg-type]
    ddd = _generator("YYYYDDD", 12, 1, False)
    with pytest.raises(ValueError, match="day of year 366"):
        ddd.parse(2026_366_00001)
    assert ddd.parse(2028_366_00001).day == date(2028, 12, 31)


# -- nodes, threads, processes -----------------------------------------------------------------


def test_three_nodes_issue_disjoint_counters_of_the_same_day(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    gen = RedisIds.from_urls([s.url for s in servers]).date_prefixed("invoices", length=12)
    values = [gen.next_id() for _ in range(30)] + gen.next_ids(30) + gen.next_ids(31)
    assert duplicates(values) == {}
    parts = [gen.parse(v) for v in values]
    assert {p.day for p in parts} == {seen_today(gen)}
    assert {p.node_index for p in parts} == {0, 1, 2}
    assert all((p.counter - 1) % 3 == p.node_index for p in parts)


def test_three_nodes_exhaust_a_small_counter_without_sharing_a_value(
    redis_servers: StartServers,
) -> None:
    servers = redis_servers(3)
    gen = RedisIds.from_urls([s.url for s in servers]).date_prefixed("small", length=10)
    values: list[int] = []
    with pytest.raises(SequenceExhausted):
        for _ in range(200):
            values.append(gen.next_id())
    assert duplicates(values) == {}
    assert all(len(str(v)) == 10 for v in values)
    assert max(gen.parse(v).counter for v in values) <= 99


def test_processes_and_threads_never_share_a_value(real_backend: Backend) -> None:
    spec = real_backend.spec("date_prefixed", "invoices", tz="Asia/Shanghai")
    values = draw_in_processes(spec, processes=2, threads=4, per_thread=300)
    assert len(values) == 2 * 4 * 300
    assert duplicates(values) == {}


def test_processes_on_three_nodes_never_share_a_value(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    spec = GeneratorSpec(
        {"urls": [s.url for s in servers]}, "dp", "date_prefixed", "invoices", batch=7
    )
    values = draw_in_processes(spec, processes=2, threads=4, per_thread=300)
    assert len(values) == 2 * 4 * 300
    assert duplicates(values) == {}


def test_day_zero_of_year_one_is_not_a_value() -> None:
    gen = RedisIds.embedded().date_prefixed("p", fmt="YYYYDDD", length=8, start=0)
    with pytest.raises(ValueError, match="day of year 0"):
        gen.parse(10000)  # "0001" + "000" + "0": before date.min, not an OverflowError
