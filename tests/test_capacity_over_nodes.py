"""A namespace's whole capacity is reachable over N nodes, whatever the sizes of its calls.

Node k of N issues only its residue class, so a day's 99 codes are 50 on one node and 49 on the
other; a batch that fits in neither remainder takes what is left on each.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest

from sa_redis_ids import RedisIds, SequenceExhausted
from tests.support.servers import RedisServer


def alternate_until_exhausted(generator: Any) -> tuple[list[Any], int]:
    """Draw ``next_ids(5)``, ``next_id()``, … until a single value is refused; the values and
    how many batches were refused on the way (a batch larger than what is left)."""
    got: list[Any] = []
    refused = 0
    while True:
        try:
            got += generator.next_ids(5)
        except SequenceExhausted:
            refused += 1
        try:
            got.append(generator.next_id())
        except SequenceExhausted:
            return got, refused


@pytest.fixture(params=["fake", "redis"])
def two_nodes(
    request: pytest.FixtureRequest, redis_servers: Callable[[int], list[RedisServer]]
) -> Iterator[RedisIds]:
    """A RedisIds over two independent nodes: two embedded servers, or two redis-server
    processes of this test alone."""
    if request.param == "fake":
        ids = RedisIds([fakeredis.FakeRedis(server=fakeredis.FakeServer()) for _ in range(2)])
    else:
        ids = RedisIds.from_urls([server.url for server in redis_servers(2)])
    yield ids
    ids.close()


def test_a_99_a_day_code_over_two_nodes_issues_all_99(two_nodes: RedisIds) -> None:
    codes = two_nodes.daily_code("codes", digits=2)
    got, refused = alternate_until_exhausted(codes)
    assert len(got) == 99
    assert len(set(got)) == 99
    assert sorted(int(code[-2:]) for code in got) == list(range(1, 100))
    assert refused == 4  # 3, 2, 1, 0 left: refused with nothing taken (the singles took them)


def test_a_date_prefixed_day_over_two_nodes_issues_every_counter(two_nodes: RedisIds) -> None:
    numbers = two_nodes.date_prefixed("numbers", fmt="YYYYMMDD", length=10)
    got, _ = alternate_until_exhausted(numbers)
    assert len(got) == len(set(got)) == 99


def test_a_batch_larger_than_every_remainder_takes_from_each_node(two_nodes: RedisIds) -> None:
    codes = two_nodes.daily_code("codes", digits=2)
    codes.next_ids(40)  # one node: 40 of its 50 or 49
    codes.next_ids(40)  # the other node
    rest = codes.next_ids(19)  # 10 + 9: no node holds 19
    assert len(set(rest)) == 19
    with pytest.raises(SequenceExhausted):
        codes.next_id()


def test_a_batch_over_what_is_left_takes_nothing(two_nodes: RedisIds) -> None:
    codes = two_nodes.daily_code("codes", digits=2)
    first = codes.next_ids(97)
    with pytest.raises(SequenceExhausted, match="2 value"):
        codes.next_ids(3)
    last = codes.next_ids(2)
    assert len(set(first + last)) == 99


def test_maintenance_runs_on_two_databases_of_one_server(
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    (server,) = redis_servers(1)
    base = server.url.removesuffix("/0")
    ids = RedisIds.from_urls([f"{base}/0", f"{base}/1"])
    codes = ids.daily_code("codes", digits=2)
    codes.next_ids(3)
    job = ids.maintenance(keep_days=3, precreate_days=1)
    try:
        first = job.run_once()
        assert not first.skipped, first.reason
        assert first.ok, first.errors
        assert first.created  # tomorrow's counters, on both databases
        job.release_lease()
        other = ids.maintenance(keep_days=3, precreate_days=1)
        assert not other.run_once().skipped  # the lease was given up: another run works
    finally:
        ids.close()


def test_maintenance_on_two_databases_is_exclusive(
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    """Two instances over /0 and /1 of one server: one holds the lease, the other skips."""
    (server,) = redis_servers(1)
    base = server.url.removesuffix("/0")
    one, two = (RedisIds.from_urls([f"{base}/0", f"{base}/1"]) for _ in range(2))
    try:
        for ids in (one, two):
            ids.daily_code("codes", digits=2)
        assert not one.maintenance().run_once().skipped
        held = two.maintenance().run_once()
        assert held.skipped
        assert held.reason == "another instance holds the maintenance lock"
    finally:
        one.close()
        two.close()
