"""Every key of a strategy's state guarded on its own: one key lost, the others kept.

For each key of sequence, date_prefixed, daily_code and short_id, processes draw values, the key
alone is deleted (what an eviction of that one key does), a maintenance process that knows
nothing (a fresh generator without a floor, as a command line tool or a job would be) runs every
maintenance and reservation call the strategy offers, and then processes draw again: a new one
with the table as its floor first, then the processes that drew before, then the new one again.
Not one value may repeat. Each process is a `RedisIds` of its own (its own marks and records, as
a process has); the "table" holds what the first process drew, plus, for short IDs, what the
second drew; for counters the second process's values stay uncommitted, above the table, where
only the headroom covers them. The processes that drew before have no floor, or the table as
theirs. Short IDs without a floor are guaranteed per process only (another process's values come
back once that process calls again, see the operating page): there one process holds them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine, insert

from sa_redis_ids import DayMissing, RedisIds
from sa_redis_ids.generators.base import IdGenerator, ImpliedFloor
from sa_redis_ids.maintenance.reseed import reseed_from_table
from tests.conftest import Backend
from tests.support.days import shift_to_local
from tests.support.uniqueness import duplicates

DAY = date(2031, 3, 14)
DRAWS = 40
"""Values each process draws per turn (a heal's headroom, 1,000 by default, covers them)."""


@dataclass
class Known:
    """What the database holds: the values committed so far."""

    values: list[Any] = field(default_factory=list)

    def highest(self) -> Any:
        return max(self.values)


@dataclass(frozen=True)
class Strategy:
    name: str
    factory: str
    options: dict[str, Any]
    keys: Callable[[Any], dict[str, str]]
    """Every key of the generator's state, by what it is."""
    maintain: Callable[[Any, Known], list[str]]
    """Every maintenance and reservation call, run on a fresh generator: what each did."""

    def make(self, backend: Backend, floor: Any = None) -> Any:
        """A new process's generator (a `RedisIds` of its own), at 10:00 on `DAY`."""
        options = dict(self.options)
        if floor is not None:
            options["floor"] = floor
        generator: IdGenerator[Any] = getattr(backend.ids(), self.factory)("loss", **options)
        if hasattr(generator, "clock"):
            shift_to_local(generator, DAY, time(10))
        return generator

    def floor(self, table: Known) -> Any:
        """The table as the strategy's floor (highest value, day's highest counter, values)."""
        if self.factory == "short_id":
            return lambda: list(table.values)
        if self.factory == "sequence":
            return lambda: max(table.values, default=0)
        reader = self.make_reader()
        return lambda day: max(
            (reader(value)[1] for value in table.values if reader(value)[0] == day), default=0
        )

    def make_reader(self) -> Callable[[Any], tuple[date, int]]:
        generator: Any = getattr(RedisIds.embedded(), self.factory)("loss", **self.options)
        return generator.day_and_counter  # type: ignore[no-any-return]


def _sequence_keys(g: Any) -> dict[str, str]:
    return {"counter": g.counter_key, "claim": g.claim_key, "identity marker": g.identity_key}


def _dated_keys(g: Any) -> dict[str, str]:
    store = g._store_key() if g.storage == "hash" else g._day_key(DAY.strftime("%Y%m%d"))
    return {
        "day counters": store,
        "day index": g.days_key,
        "claim": g.claim_key,
        "purge marker": g.purge_key,
        "identity marker": g.identity_key,
    }


def _short_keys(g: Any) -> dict[str, str]:
    return {
        "bitmap": g.bitmap_key,
        "total": g.total_key,
        "generation": g.generation_key,
        "floor marker": g.floor_marker_key,
        "claim": g.claim_key,
        "identity marker": g.identity_key,
    }


def _maintain_counter(g: Any, table: Known) -> list[str]:
    g.check_claims()
    return [f"ensure_at_least: {g.ensure_at_least(table.highest())}"]


def _maintain_dated(g: Any, table: Known) -> list[str]:
    done: list[str] = []
    try:
        done.append(f"precreate: {g.precreate(DAY)}")
    except DayMissing:  # refused: the day vanished and this generator has nothing to heal from
        done.append("precreate: refused")
    done.append(f"precreate tomorrow: {g.precreate(date(2031, 3, 15))}")
    done.append(f"purge_before: {g.purge_before(DAY)}")
    done.append(f"days_present: {g.days_present()}")
    done.append(f"ensure_at_least: {g.ensure_at_least(table.highest())}")
    return done


def _maintain_pool(g: Any, table: Known) -> list[str]:
    free = [v for v in range(g.offset, g.max_value + 1) if v not in set(table.values)]
    vanity, given_back = free[-1], free[-2]
    return [
        f"reserve: {g.reserve([vanity])}",
        f"release: {g.release(given_back)}",
        f"is_taken: {g.is_taken(vanity)}",
        f"stats: {g.stats()}",
    ]


STRATEGIES = [
    Strategy("sequence", "sequence", {}, _sequence_keys, _maintain_counter),
    Strategy(
        "date_prefixed", "date_prefixed", {"length": 14, "tz": "UTC"}, _dated_keys, _maintain_dated
    ),
    Strategy("daily_code", "daily_code", {"digits": 6, "tz": "UTC"}, _dated_keys, _maintain_dated),
    Strategy(
        "short_id", "short_id", {"pool_size": 400, "offset": 10_000}, _short_keys, _maintain_pool
    ),
]


def _key_names(strategy: Strategy) -> list[str]:
    probe = getattr(RedisIds.embedded(), strategy.factory)("loss", **strategy.options)
    return list(strategy.keys(probe))


CASES = [
    pytest.param(strategy, key, id=f"{strategy.name}-{key.replace(' ', '_')}")
    for strategy in STRATEGIES
    for key in _key_names(strategy)
]


@pytest.mark.parametrize("holders", ["without floor", "with the table as floor"])
@pytest.mark.parametrize(("strategy", "key"), CASES)
def test_a_key_lost_alone_then_every_maintenance_call_repeats_nothing(
    backend: Backend, strategy: Strategy, key: str, holders: str
) -> None:
    table = Known()
    floor = strategy.floor(table) if holders != "without floor" else None
    first, second = strategy.make(backend, floor), strategy.make(backend, floor)
    drawn = first.next_ids(DRAWS)
    table.values += drawn
    # Short IDs without floors are guaranteed per process only: one process holds them all.
    alone = strategy.factory == "short_id" and floor is None
    held = (first if alone else second).next_ids(DRAWS)
    if strategy.factory == "short_id":
        table.values += held
        strategy.make(backend).reserve([10_000 + 399 - 1])  # given back after the loss
    drawn += held
    backend.client.delete(strategy.keys(first)[key])

    strategy.maintain(strategy.make(backend), table)

    newcomer = strategy.make(backend, floor=strategy.floor(table))
    drawn += first.next_ids(DRAWS) + [first.next_id() for _ in range(5)]
    drawn += newcomer.next_ids(DRAWS)
    drawn += second.next_ids(DRAWS) + newcomer.next_ids(DRAWS)
    assert duplicates(drawn) == {}, f"repeated after {key} was lost"
    assert len(drawn) == 6 * DRAWS + 5


class HeldFloor:
    """A floor whose first reading waits until released (the process reading it holds a lock
    or a claim meanwhile); later readings answer at once."""

    def __init__(self, answer: Any):
        self.answer = answer
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, *day: Any) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(30), "never released"
        return self.answer


