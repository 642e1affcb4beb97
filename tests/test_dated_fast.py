"""A date-keyed generator's common call is ``dated_fast``: few arguments, nothing taken on a miss.

``dated_fast`` takes a day's values only when everything is as the caller last saw it (the
identity marker vouches for the node and the claim, the day is not purged, its counter exists and
is at the caller's guard, the Redis time lies in the day, the limit holds); on anything else it
answers nil and leaves every key as it found it, and the generator makes the full ``dated_take``
call. These tests call the script itself on the backend table for each of those conditions, and
show what a generator sends on the real servers (fakeredis has no replication ID, so its calls are
always ``dated_take``), across midnight under a shifted clock and while the marker keeps vanishing.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from sa_redis_ids.testing import RedisClockControl
from tests.conftest import Backend
from tests.support.uniqueness import draw_from, draw_in_processes, duplicates

MARKER = "0123456789abcdef0123456789abcdef01234567 0/1|cfg"


class Script:
    """``dated_fast`` on a backend's first node, on keys of one hash tag."""

    def __init__(self, backend: Backend, storage: str):
        self.backend = backend
        self.client = backend.client
        self.storage = storage
        tag = f"{backend.prefix}:{{fast}}"
        self.marker, self.purged = f"{tag}:identity", f"{tag}:purged"
        self.counter = f"{tag}:{'hash' if storage == 'hash' else 'day'}"
        self.node = backend.ids().nodes.nodes[0]
        now = int(self.client.time()[0])
        self.start, self.end = now - 3600, now + 3600
        self.client.set(self.marker, MARKER)
        if storage == "hash":
            self.client.hset(self.counter, "20261127", 10)
        else:
            self.client.set(self.counter, 10)

    def call(
        self,
        n: int = 1,
        *,
        marker: str = MARKER,
        label: str = "20261127",
        start: int | None = None,
        end: int | None = None,
        least: int | None = None,
        limit: int = 1000,
    ) -> Any:
        return self.node.run(
            "dated_fast",
            [self.marker, self.purged, self.counter],
            [
                n,
                marker,
                label,
                self.storage,
                self.start if start is None else start,
                self.end if end is None else end,
                n + 1 if least is None else least,
                limit,
            ],
        )

    def value(self) -> Any:
        if self.storage == "hash":
            found = self.client.hget(self.counter, "20261127")
        else:
            found = self.client.get(self.counter)
        return None if found is None else int(found)


@pytest.fixture(params=["hash", "key"])
def script(backend: Backend, request: pytest.FixtureRequest) -> Script:
    return Script(backend, request.param)


def test_a_sound_call_takes_and_answers_the_counter(script: Script) -> None:
    assert script.call() == 11
    assert script.call(5) == 16
    assert script.value() == 16


@pytest.mark.parametrize(
    "miss",
    [
        pytest.param({"marker": "another-identity 0/1|cfg"}, id="another identity"),
        pytest.param({"marker": MARKER.replace("0/1", "1/2")}, id="another claim"),
        pytest.param({"start": 1000000000, "end": 1000086400}, id="day in the past"),
        pytest.param({"start": 9000000000, "end": 9000086400}, id="day in the future"),
        pytest.param({"least": 12}, id="below the guard"),
        pytest.param({"limit": 10}, id="past the limit"),
    ],
)
def test_a_miss_takes_nothing(script: Script, miss: dict[str, Any]) -> None:
    assert script.call(**miss) is None
    assert script.value() == 10
    assert script.call() == 11  # the same call without the miss takes


def test_a_missing_marker_takes_nothing(script: Script) -> None:
    script.client.delete(script.marker)
    assert script.call() is None
    assert script.value() == 10


def test_a_purged_day_takes_nothing(script: Script) -> None:
    script.client.set(script.purged, "20261127")
    assert script.call() is None
    assert script.value() == 10
    script.client.set(script.purged, "20261126")  # an earlier day purged: this one is served
    assert script.call() == 11


def test_a_missing_counter_is_left_missing(script: Script) -> None:
    """A missing key or hash field is never created: dated_take decides (floor, heal, seed)."""
    if script.storage == "hash":
        script.client.hdel(script.counter, "20261127")
    else:
        script.client.delete(script.counter)
    # storage "key": the key's absence is read first; storage "hash": a field that was missing
    # ends at n, below the least the caller sends (n + 1), and is removed again
    assert script.call(least=1 if script.storage == "key" else None) is None
    assert script.value() is None
    if script.storage == "hash":
        assert script.client.hexists(script.counter, "20261127") == 0
    else:
        assert script.client.exists(script.counter) == 0


def test_a_hash_field_at_0_goes_the_full_way(backend: Backend) -> None:
    """A field holding 0 cannot be told from a missing one after HINCRBY: both end at n, both go
    to dated_take (which reports a missing field), and the field is removed on the way."""
    script = Script(backend, "hash")
    script.client.hset(script.counter, "20261127", 0)
    assert script.call() is None
    assert script.client.hexists(script.counter, "20261127") == 0


