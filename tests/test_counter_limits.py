"""Counters and heals never store a value past the strategy's limit, so running out is always
:class:`SequenceExhausted`, call after call, and never a Redis error that leaves the namespace
broken until someone edits its key by hand.

Two ways once led there: a sequence starting at 0 raised to its last value (one node's counter for
value ``v`` is ``v + 1``, which for ``2^63 − 1`` is past what Redis holds as an integer), and a
floor above the strategy's last value healing the counter to that floor.
"""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest

from sa_redis_ids import RedisIds, SequenceExhausted
from sa_redis_ids.bounds import BIGINT_MAX
from tests.conftest import Backend

HUGE_FLOORS = [BIGINT_MAX, BIGINT_MAX + 1, 2**64, 2**70]


def _stored_numbers(backend: Backend) -> list[int]:
    """Every integer the test's keys hold (string values and hash fields)."""
    numbers: list[int] = []
    for key in backend.keys():  # noqa: SIM118 - Backend.keys() scans Redis
        kind = backend.client.type(key)
        if kind == b"string":
            values: list[Any] = [backend.client.get(key)]
        elif kind == b"hash":
            values = list(backend.client.hvals(key))
        else:
            continue
        numbers.extend(int(v) for v in values if v is not None and v.lstrip(b"-").isdigit())
    return numbers


def _exhausted_twice(take: Any) -> None:
    for _ in range(2):  # the namespace stays usable: the same typed answer every time
        with pytest.raises(SequenceExhausted):
            take()


def test_a_sequence_from_0_tops_out_one_below_bigint(ids: RedisIds) -> None:
    assert ids.sequence("zero", start=0).max_value == BIGINT_MAX - 1
    assert ids.sequence("one", start=1).max_value == BIGINT_MAX


@pytest.mark.parametrize("start", [0, 1, 5])
def test_a_sequence_raised_to_its_last_value_is_exhausted(backend: Backend, start: int) -> None:
    users = backend.ids().sequence("users", start=start)
    users.ensure_at_least(users.max_value)
    _exhausted_twice(users.next_id)
    _exhausted_twice(lambda: users.next_ids(3))
    assert max(_stored_numbers(backend)) <= BIGINT_MAX


def test_a_sequence_from_0_issues_its_last_values_then_is_exhausted(backend: Backend) -> None:
    users = backend.ids().sequence("users", start=0)
    users.ensure_at_least(users.max_value - 2)
    assert users.next_ids(2) == [users.max_value - 1, users.max_value]
    _exhausted_twice(users.next_id)
    assert max(_stored_numbers(backend)) <= BIGINT_MAX


@pytest.mark.parametrize("floor", HUGE_FLOORS, ids=lambda floor: f"floor{floor.bit_length()}b")
@pytest.mark.parametrize("start", [0, 1])
def test_a_sequence_whose_floor_is_past_its_limit_is_exhausted(
    backend: Backend, floor: int, start: int
) -> None:
    users = backend.ids().sequence("users", start=start, floor=lambda: floor)
    _exhausted_twice(users.next_id)
    assert max(_stored_numbers(backend)) <= BIGINT_MAX


@pytest.mark.parametrize("floor", HUGE_FLOORS[1:], ids=lambda floor: f"floor{floor.bit_length()}b")
def test_a_day_counter_whose_floor_is_past_its_limit_is_exhausted(
    backend: Backend, floor: int
) -> None:
    def day_floor(day: date) -> int:
        return floor

    invoices = backend.ids().date_prefixed("invoices", length=12, floor=day_floor)
    _exhausted_twice(invoices.next_id)
    assert max(_stored_numbers(backend), default=0) < 10**4