def _while_held(backend: Backend, first: Any, second: Any, floor: HeldFloor, part: str) -> Any:
    """``first`` draws until it reads its held floor; every key whose name holds ``part`` is
    deleted; ``second`` draws; then ``first`` goes on. All values drawn, first's then second's."""
    found: dict[str, list[Any]] = {}
    thread = threading.Thread(target=lambda: found.setdefault("first", first.next_ids(DRAWS)))
    thread.start()
    assert floor.entered.wait(30), "the first process never read its floor"
    present: list[str] = backend.keys()
    lost = [key for key in present if part in key]
    assert lost, f"no key holds {part!r} while the first process reads its floor"
    for key in lost:
        backend.client.delete(key)
    found["second"] = second.next_ids(DRAWS)
    floor.release.set()
    thread.join(30)
    return found["first"] + found["second"]


@pytest.mark.parametrize("factory", ["date_prefixed", "daily_code"])
def test_the_first_of_day_lock_lost_while_held_lets_a_second_seeder_in_harmlessly(
    backend: Backend, factory: str
) -> None:
    """The Redlock that guards seeding a day from its floor is lost while one process holds it:
    another seeds the day meanwhile; the first's seed then finds the day created and changes
    nothing (the seed only creates a missing counter, atomically). No value twice, none at or
    below the floor."""
    (strategy,) = [s for s in STRATEGIES if s.factory == factory]
    floor = HeldFloor(50)
    first = strategy.make(backend, floor)
    second = strategy.make(backend, lambda day: 50)
    drawn = _while_held(backend, first, second, floor, ":lock:")
    counters = [first.day_and_counter(value)[1] for value in drawn]
    assert duplicates(drawn) == {} and len(drawn) == 2 * DRAWS
    assert min(counters) > 50


def test_the_short_id_merge_claim_lost_while_held_makes_a_second_merge_harmlessly(
    backend: Backend,
) -> None:
    """The claim of the process merging the floor into the pool (at its first use) is lost while
    it merges: another process then merges too instead of waiting for it (merges only mark
    values taken). No value twice, none of the table's."""
    (strategy,) = [s for s in STRATEGIES if s.factory == "short_id"]
    used = list(range(10_000, 10_100))
    floor = HeldFloor(used)
    first = strategy.make(backend, floor)
    second = strategy.make(backend, lambda: used)
    drawn = _while_held(backend, first, second, floor, ":sid:floor:claim")
    assert duplicates(drawn) == {} and len(drawn) == 2 * DRAWS
    assert set(drawn).isdisjoint(used)


