"""``id_range(start, end)``: the inclusive bounds of every ID a time-ordered generator can issue for
a time in ``[start, end)``, for ``Model.id.between(*generator.id_range(start, end))``.

Snowflake: an ID is in the bounds exactly when ``start <= parse(id).timestamp < end``.
DatePrefixed: exactly when its local day (in the generator's ``tz``) meets ``[start, end)``.
Property tests check that against ``parse()``/``compose()``; database tests draw IDs at chosen
Redis times (``shift_to``), insert them through the ORM into SQLite and PostgreSQL, and query by
time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import date, datetime, time, timedelta, timezone
from functools import cache
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import BigInteger, String, create_engine, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import ConfigError, RedisIds, SnowflakeLayout, redis_id
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.generators.day_window import day_start_ms, zone
from sa_redis_ids.generators.snowflake import LAYOUTS, UNIX_EPOCH
from tests.conftest import Backend
from tests.support.days import shift_to, utc

SHANGHAI = zone("Asia/Shanghai")

EMPTY = (1, 0)


@pytest.fixture
def ids() -> RedisIds:
    """The embedded Redis: these tests make no Redis call, or only on the embedded one."""
    return RedisIds.embedded()


def at_us(us: int, tz: timezone | Any = timezone.utc) -> datetime:
    """The aware datetime ``us`` microseconds after 1970, shown in ``tz``."""
    return (UNIX_EPOCH + timedelta(microseconds=us)).astimezone(tz)


OFFSETS = st.sampled_from(
    [
        timezone.utc,
        timezone(timedelta(hours=8)),
        timezone(timedelta(hours=-5, minutes=-30)),
        SHANGHAI,
    ]
)
"""The zone a bound is written in: the instant is what counts."""


# -- snowflake: the bounds against parse() -------------------------------------------------------

SNOWFLAKE_LAYOUTS = [
    LAYOUTS["default"],
    LAYOUTS["js_safe"],
    LAYOUTS["compat"],
    SnowflakeLayout(epoch_ms=1_700_000_000_123, time_bits=36, shard_bits=5, sequence_bits=3),
    SnowflakeLayout(epoch_ms=0, time_bits=44, shard_bits=0, sequence_bits=1),
]


@given(data=st.data())
def test_snowflake_bounds_hold_exactly_the_ids_whose_time_is_in_the_range(data: Any) -> None:
    layout = data.draw(st.sampled_from(SNOWFLAKE_LAYOUTS))
    last_ms = layout.epoch_ms + layout.max_ms
    ms = data.draw(
        st.one_of(
            st.integers(layout.epoch_ms, last_ms),
            st.sampled_from([layout.epoch_ms, layout.epoch_ms + 1, last_ms - 1, last_ms]),
        )
    )
    value = layout.compose(
        ms,
        data.draw(st.integers(0, layout.max_shard)),
        data.draw(st.integers(0, layout.max_sequence)),
    )
    start_us = ms * 1000 + data.draw(st.integers(-3000, 3000))
    end_us = start_us + data.draw(st.integers(0, 6000))
    start, end = at_us(start_us, data.draw(OFFSETS)), at_us(end_us, data.draw(OFFSETS))
    inside = start_us <= layout.parse(value).ms * 1000 < end_us
    try:
        low, high = layout.id_range(start, end)
    except ConfigError as exc:
        assert not inside
        assert end_us <= layout.epoch_ms * 1000 or start_us > last_ms * 1000, exc
        return
    assert (low <= value <= high) == inside
    if low > high:
        assert (low, high) == EMPTY
        return
    assert 0 <= low <= high <= layout.max_value
    assert start <= layout.parse(low).timestamp < end
    assert start <= layout.parse(high).timestamp < end
    assert layout.parse(low).shard == layout.parse(low).sequence == 0
    assert layout.parse(high).shard == layout.max_shard
    assert layout.parse(high).sequence == layout.max_sequence
    if low > 0:  # the ID just below is of an earlier millisecond, outside the range
        assert layout.parse(low - 1).timestamp < start
    if high < layout.max_value:
        assert layout.parse(high + 1).timestamp >= end


def test_snowflake_range_of_one_hour_is_every_shard_and_sequence_of_its_milliseconds() -> None:
    layout = LAYOUTS["default"]
    start = utc(2026, 11, 22, 10)
    low, high = layout.id_range(start, start + timedelta(hours=1))
    first_ms = int(start.timestamp() * 1000)
    assert low == layout.compose(first_ms, 0, 0)
    assert high == layout.compose(first_ms + 3_600_000 - 1, layout.max_shard, layout.max_sequence)
    # Written in another zone, the same instants give the same bounds.
    assert layout.id_range(start.astimezone(SHANGHAI), start + timedelta(hours=1)) == (low, high)


def test_snowflake_range_is_cut_to_the_layout_and_refused_wholly_outside_it() -> None:
    layout = LAYOUTS["default"]
    epoch = layout.epoch
    assert layout.id_range(epoch - timedelta(days=3), epoch + timedelta(milliseconds=1)) == (
        0,
        layout.compose(layout.epoch_ms, layout.max_shard, layout.max_sequence),
    )
    assert layout.id_range(epoch, datetime.max.replace(tzinfo=timezone.utc))[1] == (
        layout.max_value
    )
    with pytest.raises(ConfigError, match=r"no ID of this layout has a time in \[2025-01-01.*"):
        layout.id_range(utc(2025, 1, 1), epoch)
    with pytest.raises(ConfigError, match=r"its IDs run from 2026-01-01 00:00:00 UTC .* to before"):
        layout.id_range(layout.runs_out_at, layout.runs_out_at + timedelta(days=1))


def test_snowflake_empty_ranges_match_nothing() -> None:
    layout = LAYOUTS["default"]
    start = utc(2026, 6, 1, 12)
    assert layout.id_range(start, start) == EMPTY
    # Within one millisecond, after its start: no millisecond begins in the range.
    inner = start + timedelta(microseconds=200)
    assert layout.id_range(inner, inner + timedelta(microseconds=700)) == EMPTY
    # From a millisecond's start, however short: that millisecond.
    low, high = layout.id_range(start, start + timedelta(microseconds=1))
    assert layout.parse(low).ms == layout.parse(high).ms == int(start.timestamp() * 1000)


@pytest.mark.parametrize(
    ("start", "end", "error", "message"),
    [
        (
            datetime(2026, 6, 1),
            utc(2026, 6, 2),
            ConfigError,
            r"start=2026-06-01T00:00:00 is a naive",
        ),
        (utc(2026, 6, 1), datetime(2026, 6, 2), ConfigError, r"end=2026-06-02T00:00:00 is a naive"),
        (
            date(2026, 6, 1),
            utc(2026, 6, 2),
            TypeError,
            r"start must be an aware datetime, not date",
        ),
        (utc(2026, 6, 1), "2026-06-02", TypeError, r"end must be an aware datetime, not str"),
        (1_790_000_000, utc(2026, 6, 2), TypeError, r"not int"),
        (
            utc(2026, 6, 2),
            utc(2026, 6, 1),
            ConfigError,
            r"end=2026-06-01T00:00:00\+00:00 is before",
        ),
    ],
)
def test_snowflake_refuses_what_is_no_range(
    ids: RedisIds, start: Any, end: Any, error: type[Exception], message: str
) -> None:
    gen = ids.snowflake("orders")
    with pytest.raises(error, match=message):
        gen.id_range(start, end)


def test_snowflake_generator_errors_name_the_namespace(ids: RedisIds) -> None:
    with pytest.raises(ConfigError, match=r"namespace=orders"):
        ids.snowflake("orders").id_range(utc(2025, 1, 1), utc(2025, 2, 1))


# -- date_prefixed: the bounds against compose() and parse() ------------------------------------


@cache
def dp_generators() -> list[DatePrefixedGenerator]:
    ids = RedisIds.embedded()
    return [
        ids.date_prefixed("a"),
        ids.date_prefixed("b", fmt="YYMMDD", length=12, tz="Asia/Shanghai", start=0),
        ids.date_prefixed("c", fmt="YYYYDDD", length=16, tz="America/New_York", start=5),
        ids.date_prefixed("d", fmt="YYDDD", length=10, tz="Australia/Lord_Howe"),
        ids.date_prefixed("e", fmt="YYYYMMDD", length=16, js_safe=True, tz="Asia/Kathmandu"),
    ]


def local_start_us(gen: DatePrefixedGenerator, day: date) -> int:
    return day_start_ms(day, gen.clock.tz) * 1000


@given(data=st.data())
def test_date_prefixed_bounds_hold_exactly_the_values_of_the_days_the_range_meets(
    data: Any,
) -> None:
    gen = data.draw(st.sampled_from(dp_generators()))
    day = data.draw(st.dates(date(2000, 1, 3), date(2099, 12, 28)))
    value = gen.compose(day, data.draw(st.integers(gen.start, 10**gen.counter_digits - 1)))
    assert gen.parse(value).day == day

    def bound(what: str) -> tuple[Any, int]:
        """A date (a local midnight) or an aware datetime within a few days of ``day``."""
        if data.draw(st.booleans(), label=f"{what} is a date"):
            found = day + timedelta(days=data.draw(st.integers(-2, 2)))
            return found, local_start_us(gen, found)
        near = day + timedelta(days=data.draw(st.integers(-2, 2)))
        seconds = st.one_of(  # a local midnight often: the edge of a day
            st.just(0), st.integers(-3, 3).map(lambda h: h * 3600), st.integers(-86400, 86400)
        )
        us = local_start_us(gen, near) + data.draw(seconds) * 10**6
        us += data.draw(st.sampled_from([0, 0, 1, -1, 999_999]))
        return at_us(us, data.draw(OFFSETS)), us

    (start, start_us), (end, end_us) = bound("start"), bound("end")
    if end_us < start_us:
        with pytest.raises(ConfigError, match=r"is before start="):
            gen.id_range(start, end)
        return
    low, high = gen.id_range(start, end)
    day_from, day_to = local_start_us(gen, day), local_start_us(gen, day + timedelta(days=1))
    meets = start_us < end_us and start_us < day_to and end_us > day_from
    assert (low <= value <= high) == meets
    if start_us == end_us:
        assert (low, high) == EMPTY
        return
    first, last = gen.parse(low), gen.parse(high)
    assert first.counter == gen.start
    assert last.counter == 10**gen.counter_digits - 1
    assert (
        local_start_us(gen, first.day)
        <= start_us
        < local_start_us(gen, first.day + timedelta(days=1))
    )
    assert (
        local_start_us(gen, last.day) < end_us <= local_start_us(gen, last.day + timedelta(days=1))
    )


def test_date_prefixed_dates_are_whole_local_days(ids: RedisIds) -> None:
    gen = ids.date_prefixed("orders", tz="Asia/Shanghai")
    today = date(2026, 11, 22)
    yesterday = today - timedelta(days=1)
    assert gen.id_range(today, today + timedelta(days=1)) == (
        2026_11_22_00000000001,
        2026_11_22_99999999999,
    )
    assert gen.id_range(yesterday, today + timedelta(days=1)) == (
        2026_11_21_00000000001,
        2026_11_22_99999999999,
    )
    # 23:30 to 00:30 in Shanghai meets two local days, written in UTC or in Shanghai.
    late = datetime.combine(yesterday, time(23, 30), tzinfo=SHANGHAI)
    expected = (2026_11_21_00000000001, 2026_11_22_99999999999)
    assert gen.id_range(late, late + timedelta(hours=1)) == expected
    assert gen.id_range(late.astimezone(timezone.utc), late + timedelta(hours=1)) == expected
    # An hour within a day: the day's values, for that is all a value knows of its time.
    assert gen.id_range(late - timedelta(hours=2), late - timedelta(hours=1)) == (
        2026_11_21_00000000001,
        2026_11_21_99999999999,
    )
    # A date mixes with a datetime; an end at a local midnight excludes the day it starts.
    midnight = datetime.combine(today, time(), tzinfo=SHANGHAI)
    assert gen.id_range(yesterday, midnight) == gen.id_range(yesterday, today)
    assert gen.id_range(today, today) == EMPTY


def test_date_prefixed_range_is_cut_to_its_days_and_refused_outside_them(ids: RedisIds) -> None:
    gen = ids.date_prefixed("codes", fmt="YYMMDD", length=12)
    assert gen.day_range() == (date(2000, 1, 1), date(2099, 12, 31))
    assert gen.id_range(date(1999, 12, 30), date(2000, 1, 2)) == (
        gen.compose(date(2000, 1, 1), 1),
        gen.compose(date(2000, 1, 1), 999_999),
    )
    assert gen.id_range(date(2099, 12, 31), date(2100, 6, 1))[1] == gen.max_value
    with pytest.raises(
        ConfigError,
        match=r"no value of fmt=YYMMDD with length=12 falls in \[1999-01-01, 1999-06-01\): that is "
        r"1999-01-01 to 1999-05-31 in UTC, and its values cover the days 2000-01-01 to 2099-12-31 "
        r"\(namespace=codes\)",
    ):
        gen.id_range(date(1999, 1, 1), date(1999, 6, 1))
    with pytest.raises(ConfigError, match=r"cover the days 2000-01-01 to 2099-12-31"):
        gen.id_range(utc(2100, 1, 1, 12), utc(2100, 1, 1, 13))
    wide = ids.date_prefixed("wide")
    assert wide.id_range(datetime.min.replace(tzinfo=timezone.utc), date(1000, 1, 2))[0] == (
        wide.compose(wide.day_range()[0], 1)
    )
    assert wide.id_range(date(9000, 1, 1), datetime.max.replace(tzinfo=timezone.utc))[1] == (
        wide.max_value
    )


@pytest.mark.parametrize(
    ("start", "end", "error", "message"),
    [
        (
            datetime(2026, 6, 1, 8),
            date(2026, 6, 2),
            ConfigError,
            r"start=2026-06-01T08:00:00 is a naive",
        ),
        (
            date(2026, 6, 1),
            datetime(2026, 6, 2),
            ConfigError,
            r"end=2026-06-02T00:00:00 is a naive",
        ),
        (
            "2026-06-01",
            date(2026, 6, 2),
            TypeError,
            r"start must be an aware datetime or a date, not str",
        ),
        (
            date(2026, 6, 1),
            20260602,
            TypeError,
            r"end must be an aware datetime or a date, not int",
        ),
        (
            date(2026, 6, 2),
            date(2026, 6, 1),
            ConfigError,
            r"end=2026-06-01 is before start=2026-06-02",
        ),
        (
            datetime(2026, 6, 2, tzinfo=SHANGHAI),
            date(2026, 6, 1),
            ConfigError,
            r"is before start",
        ),
    ],
)
def test_date_prefixed_refuses_what_is_no_range(
    ids: RedisIds, start: Any, end: Any, error: type[Exception], message: str
) -> None:
    gen = ids.date_prefixed("orders", tz="Asia/Shanghai")
    with pytest.raises(error, match=message):
        gen.id_range(start, end)


def test_asyncio_generators_have_id_range() -> None:
    aids = AsyncRedisIds.embedded()
    sync = RedisIds.embedded()
    start, end = utc(2026, 6, 1), utc(2026, 6, 2)
    assert aids.snowflake("s").id_range(start, end) == sync.snowflake("s").id_range(start, end)
    assert aids.date_prefixed("d").id_range(start, end) == (
        sync.date_prefixed("d").id_range(start, end)
    )


# -- queries by time in SQLite and PostgreSQL ---------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'id_range.sqlite3'}"
    else:
        url = request.getfixturevalue("postgresql_url")
    engine = create_engine(url)
    yield engine
    engine.dispose()


def order_model(generator: Any) -> tuple[type[DeclarativeBase], Any]:
    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = f"orders_{uuid.uuid4().hex[:8]}"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(generator)
        )
        label: Mapped[str] = mapped_column(String(40))

    return Base, Order


def insert_at(engine: Engine, generator: Any, model: Any, placed: dict[str, datetime]) -> None:
    """One row per label, each flushed with the Redis clock at its time (in time order)."""
    with Session(engine) as session:
        for label, when in sorted(placed.items(), key=lambda item: item[1]):
            shift_to(generator, when)
            session.add(model(label=label))
            session.flush()
        session.commit()


def labels_between(engine: Engine, model: Any, bounds: tuple[int, int]) -> set[str]:
    with Session(engine) as session:
        found = session.scalars(select(model.label).where(model.id.between(*bounds)))
        return set(found)


DAY = date(2027, 3, 10)
"""'Today' for the database tests: the Redis clock is moved there, away from any real midnight."""


def local(day: date, hour: int, minute: int = 0, tz: Any = timezone.utc) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=tz)


@pytest.mark.parametrize("backend", ["fake", "redis"], indirect=True)
def test_snowflake_rows_of_yesterday_today_and_an_hour(backend: Backend, db: Engine) -> None:
    gen = backend.ids().snowflake("orders")
    base, order = order_model(gen)
    base.metadata.create_all(db)
    yesterday, tomorrow = DAY - timedelta(days=1), DAY + timedelta(days=1)
    placed = {
        "y-morning": local(yesterday, 8),
        "y-late": local(yesterday, 23, 50),
        "t-early": local(DAY, 0, 10),
        "t-10:20": local(DAY, 10, 20),
        "t-10:40": local(DAY, 10, 40),
        "t-11:20": local(DAY, 11, 20),
        "tomorrow": local(tomorrow, 0, 30),
    }
    try:
        insert_at(db, gen, order, placed)
        with Session(db) as session:  # each row's ID says when it was drawn, give or take a second
            for row in session.scalars(select(order)):
                drift = gen.parse(row.id).timestamp - placed[row.label]
                assert timedelta(0) <= drift < timedelta(seconds=30), (row.label, drift)

        by_day = {
            yesterday: {"y-morning", "y-late"},
            DAY: {"t-early", "t-10:20", "t-10:40", "t-11:20"},
        }
        for day, expected in by_day.items():
            bounds = gen.id_range(local(day, 0), local(day + timedelta(days=1), 0))
            assert labels_between(db, order, bounds) == expected
        hour = gen.id_range(local(DAY, 10), local(DAY, 11))
        assert labels_between(db, order, hour) == {"t-10:20", "t-10:40"}
        # Written in Shanghai time: 18:00 to 19:00 there is 10:00 to 11:00 UTC.
        shanghai = gen.id_range(local(DAY, 18, tz=SHANGHAI), local(DAY, 19, tz=SHANGHAI))
        assert shanghai == hour
        assert labels_between(db, order, gen.id_range(local(DAY, 12), local(DAY, 12))) == set()
        everything = gen.id_range(local(yesterday, 0), local(tomorrow, 23))
        assert labels_between(db, order, everything) == set(placed)
    finally:
        base.metadata.drop_all(db)


@pytest.mark.parametrize("backend", ["fake", "redis"], indirect=True)
def test_date_prefixed_rows_of_yesterday_today_and_an_hour(backend: Backend, db: Engine) -> None:
    gen = backend.ids().date_prefixed("orders", tz="Asia/Shanghai")
    base, order = order_model(gen)
    base.metadata.create_all(db)
    yesterday, tomorrow = DAY - timedelta(days=1), DAY + timedelta(days=1)
    placed = {
        "y-morning": local(yesterday, 9, tz=SHANGHAI),
        "y-late": local(yesterday, 23, 50, tz=SHANGHAI),
        "t-early": local(DAY, 0, 10, tz=SHANGHAI),
        "t-10:20": local(DAY, 10, 20, tz=SHANGHAI),
        "t-11:20": local(DAY, 11, 20, tz=SHANGHAI),
        "tomorrow": local(tomorrow, 0, 30, tz=SHANGHAI),
    }
    try:
        insert_at(db, gen, order, placed)
        with Session(db) as session:
            days = {row.label: gen.parse(row.id).day for row in session.scalars(select(order))}
        assert days == {label: when.date() for label, when in placed.items()}

        today = {"t-early", "t-10:20", "t-11:20"}
        assert labels_between(db, order, gen.id_range(yesterday, DAY)) == {"y-morning", "y-late"}
        assert labels_between(db, order, gen.id_range(DAY, tomorrow)) == today
        # An hour of today (written in UTC: 02:00 to 03:00 is 10:00 to 11:00 in Shanghai) finds
        # all of today's rows: a date-prefixed value knows its day, not its hour.
        hour = gen.id_range(local(DAY, 2), local(DAY, 3))
        assert labels_between(db, order, hour) == today
        # 23:00 yesterday to 01:00 today, Shanghai time, meets both days.
        night = gen.id_range(local(yesterday, 23, tz=SHANGHAI), local(DAY, 1, tz=SHANGHAI))
        assert labels_between(db, order, night) == today | {"y-morning", "y-late"}
        # In UTC, DAY 00:00 to DAY+1 00:00 is 08:00 DAY to 08:00 DAY+1 in Shanghai.
        utc_day = gen.id_range(local(DAY, 0), local(tomorrow, 0))
        assert labels_between(db, order, utc_day) == today | {"tomorrow"}
    finally:
        base.metadata.drop_all(db)
