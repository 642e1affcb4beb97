"""Snowflake: layouts and bounds, composing and parsing, borrowing, clock steps, shards, nodes."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sa_redis_ids import (
    ClockMovedBackwards,
    ConfigError,
    RedisIds,
    SequenceExhausted,
    SnowflakeCompatWarning,
    SnowflakeLayout,
)
from sa_redis_ids.bounds import BIGINT_MAX, JS_SAFE_MAX
from sa_redis_ids.generators.snowflake import DEFAULT_EPOCH_MS, LAYOUTS
from sa_redis_ids.redis.connect import embedded_client
from sa_redis_ids.testing import shift_time
from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates

StartServers = Callable[[int], list[RedisServer]]

SEED_003_ID = 5981966696448054276
"""Seed 003's example: ms 1426212000000 (2015-03-13 10:00 CST), shard 53, sequence 4."""
ONE_BIT = SnowflakeLayout(time_bits=41, shard_bits=0, sequence_bits=1)
"""Two IDs per millisecond: every batch has to borrow milliseconds."""
YEAR_MS = 365 * 24 * 3600 * 1000


def redis_ms(client: object) -> int:
    seconds, micros = client.time()  # type: ignore[attr-defined]
    return int(seconds) * 1000 + int(micros) // 1000


def now_ms() -> int:
    return int(time.time() * 1000)


# -- layouts, composing and parsing (no Redis) ------------------------------------------------


def test_default_layout_is_41_12_10_bits_since_2026() -> None:
    layout = LAYOUTS["default"]
    assert (layout.time_bits, layout.shard_bits, layout.sequence_bits) == (41, 12, 10)
    assert layout.epoch == datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert layout.epoch_ms == DEFAULT_EPOCH_MS
    assert layout.max_value == BIGINT_MAX
    assert layout.runs_out_at.year == 2095


def test_compat_layout_decodes_the_seed_003_id() -> None:
    compat = LAYOUTS["compat"]
    assert SEED_003_ID == (1426212000000 << 22) | (53 << 10) | 4
    parts = compat.parse(SEED_003_ID)
    assert (parts.ms, parts.shard, parts.sequence) == (1426212000000, 53, 4)
    assert parts.timestamp == datetime(2015, 3, 13, 2, 0, tzinfo=timezone.utc)
    assert compat.compose(1426212000000, 53, 4) == SEED_003_ID
    assert compat.runs_out_at == datetime(2039, 9, 7, 15, 47, 35, 552000, tzinfo=timezone.utc)


def test_js_safe_layout_stays_at_most_2_pow_53_for_69_years() -> None:
    js = LAYOUTS["js_safe"]
    assert js.max_value == JS_SAFE_MAX
    assert js.max_sequence + 1 == 4096, "IDs per millisecond"
    assert js.shard_bits == 0
    assert js.runs_out_at.year == 2095


@st.composite
def layouts_and_parts(draw: st.DrawFn) -> tuple[SnowflakeLayout, int, int, int]:
    time_bits = draw(st.integers(1, 61))
    sequence_bits = draw(st.integers(1, 62 - time_bits))
    shard_bits = draw(st.integers(0, 63 - time_bits - sequence_bits))
    layout = SnowflakeLayout(
        epoch_ms=draw(st.integers(0, 2**45)),
        time_bits=time_bits,
        shard_bits=shard_bits,
        sequence_bits=sequence_bits,
    )
    ms = layout.epoch_ms + draw(st.integers(0, layout.max_ms))
    return (
        layout,
        ms,
        draw(st.integers(0, layout.max_shard)),
        draw(st.integers(0, layout.max_sequence)),
    )


@given(layouts_and_parts())
def test_compose_and_parse_round_trip_within_bounds(
    case: tuple[SnowflakeLayout, int, int, int],
) -> None:
    layout, ms, shard, sequence = case
    value = layout.compose(ms, shard, sequence)
    assert 0 <= value <= layout.max_value <= BIGINT_MAX
    parts = layout.parse(value)
    assert (parts.ms, parts.shard, parts.sequence, parts.value) == (ms, shard, sequence, value)


