"""ShortId: random unique numbers from a bitmap pool; exhaustion, release, reserve, stats, nodes."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sa_redis_ids import ConfigError, RedisIds, SequenceExhausted, ShortIdStats
from sa_redis_ids.bounds import BIGINT_MAX
from sa_redis_ids.generators.short_id import MAX_POOL_SIZE
from sa_redis_ids.redis.connect import embedded_client
from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates

StartServers = Callable[[int], list[RedisServer]]


# -- options and the value ↔ (node, bit) mapping (no Redis calls) -----------------------------


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"pool_size": 0}, ["pool_size=0", f"from 1 to {MAX_POOL_SIZE}"]),
        ({"pool_size": MAX_POOL_SIZE + 1}, [f"pool_size={MAX_POOL_SIZE + 1}", "from 1 to"]),
        ({"offset": -1}, ["offset=-1", "from 0 to"]),
        ({"pool_size": 1.5}, ["pool_size must be an int"]),
        (
            {"offset": BIGINT_MAX - 5, "pool_size": 10},
            [f"offset={BIGINT_MAX - 5} with pool_size=10", f"at most {BIGINT_MAX - 9}"],
        ),
    ],
)
def test_bad_options_are_config_errors_naming_the_option(
    options: dict[str, object], names: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        RedisIds(embedded_client()).short_id("users", **options)  # type: ignore[arg-type]
    for name in names:
        assert name in str(caught.value)


def test_a_pool_smaller_than_the_node_count_is_config_error() -> None:
    ids = RedisIds([embedded_client() for _ in range(3)])
    with pytest.raises(ConfigError, match="pool_size=2 is smaller than the 3 nodes"):
        ids.short_id("users", pool_size=2)


def test_the_top_of_bigint_is_a_valid_pool() -> None:
    top = RedisIds(embedded_client()).short_id("top", pool_size=3, offset=BIGINT_MAX - 2)
    assert top.max_value == BIGINT_MAX
    assert sorted(top.next_ids(3)) == [BIGINT_MAX - 2, BIGINT_MAX - 1, BIGINT_MAX]


@given(
    nodes=st.integers(1, 5),
    pool_size=st.integers(5, 10_000),
    offset=st.integers(0, BIGINT_MAX - 10_000),
    data=st.data(),
)
def test_every_pool_value_has_exactly_one_owner_and_bit(
    nodes: int, pool_size: int, offset: int, data: st.DataObject
) -> None:
    ids = RedisIds([embedded_client() for _ in range(nodes)])
    pool = ids.short_id("users", pool_size=pool_size, offset=offset)
    assert sum(pool.share_size(node) for node in ids.nodes.nodes) == pool_size
    value = data.draw(st.integers(offset, offset + pool_size - 1))
    node, bit = pool.locate(value)
    assert 0 <= bit < pool.share_size(node)
    assert pool.value_at(node, bit) == value
    for bad in (offset - 1, offset + pool_size):
        with pytest.raises(ValueError, match="outside the pool"):
            pool.locate(bad)


# -- on every backend -------------------------------------------------------------------------


def test_a_small_pool_issues_every_value_once_then_is_exhausted(ids: RedisIds) -> None:
    pool = ids.short_id("users", pool_size=20, offset=100)
    values = pool.next_ids(7) + [pool.next_id() for _ in range(6)] + pool.next_ids(7)
    assert sorted(values) == list(range(100, 120))
    assert pool.stats() == ShortIdStats(issued=20, free=0, fill_ratio=1.0)
    with pytest.raises(SequenceExhausted) as caught:
        pool.next_id()
    assert caught.value.namespace == "users"


def test_a_pool_that_is_not_whole_bytes_never_issues_past_its_end(ids: RedisIds) -> None:
    # 13 bits: BITPOS would happily answer bits 13–15 of the last byte, or 16 past the string.
    pool = ids.short_id("odd", pool_size=13, offset=0)
    for _ in range(3):
        values = pool.next_ids(13)
        assert sorted(values) == list(range(13))
        with pytest.raises(SequenceExhausted):
            pool.next_id()
        for value in values:
            assert pool.release(value)


def test_a_batch_larger_than_the_free_values_takes_nothing(ids: RedisIds) -> None:
    pool = ids.short_id("users", pool_size=10, offset=0)
    taken = pool.next_ids(6)
    with pytest.raises(SequenceExhausted):
        pool.next_ids(5)
    assert pool.stats().issued == 6
    assert sorted(taken + pool.next_ids(4)) == list(range(10))


def test_a_failed_batch_over_several_chunks_gives_every_bit_back(ids: RedisIds) -> None:
    pool = ids.short_id("chunks", pool_size=2500, offset=0)
    taken = pool.next_ids(1200)
    with pytest.raises(SequenceExhausted):
        pool.next_ids(1500)  # two BITFIELD chunks; the pool runs out in the second
    assert pool.stats().issued == 1200
    rest = pool.next_ids(1300)
    assert sorted(taken + rest) == list(range(2500))


def test_the_search_wraps_around_to_the_start(ids: RedisIds) -> None:
    pool = ids.short_id("wrap", pool_size=64, offset=1000)
    assert pool.reserve(v for v in range(1000, 1064) if v != 1003) == 63
    for _ in range(10):  # whatever byte the search starts from, it must come back to bit 3
        assert pool.next_id() == 1003
        assert pool.release(1003)


def test_released_values_come_back_and_is_taken_tells(ids: RedisIds) -> None:
    pool = ids.short_id("users", pool_size=8, offset=50)
    values = pool.next_ids(8)
    assert all(pool.is_taken(v) for v in values)
    assert pool.release(53) is True
    assert pool.release(53) is False, "releasing a free value changes nothing"
    assert not pool.is_taken(53)
    assert pool.stats() == ShortIdStats(issued=7, free=1, fill_ratio=7 / 8)
    assert pool.next_id() == 53


def test_reserved_values_are_never_issued(ids: RedisIds) -> None:
    pool = ids.short_id("users", pool_size=40, offset=10_000)
    vanity = [10_000, 10_007, 10_008, 10_020, 10_039]
    assert pool.reserve(vanity) == 5
    assert pool.reserve([10_007]) == 0, "already reserved"
    issued = pool.next_ids(35)
    assert not set(issued) & set(vanity)
    assert sorted(issued + vanity) == list(range(10_000, 10_040))


def test_out_of_pool_values_are_refused_before_anything_changes(ids: RedisIds) -> None:
    pool = ids.short_id("users", pool_size=100, offset=500)
    for bad in (499, 600, -1):
        with pytest.raises(ValueError, match="outside the pool 500 to 599"):
            pool.release(bad)
        with pytest.raises(ValueError, match="outside the pool"):
            pool.is_taken(bad)
    with pytest.raises(ValueError, match="outside the pool"):
        pool.reserve([510, 511, 600])
    assert not pool.is_taken(510), "a reserve with one bad value reserves nothing"
    with pytest.raises(ValueError, match="an int"):
        pool.release("510")  # type: ignore[arg-type]
    assert pool.stats().issued == 0


def test_values_are_random_not_sequential(ids: RedisIds) -> None:
    pool = ids.short_id("users")  # 10000000–19999999
    values = pool.next_ids(200)
    assert len(set(values)) == 200
    assert all(10_000_000 <= v <= 19_999_999 for v in values)
    assert values != sorted(values)
    assert max(values) - min(values) > 5_000_000, "spread over the pool, not clustered"
    assert pool.stats().issued == 200


def runs_of(values: list[int]) -> list[list[int]]:
    """``values`` cut where a value does not follow the one before it."""
    runs: list[list[int]] = []
    for value in values:
        if runs and runs[-1][-1] + 1 == value:
            runs[-1].append(value)
        else:
            runs.append([value])
    return runs


def test_a_large_batch_takes_runs_at_random_places(ids: RedisIds) -> None:
    pool = ids.short_id("users")  # 10000000–19999999
    values = pool.next_ids(1000)
    assert len(set(values)) == 1000
    assert all(10_000_000 <= v <= 19_999_999 for v in values)
    runs = runs_of(values)
    assert all(len(run) <= 64 for run in runs), "a run is at most one window of 64 positions"
    assert len(runs) >= 1000 // 64
    starts = sorted(run[0] for run in runs)
    assert starts[-1] - starts[0] > 1_000_000, "the windows are spread over the pool"
    assert pool.stats().issued == 1000


def test_a_large_batch_in_a_nearly_full_pool_takes_exactly_the_free_values(
    ids: RedisIds,
) -> None:
    pool = ids.short_id("dense", pool_size=2000, offset=0)
    kept = set(range(0, 2000, 7)) | set(range(3, 2000, 5))
    assert pool.reserve(v for v in range(2000) if v not in kept) == 2000 - len(kept)
    values = pool.next_ids(len(kept))  # windows give some; the search finds the rest
    assert sorted(values) == sorted(kept)
    with pytest.raises(SequenceExhausted):
        pool.next_id()


def test_a_large_batch_that_does_not_fit_gives_every_window_back(ids: RedisIds) -> None:
    pool = ids.short_id("back", pool_size=1000, offset=0)
    taken = pool.next_ids(300) + pool.next_ids(400)
    with pytest.raises(SequenceExhausted):
        pool.next_ids(301)
    assert pool.stats().issued == 700
    rest = pool.next_ids(300)
    assert sorted(taken + rest) == list(range(1000))


def test_a_large_batch_never_takes_past_a_pool_that_is_not_whole_bytes(ids: RedisIds) -> None:
    pool = ids.short_id("odd", pool_size=1003, offset=0)
    values = pool.next_ids(1003)
    assert sorted(values) == list(range(1003))
    with pytest.raises(SequenceExhausted):
        pool.next_id()


def test_next_ids_bounds(ids: RedisIds) -> None:
    pool = ids.short_id("users", pool_size=60_000)
    assert pool.next_ids(0) == []
    with pytest.raises(ValueError, match="50000"):
        pool.next_ids(50_001)
    assert len(set(pool.next_ids(1000))) == 1000


@pytest.mark.parametrize("change", ["bitmap lost", "healed by another process", "rewound"])
def test_a_bitmap_changed_under_a_running_generator_is_healed_before_its_next_value(
    backend: Backend, change: str
) -> None:
    """Single values take the scripts' fast path once a process has seen the node. When the
    bitmap vanishes while the running total and the generation stay, or another process healed
    it from its own positions (a new generation, a bitmap holding only those), or both were
    rewound to an earlier state (a total below what this process received), the next call
    still finds out and this process marks its own positions again before it takes one: the
    pool is issued once, then exhausted. (With one position left, a call that trusted the
    changed bitmap would almost surely repeat a value.)"""
    pool = backend.ids().short_id("members", pool_size=50, offset=1000)
    values = [pool.next_id() for _ in range(49)]
    backend.client.delete(pool.bitmap_key)
    if change == "healed by another process":
        theirs = min(set(range(1000, 1050)) - set(values))
        backend.client.setbit(pool.bitmap_key, theirs - 1000, 1)
        backend.client.set(pool.generation_key, "0123456789abcdef")  # a new token
        values.append(theirs)
    if change == "rewound":  # to before the first value: no bitmap, a total of 0
        backend.client.set(pool.total_key, 0)
    values += [pool.next_id() for _ in range(50 - len(values))]
    assert sorted(values) == list(range(1000, 1050)), "a value was issued twice"
    with pytest.raises(SequenceExhausted):
        pool.next_id()


def test_a_changed_pool_on_a_used_namespace_is_caught(backend: Backend) -> None:
    backend.ids().short_id("users", pool_size=100).next_id()
    with pytest.raises(ConfigError, match="pool_size=200"):
        backend.ids().short_id("users", pool_size=200).next_id()
    with pytest.raises(ConfigError, match="pool_size=200"):
        backend.ids().short_id("users", pool_size=200).reserve([10_000_000])


# -- several nodes and processes --------------------------------------------------------------


def test_three_nodes_split_the_pool_and_fill_it_completely(redis_servers: StartServers) -> None:
    urls = [server.url for server in redis_servers(3)]
    pool = RedisIds.from_urls(urls).short_id("users", pool_size=31, offset=0)
    values = pool.next_ids(5) + pool.next_ids(5) + pool.next_ids(5)
    values += [pool.next_id() for _ in range(16)]
    assert sorted(values) == list(range(31)), "full even though the nodes' shares ran out unevenly"
    with pytest.raises(SequenceExhausted):
        pool.next_id()
    # Node k holds exactly the values ≡ k (mod 3), at bit value // 3.
    for node in pool._nodes.nodes:
        assert node.client.bitcount(pool.bitmap_key) == pool.share_size(node)
    assert pool.stats() == ShortIdStats(issued=31, free=0, fill_ratio=1.0)
    assert pool.release(17) and pool.release(18)
    owner, bit = pool.locate(17)
    assert (owner.index, bit) == (2, 5)
    assert owner.client.getbit(pool.bitmap_key, 5) == 0
    assert sorted(pool.next_ids(2)) == [17, 18], "a batch may come from several nodes' shares"
    assert pool.release(17) and pool.release(18)
    with pytest.raises(SequenceExhausted):
        pool.next_ids(3)
    assert pool.stats().free == 2, "a batch the nodes together cannot give takes nothing"


def test_processes_on_three_nodes_never_collide(redis_servers: StartServers) -> None:
    urls = [server.url for server in redis_servers(3)]
    spec = GeneratorSpec(
        {"urls": urls}, "uniq", "short_id", "users", {"pool_size": 3000, "offset": 0}, batch=5
    )
    values = draw_in_processes(spec, processes=3, threads=3, per_thread=300)
    assert duplicates(values) == {}
    assert len(values) == 2700
    assert {v % 3 for v in values} == {0, 1, 2}


def test_processes_and_threads_never_share_a_value(real_backend: Backend) -> None:
    # A pool barely larger than the draw: the last values are found only by wrapping around.
    spec = real_backend.spec("short_id", "users", pool_size=3700, offset=1000)
    values = draw_in_processes(spec, processes=3, threads=4, per_thread=300)
    assert len(values) == 3600
    assert duplicates(values) == {}
    assert all(1000 <= v < 4700 for v in values)


def test_a_floor_that_fails_gives_up_its_merge_claim_so_no_other_process_waits(
    backend: Backend,
) -> None:
    def failing_floor() -> list[int]:
        raise RuntimeError("the database is down")

    generator = backend.ids().short_id("sfail", pool_size=1_000, offset=100, floor=failing_floor)
    with pytest.raises(RuntimeError, match="database is down"):
        generator.next_id()
    assert not [key for key in backend.keys() if key.endswith(":floor:claim")]  # noqa: SIM118 - Backend.keys() scans Redis
    # the next process claims the merge itself at once, and takes values above the table's
    taken = backend.ids().short_id("sfail", pool_size=1_000, offset=100, floor=lambda: [100])
    assert 100 < taken.next_id() < 1_100