MAIN_KEYS = {"sequence": "counter", "date_prefixed": "day counters", "daily_code": "day counters"}
MAIN_KEYS["short_id"] = "bitmap"


@pytest.mark.parametrize("strategy", STRATEGIES, ids=[s.name for s in STRATEGIES])
def test_a_reseed_after_a_lone_loss_repeats_nothing(
    backend: Backend, strategy: Strategy, tmp_path: Path
) -> None:
    """`reseed_from_table` (what ``sa-redis-ids reseed`` runs) after the state's main key alone
    was lost, from a table that lacks what another process still holds: the values drawn after
    it, by a new process first, repeat nothing."""
    engine = create_engine(f"sqlite:///{tmp_path / 'reseed.sqlite3'}")
    kind = String(30) if strategy.factory == "daily_code" else BigInteger()
    rows = Table("rows", MetaData(), Column("value", kind, primary_key=True))
    rows.metadata.create_all(engine)
    held_values = Known()
    first, second = strategy.make(backend), strategy.make(backend)
    drawn = first.next_ids(DRAWS)
    if strategy.factory == "short_id":  # one process holds them all, committed (see above)
        drawn += first.next_ids(DRAWS)
        committed = list(drawn)
    else:
        committed = list(drawn)
        drawn += second.next_ids(DRAWS)  # held, above the table
    with engine.begin() as connection:
        connection.execute(insert(rows), [{"value": value} for value in committed])
    held_values.values += committed
    backend.client.delete(strategy.keys(first)[MAIN_KEYS[strategy.name]])

    reseed_from_table(strategy.make(backend), engine, rows, "value")

    newcomer = strategy.make(backend, floor=strategy.floor(held_values))
    drawn += newcomer.next_ids(DRAWS)
    drawn += first.next_ids(DRAWS) + second.next_ids(DRAWS) + newcomer.next_ids(DRAWS)
    assert duplicates(drawn) == {}
    engine.dispose()


@pytest.mark.parametrize("strategy", STRATEGIES, ids=[s.name for s in STRATEGIES])
def test_a_process_that_knows_nothing_never_takes_a_lone_lost_key_for_a_new_one(
    backend: Backend, strategy: Strategy
) -> None:
    """After the state's main key alone was lost, a new process with neither a mark nor a floor
    cannot heal it. It never treats the namespace as new in silence: a day whose counter the day
    index lists is refused (`DayMissing`); a sequence counter lost beside its claim restarts at
    0 with the loss logged and counted, as does a short-ID pool (its bitmap missing beside its
    total) after a heal with nothing to mark. A process that drew before then heals above it."""
    first = strategy.make(backend)
    drawn = first.next_ids(DRAWS)
    backend.client.delete(strategy.keys(first)[MAIN_KEYS[strategy.name]])
    newcomer = strategy.make(backend)
    if strategy.factory in ("date_prefixed", "daily_code"):
        with pytest.raises(DayMissing, match="vanished"):
            newcomer.next_id()
    else:
        newcomer.next_id()
        assert newcomer.rewinds == 1
    drawn += first.next_ids(DRAWS)
    assert duplicates(drawn) == {}


class _FloorFromTheFirstFlush(ImpliedFloor):
    """A bound column's floor as the ORM gives it: unreadable before the process's first flush
    (`readable` False), then the table's highest value."""

    def __init__(self, rows: list[int]):
        self.rows = rows
        self.readable = False

    def now(self) -> Callable[..., Any] | None:
        return (lambda: max(self.rows)) if self.readable else None


def test_a_counter_lost_beside_its_claim_is_judged_once_the_floor_can_be_read(
    backend: Backend,
) -> None:
    """Only a sequence's counter is lost (its claim stays) while a process holds 93 values the
    table does not have yet. A new process draws before it can read its column floor: with
    neither a mark nor a floor it restarts the counter at 0 (logged; those values may repeat,
    not covered). Once it can read the floor, its next call raises the counter by the headroom
    instead of trusting the one it re-created, above the held values."""
    first = backend.ids().sequence("judged")
    held = first.next_ids(100)
    floor = _FloorFromTheFirstFlush(held[:7])  # committed: 7 rows
    backend.client.delete(first.counter_key)
    newcomer = backend.ids().sequence("judged")
    newcomer.implied_floor = floor
    newcomer.next_ids(30)  # before its floor can be read: from 0
    assert newcomer.rewinds == 1
    floor.readable = True  # as after its first flush
    after = newcomer.next_ids(50)
    assert not set(after) & set(held)
    assert min(after) > max(held[:7]) + newcomer.headroom
    assert duplicates(after + first.next_ids(10)) == {}