@given(layouts_and_parts(), st.integers(1, 3))
def test_later_slots_of_one_shard_compose_to_larger_ids(
    case: tuple[SnowflakeLayout, int, int, int], step: int
) -> None:
    layout, ms, shard, sequence = case
    value = layout.compose(ms, shard, sequence)
    if sequence + step <= layout.max_sequence:
        assert layout.compose(ms, shard, sequence + step) > value
    if ms - layout.epoch_ms + step <= layout.max_ms:
        assert layout.compose(ms + step, shard, 0) > value


@given(layouts_and_parts())
def test_parse_refuses_what_the_layout_cannot_hold(
    case: tuple[SnowflakeLayout, int, int, int],
) -> None:
    layout = case[0]
    for bad in (-1, layout.max_value + 1):
        with pytest.raises(ValueError, match="not an ID of this layout"):
            layout.parse(bad)
    with pytest.raises(ValueError):
        layout.compose(layout.epoch_ms - 1, 0, 0)
    with pytest.raises(ValueError):
        layout.compose(layout.epoch_ms, layout.max_shard + 1, 0)
    with pytest.raises(ValueError):
        layout.compose(layout.epoch_ms, 0, layout.max_sequence + 1)


@pytest.mark.parametrize(
    ("options", "names"),
    [
        ({"time_bits": 42}, ["time_bits=42", "64 bits", "at most 63"]),
        ({"time_bits": 0}, ["time_bits=0", "from 1 to 62"]),
        ({"sequence_bits": 0}, ["sequence_bits=0", "from 1 to 62"]),
        ({"shard_bits": -1}, ["shard_bits=-1", "from 0 to 61"]),
        ({"epoch_ms": -1}, ["epoch_ms=-1", "from 0"]),
        ({"time_bits": True}, ["time_bits must be an int"]),
        ({"sequence_bits": 10.0}, ["sequence_bits must be an int"]),
    ],
)
def test_bad_layout_is_config_error_naming_the_option(
    options: dict[str, object], names: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        SnowflakeLayout(**options)  # type: ignore[arg-type]
    for name in names:
        assert name in str(caught.value)


def test_bad_generator_options_are_config_errors_naming_the_option() -> None:
    ids = RedisIds(embedded_client())
    cases: list[tuple[dict[str, object], list[str]]] = [
        ({"layout": "twitter"}, ["layout='twitter'", "'default', 'compat', 'js_safe'"]),
        ({"layout": SnowflakeLayout(epoch_ms=now_ms() + YEAR_MS)}, ["epoch_ms=", "future"]),
        (
            {"layout": SnowflakeLayout(epoch_ms=0, time_bits=30, shard_bits=12)},
            ["time_bits=30", "ran out on 1970-01-13", "more time_bits or a later epoch_ms"],
        ),
        ({"tolerance_ms": -1}, ["tolerance_ms=-1", "from 0 to 3600000"]),
        ({"tolerance_ms": 2.5}, ["tolerance_ms must be an int"]),
    ]
    for options, names in cases:
        with pytest.raises(ConfigError) as caught:
            ids.snowflake("orders", **options)  # type: ignore[arg-type]
        for name in names:
            assert name in str(caught.value), (options, str(caught.value))


def test_more_nodes_than_sequence_values_is_config_error() -> None:
    ids = RedisIds([embedded_client() for _ in range(3)])
    with pytest.raises(ConfigError, match=r"sequence_bits=1 gives 2 .* 3 nodes .* at least 2"):
        ids.snowflake("orders", layout=ONE_BIT)
    assert ids.snowflake("orders", layout=SnowflakeLayout(shard_bits=0, sequence_bits=2))


def test_compat_layout_warns_where_it_is_chosen() -> None:
    ids = RedisIds(embedded_client())
    with pytest.warns(SnowflakeCompatWarning, match="runs out on 2039-09-07") as caught:
        compat = ids.snowflake("legacy", layout="compat")
    assert caught[0].filename == __file__, "the warning points at the caller's line"
    assert compat.runs_out_at.year == 2039
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids.snowflake("modern")  # the default layout does not warn


# -- issuing, on every backend ----------------------------------------------------------------


def test_ids_increase_and_carry_the_redis_time(backend: Backend, ids: RedisIds) -> None:
    orders = ids.snowflake("orders")
    before = redis_ms(backend.client)
    values = [orders.next_id() for _ in range(20)] + orders.next_ids(500) + [orders.next_id()]
    after = redis_ms(backend.client)
    assert values == sorted(values) and not duplicates(values)
    assert all(0 < v <= orders.max_value for v in values)
    for value in (values[0], values[-1]):
        parts = orders.parse(value)
        assert before <= parts.ms <= after + 1000, "borrowing stays within a second here"
        assert parts.shard == 0
        assert parts.timestamp.tzinfo == timezone.utc


def test_the_state_follows_every_call_also_within_one_millisecond(
    backend: Backend, ids: RedisIds
) -> None:
    """The fast path writes only the fields that change (the slot alone, in the millisecond of
    the last call): after each of many quick calls the state names that call's millisecond and
    slot, and ``seen`` is never behind the Redis time of an earlier call."""
    orders = ids.snowflake("orders")
    epoch = orders.layout.epoch_ms

    def state() -> dict[str, int]:
        found = backend.client.hgetall(orders.state_key)
        return {key.decode(): int(value) for key, value in found.items()}

    orders.next_id()
    for _ in range(300):  # quick calls: some share a millisecond, most on a quiet machine
        before = redis_ms(backend.client)
        parts = orders.parse(orders.next_id())
        now = state()
        assert (now["ms"], now["c"]) == (parts.ms - epoch, parts.sequence)
        assert now["seen"] >= before - epoch
    # a state ahead of the clock (borrowed milliseconds): the next calls stay in its millisecond
    ahead = state()["ms"] + 60_000  # (a minute: no stall of a loaded machine reaches it)
    backend.client.hset(orders.state_key, mapping={"ms": ahead, "c": 7})
    for slot in (8, 9):
        parts = orders.parse(orders.next_id())
        assert (parts.ms - epoch, parts.sequence) == (ahead, slot)
        assert (state()["ms"], state()["c"]) == (ahead, slot)


def test_next_ids_zero_is_empty_and_bounds_are_checked(ids: RedisIds) -> None:
    orders = ids.snowflake("orders")
    assert orders.next_ids(0) == []
    with pytest.raises(ValueError, match="0 or more"):
        orders.next_ids(-1)
    with pytest.raises(ValueError, match="100000"):
        orders.next_ids(100_001)
    assert len(orders.next_ids(100_000)) == 100_000


def test_shard_is_encoded_and_must_fit_its_bits(ids: RedisIds) -> None:
    orders = ids.snowflake("orders")
    assert {orders.parse(v).shard for v in orders.next_ids(3, shard=53)} == {53}
    assert orders.parse(orders.next_id(shard=4095)).shard == 4095
    for bad in (4096, -1):
        with pytest.raises(ValueError, match="must be 0 to 4095"):
            orders.next_id(shard=bad)
    with pytest.raises(ValueError, match="must be an int"):
        orders.next_ids(2, shard=True)
    js = ids.snowflake("js", layout="js_safe")
    with pytest.raises(ValueError, match="does not fit 0 shard bits; it must be 0 to 0"):
        js.next_id(shard=1)


def test_js_safe_ids_stay_at_most_2_pow_53(ids: RedisIds) -> None:
    js = ids.snowflake("js", layout="js_safe")
    assert js.max_value == JS_SAFE_MAX
    values = js.next_ids(5000)
    assert max(values) <= JS_SAFE_MAX
    assert values == sorted(set(values))


def test_compat_ids_are_milliseconds_since_1970(backend: Backend, ids: RedisIds) -> None:
    with pytest.warns(SnowflakeCompatWarning):
        compat = ids.snowflake("legacy", layout="compat")
    before = redis_ms(backend.client)
    value = compat.next_id(shard=53)
    # A new namespace starts at the Redis clock.
    assert before <= value >> 22 <= redis_ms(backend.client)
    assert (value >> 10) & 4095 == 53


def test_a_new_namespace_starts_at_the_clock_so_id_range_around_its_first_ids_finds_them(
    backend: Backend, ids: RedisIds
) -> None:
    """No state, no mark, no floor: nothing was issued, so nothing is healed or skipped."""
    orders = ids.snowflake("orders")
    start = datetime.fromtimestamp(redis_ms(backend.client) / 1000, timezone.utc)
    first = orders.next_ids(50)
    end = datetime.fromtimestamp((redis_ms(backend.client) + 1) / 1000, timezone.utc)
    low, high = orders.id_range(start, end)
    assert all(low <= value <= high for value in first)
    assert orders.rewinds == 0


@pytest.mark.parametrize("lost", ["c", "ms", "seen", "ms c"])
def test_a_state_missing_a_field_goes_on_after_the_ids_it_issued(
    backend: Backend, ids: RedisIds, lost: str
) -> None:
    """A state hash with a field deleted by hand: without its slot, the whole millisecond counts
    as used; without its millisecond, the state counts as lost and heals from the last ID this
    process saw. Either way the next IDs come after
    every ID issued, also from borrowed milliseconds ahead of the clock, and the state is whole
    again."""
    orders = ids.snowflake("orders")
    orders.next_id()
    ahead = int(backend.client.hget(orders.state_key, "ms") or 0) + 60_000
    backend.client.hset(orders.state_key, mapping={"ms": ahead, "c": 7})
    before = [orders.next_id(), *orders.next_ids(3)]
    backend.client.hdel(orders.state_key, *lost.split())
    after = [orders.next_id(), *orders.next_ids(3)]
    assert min(after) > max(before)
    assert backend.client.hlen(orders.state_key) == 3
    assert orders.rewinds == ("ms" in lost), "a loss only where the millisecond went"
    if lost == "c":
        parts = orders.parse(after[0])
        assert (parts.ms - orders.layout.epoch_ms, parts.sequence) == (ahead + 1, 0)


@pytest.mark.parametrize(
    ("left", "shift_ms"),
    [("c", -999), ("seen", -999), ("seen", -5000)],
    ids=["slot-left", "seen-left", "seen-left-clock-far-behind"],
)
def test_a_state_without_its_millisecond_is_lost_not_new_for_a_new_process(
    backend: Backend, left: str, shift_ms: int
) -> None:
    """A process that has drawn nothing and has no floor starts a new namespace at its clock; a
    state hash that still holds a field is not new: it heals (and says so) ahead of the clock, and
    ahead of the latest time the state saw, so a clock behind the IDs issued, also by more than
    the headroom, repeats none."""
    before = backend.ids().snowflake("orders").next_ids(300)
    state_key = backend.ids().snowflake("orders").state_key
    backend.client.hdel(state_key, *({"ms", "c", "seen"} - {left}))
    fresh = backend.ids().snowflake("orders")
    with shift_time(fresh, shift_ms):
        after = fresh.next_ids(300)
    assert fresh.rewinds == 1, "a heal, not a new namespace"
    assert min(after) > max(before)


def test_a_one_bit_sequence_moves_on_to_the_next_millisecond(ids: RedisIds) -> None:
    tiny = ids.snowflake("tiny", layout=ONE_BIT)
    values = tiny.next_ids(1000) + [tiny.next_id() for _ in range(10)] + tiny.next_ids(100)
    assert values == sorted(set(values)), "strictly increasing, never repeated"
    per_ms: dict[int, int] = {}
    for value in values:
        parts = tiny.parse(value)
        per_ms[parts.ms] = per_ms.get(parts.ms, 0) + 1
        assert parts.sequence in (0, 1)
    assert max(per_ms.values()) <= 2
    assert max(per_ms) - min(per_ms) >= 554, "1110 IDs need at least 555 milliseconds"


def test_borrowed_milliseconds_are_not_a_clock_going_back(backend: Backend) -> None:
    borrowing = backend.ids().snowflake("tiny", layout=ONE_BIT)
    ahead = borrowing.next_ids(20_000)  # 10 s of borrowed milliseconds
    strict = backend.ids().snowflake("tiny", layout=ONE_BIT, tolerance_ms=0)
    after = strict.next_ids(3)
    assert min(after) > max(ahead)


def test_clock_behind_within_tolerance_keeps_issuing_after_the_last_id(ids: RedisIds) -> None:
    orders = ids.snowflake("orders", tolerance_ms=5000)
    first = orders.next_ids(10)
    with shift_time(orders, -2000):
        behind = [*orders.next_ids(10), orders.next_id()]
    later = orders.next_ids(10)
    values = first + behind + later
    assert values == sorted(set(values)), "never smaller, never repeated"
    assert orders.parse(behind[0]).ms >= orders.parse(first[-1]).ms


def test_clock_behind_beyond_tolerance_raises_and_takes_nothing(ids: RedisIds) -> None:
    orders = ids.snowflake("orders", tolerance_ms=100)
    first = orders.next_id()
    with shift_time(orders, -10_000), pytest.raises(ClockMovedBackwards) as caught:
        orders.next_ids(5)
    assert 100 < caught.value.behind_ms <= 10_000
    assert caught.value.namespace == "orders"
    assert "behind" in str(caught.value)
    assert orders.next_id() > first, "issuing goes on once the clock is back"


def test_a_layout_past_its_end_is_exhausted(ids: RedisIds) -> None:
    orders = ids.snowflake("orders")
    with shift_time(orders, 70 * YEAR_MS), pytest.raises(SequenceExhausted, match="end of the"):
        orders.next_id()
    assert orders.next_id() > 0, "nothing was recorded by the refused call"


def test_redis_time_before_the_epoch_is_config_error(ids: RedisIds) -> None:
    recent = SnowflakeLayout(epoch_ms=now_ms() - 24 * 3600 * 1000)
    orders = ids.snowflake("orders", layout=recent)
    with shift_time(orders, -2 * 24 * 3600 * 1000), pytest.raises(ConfigError, match="epoch"):
        orders.next_id()
    assert orders.parse(orders.next_id()).ms > recent.epoch_ms


def test_a_changed_layout_on_a_used_namespace_is_caught(backend: Backend) -> None:
    backend.ids().snowflake("orders").next_id()
    with pytest.raises(ConfigError, match="bits=41/0/12"):
        backend.ids().snowflake("orders", layout="js_safe").next_id()


def test_same_options_give_the_same_generator(ids: RedisIds) -> None:
    assert ids.snowflake("orders") is ids.snowflake("orders", layout="default")
    with pytest.raises(ConfigError, match="already exists"):
        ids.snowflake("orders", tolerance_ms=5)


@pytest.mark.parametrize("tolerance_ms", [10, 1000])
def test_a_node_that_lost_its_state_repeats_no_id(
    redis_servers: StartServers, tolerance_ms: int
) -> None:
    (server,) = redis_servers(1)
    orders = RedisIds.from_url(server.url).snowflake("orders", tolerance_ms=tolerance_ms)
    with shift_time(orders, -10 * tolerance_ms):
        orders.next_id()  # a new namespace starts at its clock, here 10 tolerances behind
    before = orders.next_ids(300)  # now the last IDs are at the clock
    server.client().flushall()  # the node forgets its last millisecond and sequence …
    with shift_time(orders, -tolerance_ms):  # … and its clock is (at most the tolerance) behind
        after = orders.next_ids(300)
    assert min(after) > max(before)


# -- several nodes and processes --------------------------------------------------------------


def test_three_nodes_never_issue_the_same_id(redis_servers: StartServers) -> None:
    urls = [server.url for server in redis_servers(3)]
    two_bits = SnowflakeLayout(shard_bits=0, sequence_bits=2)  # node 0: 0 and 3; 1: 1; 2: 2
    orders = RedisIds.from_urls(urls).snowflake("orders", layout=two_bits)
    values = [orders.next_id() for _ in range(300)] + orders.next_ids(300) + orders.next_ids(301)
    assert duplicates(values) == {}
    sequences = {orders.parse(v).sequence for v in values}
    assert sequences == {0, 1, 2, 3}
    # Node k's last slot is sequence slot·3 + k: the last ID it issued is among the values.
    for node in orders._nodes.nodes:
        state = node.client.hgetall(orders.state_key)
        ms = two_bits.epoch_ms + int(state[b"ms"])
        assert two_bits.compose(ms, 0, int(state[b"c"]) * 3 + node.index) in values


def test_processes_on_three_nodes_never_collide(redis_servers: StartServers) -> None:
    urls = [server.url for server in redis_servers(3)]
    layout = SnowflakeLayout(shard_bits=0, sequence_bits=2)
    spec = GeneratorSpec({"urls": urls}, "uniq", "snowflake", "orders", {"layout": layout}, batch=7)
    values = draw_in_processes(spec, processes=3, threads=3, per_thread=400)
    assert len(values) == 3 * 3 * 400
    assert duplicates(values) == {}


@pytest.mark.parametrize("layout", ["default", ONE_BIT], ids=["default", "one_bit"])
def test_processes_and_threads_never_share_an_id(
    real_backend: Backend, layout: str | SnowflakeLayout
) -> None:
    spec = real_backend.spec("snowflake", "orders", layout=layout)
    values = draw_in_processes(spec, processes=3, threads=4, per_thread=300)
    assert len(values) == 3 * 4 * 300
    assert duplicates(values) == {}
