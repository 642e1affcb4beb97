"""Order numbers and pickup codes follow the Redis clock, which the tests move."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sa_redis_ids import ClockMovedBackwards
from sqlalchemy.orm import Session

from shop.ids import TZ
from shop.models import Customer
from shop.orders import create_order


def label(day: date) -> str:
    return day.strftime("%Y%m%d")


def test_an_order_number_starts_with_the_local_day(session: Session, redis_clock) -> None:
    order = create_order(session, Customer(name="Ada"))
    today = label(redis_clock.today(TZ))
    assert str(order.id).startswith(today)
    assert order.pickup_code == f"PK{today}0001"
    assert order.events[0].id > 0


@pytest.mark.parametrize("run", [1, 2])
def test_every_test_starts_from_an_empty_redis(session: Session, run: int) -> None:
    customer = Customer(name=f"run {run}")
    session.add(customer)
    session.flush()
    assert customer.id == 1


def test_crossing_midnight_changes_the_prefix_and_restarts_the_code(
    session: Session, redis_clock
) -> None:
    new_day = redis_clock.to_midnight(TZ, before_ms=60_000)  # a minute before Shanghai midnight
    old_day = label(new_day - timedelta(days=1))
    customer = Customer(name="Ada")
    first = create_order(session, customer)
    second = create_order(session, customer)
    assert [first.pickup_code, second.pickup_code] == [f"PK{old_day}0001", f"PK{old_day}0002"]
    assert str(second.id).startswith(old_day)

    redis_clock.shift(120_000)  # past midnight
    third = create_order(session, customer)
    assert third.pickup_code == f"PK{label(new_day)}0001"
    assert str(third.id).startswith(label(new_day))
    assert third.id > second.id


def test_a_chosen_day(session: Session, redis_clock) -> None:
    redis_clock.set(datetime(2031, 2, 3, 9, 30, tzinfo=ZoneInfo(TZ)))
    order = create_order(session, Customer(name="Ada"))
    assert order.pickup_code == "PK203102030001"
    assert str(order.id).startswith("20310203")


def test_a_clock_going_back_beyond_the_tolerance_stops_events(
    session: Session, redis_clock
) -> None:
    create_order(session, Customer(name="Ada"))
    redis_clock.back(20)  # within tolerance_ms=50: IDs go on
    create_order(session, Customer(name="Bo"))

    redis_clock.back(10_000)  # far beyond it: the flush fails before anything is written
    with pytest.raises(ClockMovedBackwards):
        create_order(session, Customer(name="Cy"))
    session.rollback()

    redis_clock.reset()
    assert create_order(session, Customer(name="Di")).events[0].id > 0