@pytest.mark.parametrize("strategy", ["date_prefixed", "daily_code"])
def test_a_generator_sends_the_short_call_once_it_knows_the_node(
    backend: Backend, strategy: str
) -> None:
    ids = backend.ids()
    generator = getattr(ids, strategy)("orders", tz="UTC")
    node = ids.nodes.nodes[0]
    names: list[tuple[str, bool]] = []
    run = node.run

    def recording(name: str, keys: Any, args: Any) -> Any:
        reply = run(name, keys, args)
        names.append((name, reply is not None))
        return reply

    node.run = recording  # type: ignore[method-assign]
    values = [generator.next_id() for _ in range(5)]
    assert len(set(values)) == 5
    assert bool(generator.high.identities[0]) == (backend.name != "fake")
    if backend.name != "fake":
        assert names == [("dated_take", True)] + [("dated_fast", True)] * 4
    else:  # no replication ID (fakeredis): no marker to vouch for the node
        assert names == [("dated_take", True)] * 5
    assert [generator.day_and_counter(v)[1] for v in values] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("strategy", ["date_prefixed", "daily_code"])
def test_a_generator_with_a_floor_sends_the_short_call_once_the_floor_is_read(
    backend: Backend, strategy: str
) -> None:
    """The floor is read at the process's first call (``dated_take`` answers that it must be
    read, then takes above it); later calls are short ones, above the floor."""
    ids = backend.ids()
    read: list[object] = []

    def floor(day: object) -> int:
        read.append(day)
        return 40

    generator = getattr(ids, strategy)("orders", tz="UTC", floor=floor)
    node = ids.nodes.nodes[0]
    names: list[str] = []
    run = node.run

    def recording(name: str, keys: Any, args: Any) -> Any:
        names.append(name)
        return run(name, keys, args)

    node.run = recording  # type: ignore[method-assign]
    values = [generator.day_and_counter(generator.next_id())[1] for _ in range(4)]
    assert len(read) == 1
    assert values[0] > 40 and values == list(range(values[0], values[0] + 4))
    # the first call: dated_take (the floor must be read), the day seeded under its lock, and
    # dated_take again
    assert names[:5] == ["dated_take", "lock_acquire", "dated_set", "lock_release", "dated_take"]
    short = "dated_fast" if backend.name != "fake" else "dated_take"
    assert names[5:] == [short] * 3


@pytest.mark.parametrize("strategy", ["date_prefixed", "daily_code"])
def test_across_midnight_the_short_call_follows_the_redis_day(
    backend: Backend, strategy: str
) -> None:
    """Under a moved clock the short call compares the moved time with the day it asks for:
    values before midnight are of that day, values after it of the next, counting from 1."""
    ids = backend.ids()
    generator = getattr(ids, strategy)("orders", tz="UTC")
    clock = RedisClockControl(ids)
    try:
        new_day = clock.to_midnight("UTC", before_ms=60_000)
        before = [generator.day_and_counter(generator.next_id()) for _ in range(3)]
        clock.shift(60_500)
        after = [generator.day_and_counter(generator.next_id()) for _ in range(3)]
    finally:
        clock.close()
    assert before == [(new_day - timedelta(days=1), counter) for counter in (1, 2, 3)]
    assert after == [(new_day, counter) for counter in (1, 2, 3)]


@pytest.mark.parametrize("strategy", ["date_prefixed", "daily_code"])
def test_values_stay_unique_and_dense_while_the_marker_keeps_vanishing(
    backend: Backend, strategy: str
) -> None:
    """8 threads draw while another deletes the identity marker every few ms: every short call
    that misses leaves the counter as it was, so the day's counters are exactly 1..N."""
    ids = backend.ids()
    generator = getattr(ids, strategy)("orders", tz="UTC")
    generator.next_id()
    stop = threading.Event()

    def vanish() -> None:
        while not stop.wait(0.003):
            backend.client.delete(generator.identity_key)

    deleter = threading.Thread(target=vanish)
    deleter.start()
    try:
        drawn = draw_from(generator, 8, 150)
    finally:
        stop.set()
        deleter.join()
    counters = sorted(generator.day_and_counter(value)[1] for value in drawn)
    days = {generator.day_and_counter(value)[0] for value in drawn}
    assert len(set(drawn)) == len(drawn)
    if len(days) == 1:  # (a draw across a real midnight restarts the count: unique is all)
        assert counters == list(range(2, 2 + 8 * 150))


def test_processes_drawing_daily_codes_while_the_marker_keeps_vanishing_get_each_code_once(
    real_backend: Backend,
) -> None:
    """4 processes of 4 threads draw daily codes while the identity marker is deleted every
    20 ms: each short call that finds it gone takes nothing, the full call takes instead, and
    the day's counters are exactly 1..N."""
    spec = real_backend.spec("daily_code", "orders", tz="UTC")
    generator = real_backend.ids().daily_code("orders", tz="UTC")
    drawn: list[Any] = []
    drawing = threading.Thread(
        target=lambda: drawn.extend(draw_in_processes(spec, processes=4, threads=4, per_thread=500))
    )
    drawing.start()
    deletions = 0
    while drawing.is_alive():
        deletions += real_backend.client.delete(generator.identity_key)
        time.sleep(0.02)
    drawing.join()
    assert deletions > 0, "the markers the draws wrote were deleted under them"
    assert len(drawn) == 4 * 4 * 500
    assert duplicates(drawn) == {}
    parts = [generator.day_and_counter(code) for code in drawn]
    if len({day for day, _ in parts}) == 1:  # (a draw across a real midnight restarts the count)
        assert sorted(counter for _, counter in parts) == list(range(1, len(drawn) + 1))
