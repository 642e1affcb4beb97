"""The randomized model of the whole system (`tests.support.model`) on real Redis servers.

A fixed set of seeds runs here; ``python -m benchmarks.soak`` runs random ones for longer. Each
seed's trace depends on the seed alone: a failure prints the violations, the steps up to the
failing one and what each step did, and the same seed runs the same steps again. Regression tests
of what seeds found sit below the seeds.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest

from benchmarks import soak
from sa_redis_ids import RedisIds
from tests.support.model.ledger import Ledger
from tests.support.model.run import execute, lock_holders, plan, run_seed
from tests.support.model.schema import LABELS
from tests.support.model.world import World
from tests.support.services import require_binary
from tests.support.topologies import ReplicatedPair, SentinelServer

STEPS = 30
SEEDS = [10, 15, 31]
"""Seeds of the default suite on the direct topology (persistence, a replica, a proxy): between
them every fault it has, a lagging replica promoted in two, and 300 concurrent single short IDs
(one shared call) in two."""
SENTINEL_SEEDS = [313]
FRONTS = ("sync", "asyncio")


@pytest.fixture(autouse=True)
def _servers() -> None:
    require_binary("redis-server")


def test_a_seed_plans_the_same_steps_every_time() -> None:
    first = plan(7, 40)
    assert first == plan(7, 40)
    assert first[0] in ("world direct", "world sentinel")
    assert plan(8, 40) != first
    assert any(step.startswith("fault ") for seed in range(5) for step in plan(seed, 40))


@pytest.mark.parametrize("seed", SEEDS)
def test_model_seed(seed: int) -> None:
    report = run_seed(seed, STEPS, mode="direct", fronts=FRONTS)
    assert not report.failed, report.text()
    assert report.steps_run == len(report.trace)
    assert report.received > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", SENTINEL_SEEDS)
def test_model_seed_on_sentinel(seed: int) -> None:
    report = run_seed(seed, STEPS, mode="sentinel", fronts=FRONTS)
    assert not report.failed, report.text()
    assert report.received > 0


def test_the_soak_runs_a_seed_and_prints_its_trace(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--seed", "5", "--steps", "3", "--mode", "direct"]
    assert soak.main(argv) == 0
    text = capsys.readouterr().out
    assert text.startswith("seed 5: 7 steps"), text  # 4 setup steps, then 3
    assert "1 seeds" in text and "failing seeds: none" in text


# -- regressions found by seeds -----------------------------------------------------------------
# (an asyncio first flush filling two generators' columns: tests/test_async_flush_floors.py)


def test_two_clean_restarts_between_calls_are_not_a_loss() -> None:
    pair = ReplicatedPair().start()  # no AOF: a restart loads the RDB that SAVE wrote
    try:
        master = pair.master
        ids = RedisIds.from_url(master.url, prefix="twice")
        users, events = ids.sequence("users"), ids.snowflake("events")
        assert users.next_ids(3) == [1, 2, 3]
        events.next_id()
        for _ in range(2):
            master.client().save()
            master.kill()
            master.start()
            pair.wait_in_sync()
        assert users.next_id() == 4
        events.next_id()
        seconds, micros = master.client().time()
        state = master.client().hget(events.state_key, "ms")
        assert state is not None
        lead = int(state) + events.layout.epoch_ms - (int(seconds) * 1000 + int(micros) // 1000)
        assert (users.rewinds, events.rewinds, lead <= 50) == (0, 0, True)
    finally:
        pair.stop()


def test_a_flush_beside_a_first_direct_draw_after_a_loss() -> None:
    """A process that never flushed the table draws a buffered sequence directly (no floor yet,
    as documented) while another of its threads flushes a row: the flush never takes a value of
    the block fetched without the floor (found by the model: it repeated a committed key)."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 sync",
        "P1 flush beta 16",
        "fault flushall",
        "P2 mix beta 2",  # one thread flushes a row, one calls next_id(), released together
    ]
    report = execute(trace)
    assert not report.failed, report.text()


def test_heals_after_one_promotion_do_not_stack_a_snowflake_ahead() -> None:
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 sync",
        "P1 flush alpha 3",
        "P2 flush alpha 3",
        "fault replica-cut",
        "fault promote",
        "P1 flush alpha 2",  # heals: the node moved
        "P2 flush alpha 2",  # heals too, above P1's new IDs
    ]
    report = execute(trace)
    assert not report.failed, report.text()


def test_a_reserve_after_a_promotion_heals_once_for_the_draws_too() -> None:
    # The second heal comes in about half the runs: eight promotions in one run.
    trace = ["world direct", "spawn P1 sync"]
    for round in range(8):
        trace += [
            "fault replica-cut",
            "P1 flush alpha 5",  # writes the replica misses
            "fault promote",
            f"P1 reserve {10_622_806 + round}",  # heals: the node moved
            "P1 draw sf 1 many",  # its row's short ID: must not heal the pool again
        ]
    report = execute(trace)
    assert not report.failed, report.text()


def test_a_counter_recreated_before_the_floor_is_judged_by_the_first_flush() -> None:
    """After a loss a process's direct draw, before its first flush, re-creates a buffered
    sequence's counter from 0 (no floor yet, as documented). Its flush then reads the floor, and
    must not trust that counter merely because it lies above the table: another process still
    holds a block fetched before the loss (found by the model, seeds 947408923 and 264865134)."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 sync",
        "P2 flush beta 9",  # P2 holds the rest of its block (and the next one)
        "fault flushall",
        "P1 mix beta 6",  # a direct draw re-creates the counter, the flush reads the floor
        "P2 draw seqb 70 many",  # from the blocks P2 fetched before the loss
    ]
    report = execute(trace)
    assert not report.failed, report.text()


def test_a_flush_after_a_floorless_first_draw_never_takes_a_committed_value() -> None:
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 sync",
        "spawn P3 sync",
        "P1 flush beta 1",  # P1's mark: counter 1
        "P3 flush beta 9",  # the table holds counters up to 10
        "fault flushall",
        "P2 draw dp 7 many",  # no flush yet in P2: drawn without the floor, from 0
        "P1 flush beta 5",  # reads the floor only if the counter is missing or below its mark
    ]
    report = execute(trace)
    assert not report.failed, report.text()


def test_a_block_held_from_a_first_heal_across_a_second_loss_is_counted_as_the_documented_limit() -> (
    None
):
    """A heal lands at the floor plus the headroom: the same counter each time the table has not
    moved. A block a process prefetched in the heal of a first loss and still holds, unused, at a
    second loss is issued again by a new process that heals the second one from the same floor
    (the documented limit of a second loss while values drawn after the first heal are held).
    The ledger counts exactly those repeats apart, and nothing else of the run fails. Found by
    soak seed 462434077 (restarts from empty, a new asyncio process healing the second loss in a
    mix); the same cause, in fewer steps."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 sync",
        "P1 flush beta 3",  # P1 holds the rest of its block
        "P2 flush beta 60",  # the table holds up to 110
        "fault flushall",
        "P1 draw seqb 3 many",  # from its old block; its prefetch heals: floor + headroom
        "fault flushall",
        "spawn P3 sync",
        "P3 flush beta 5",  # heals from the same floor: the same counter
        "P1 draw seqb 60 many",  # the rest of its old block, then the one P3's values came from
    ]
    report = execute(trace)
    assert not report.failed, report.text()
    held = [line for line in report.limits if "held uncommitted at the next one" in line]
    assert len(held) == 5, report.text()
    # and P1's insert of those values fails on the table's unique key: nothing else
    (failed,) = [line for line in report.limits if line not in held]
    assert "IntegrityError on the values above" in failed, report.text()


def test_a_promotion_restarted_before_any_call_is_counted_as_the_documented_limit() -> None:
    """A replica that missed writes, promoted and restarted from its own data before any process
    called it, looks like a restart: the promotion goes unseen and what it missed is handed out
    again (documented as not covered). The ledger counts those repeats apart. Found by soak seed
    355758784."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 sync",
        "P1 flush alpha 3",  # P1 has read its floors: its mark is all it checks from now on
        "fault replica-cut",  # the replica misses what follows
        "P2 flush alpha 20",
        "fault promote",
        "fault restart-rdb",  # before any process called the promoted replica
        "P1 flush alpha 20",  # P2's values again: the node looks restarted, nothing is healed
    ]
    report = execute(trace)
    assert not report.failed, report.text()
    unseen = [line for line in report.limits if "promotion between them went unseen" in line]
    assert unseen, report.text()


def test_a_replica_promoted_right_after_its_full_resync_is_seen_as_a_promotion() -> None:
    """A restart makes the replica resynchronise in full; cut right after, it receives nothing
    more, so its backlog is empty and starts where its previous ID's history ended, as after a
    restart from RDB. Promoted later, it must still count as a promotion for a process idle since
    before the restart: that process heals above what the old master issued meanwhile. Found by
    soak seed 659772732."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 asyncio",
        "P2 flush beta 7",  # P2's last call, before the restart: its mark is below what follows
        "fault restart-aof",  # the replica resynchronises in full
        "fault replica-cut",  # at once: its backlog stays empty
        "P1 mix beta 12",  # only the old master has these
        "fault promote",
        "P2 mix beta 10",  # must heal: a repeat of P1's values would fail the insert
    ]
    report = execute(trace)
    assert not report.failed, report.text()
    assert report.log[-1].count("rewinds:") == 1 and "dp 1" in report.log[-1], report.text()


def test_a_new_process_calling_a_promoted_replica_does_not_see_its_promotion() -> None:
    """A lagging replica is promoted; a new process draws a daily code from it (it has no
    identity to compare, so it sees no move), then the replica restarts from its own data. A
    process that drew before the promotion takes that for a restart: the promotion went unseen,
    the documented limit, although a process had called the namespace in between. Found by soak
    seed 390229442 (the model counted the new process's call as one that could see the move)."""
    report = run_seed(390229442, soak.DEFAULT_STEPS)
    assert not report.failed, report.text()
    unseen = [line for line in report.limits if "promotion between them went unseen" in line]
    assert any("dc value" in line for line in unseen), report.text()


def test_a_restart_from_rdb_whose_backlog_wrapped_before_a_call_is_still_a_restart() -> None:
    """Two restarts (from the AOF, then from an RDB snapshot) between a process's calls; the
    process's first call afterwards merges its short-ID floor, which writes its own 600
    positions back (about 1 MB of replication stream), so the backlog the RDB restart started
    wraps before the take that follows reads the node's identity. That is still a restart:
    nothing healed, logged or counted. Found by soak seed 506760446."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "P1 threads sid 300 stalled",  # shared calls, before P1 read its floor
        "P1 threads sid 300 stalled",
        "fault restart-aof",
        "fault restart-rdb",
        "P1 flush alpha 12",
    ]
    report = execute(trace)
    assert not report.failed, report.text()
    assert "rewinds" not in report.log[-1], report.text()


def test_a_new_process_drawing_first_after_a_promotion_is_counted_as_the_documented_limit() -> None:
    """A process fetches a block after the replica was cut and holds it; the lagging replica is
    promoted. A process that never drew from the namespace draws first: the counter it finds
    stands above the table (the table holds only values the replica has too), so nothing looks
    lost and it takes the held block's values again; the holder hands them out after it. That
    is the documented limit of a new process drawing first after a loss (guaranteed for table
    values only), not a violation. Found by soak seed 906905286."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 asyncio",
        "P2 mix beta 6 stalled",
        "fault replica-cut",
        "P2 flush beta 19",  # fetches the next block: only the old master has it
        "fault promote",
        "P1 mix beta 11 stalled",  # its first draw: the held block's values again
        "P2 draw seqb 70 many",  # hands the held block out
    ]
    report = execute(trace, seed=906905286)
    assert not report.failed, report.text()
    # Repeated, and counted apart: as a first draw after the promotion or, where the new
    # process's direct draws came before its floor could be read, as those (the timing decides).
    assert report.limits, report.text()


def test_maintenance_between_a_promotion_and_a_restart_does_not_see_the_promotion() -> None:
    """The maintenance job's calls (precreating and purging days, a pool's statistics) do not look
    at the node's identity: a promotion followed by a restart before any process drew from a
    namespace goes unseen there even when maintenance ran in between, and its repeats are the
    documented limit, not a violation. Found by soak seed 936147274 (its maintenance step
    counted as a call that could have seen the promotion)."""
    report = run_seed(936147274, soak.DEFAULT_STEPS)
    assert not report.failed, report.text()
    unseen = [line for line in report.limits if "promotion between them went unseen" in line]
    assert unseen, report.text()


def test_a_counter_lost_beside_its_claim_and_recreated_before_the_floor_is_judged() -> None:
    """Only a buffered sequence's counter is deleted (its claim stays) while a process holds a
    block fetched before. A new process draws directly before it could read its column floor:
    it has neither a mark nor a floor, so the counter restarts at 0 (logged and counted). Its
    flushes then bring the floor: they must raise the counter by the headroom, not trust the
    one restarted at 0, or they take the values the first process still holds. Found by soak
    seed 539189156."""
    trace = [
        "world direct",
        "spawn P1 sync",
        "spawn P2 asyncio",
        "P1 flush beta 7",  # P1 holds the rest of its blocks
        "fault delete-key :{seqb}:seq",
        "P2 mix beta 10",  # a direct draw before the floor re-creates the counter from 0
        "P2 flush beta 15",
        "P1 flush beta 60",  # P1's held values: none of them may be P2's
    ]
    report = execute(trace, seed=539189156)
    assert not report.failed, report.text()


def test_a_direct_draw_before_the_models_are_configured_leaves_the_recreated_counter_unjudged() -> (
    None
):
    """A new process draws directly after a loss before SQLAlchemy configured its models (it
    has not flushed or queried yet), so the generator's column is not bound yet; another process,
    which read its floor before the loss, then flushes. The counter the first one recreated
    must be judged against the table (and healed), not trusted: the second process would repeat
    committed values. Found by soak seed 897744623."""
    trace = [
        "world direct",
        "spawn P3 sync",
        "spawn P4 asyncio",
        "P3 mix alpha 12",
        "P3 draw sid 1 one",
        "P4 flush beta 15",  # P4 reads its floors: from now on its mark is all it checks
        "P3 flush beta 3",  # committed values above P4's mark
        "fault restart-empty",
        "spawn P5 sync",
        "P5 draw seq 30 many",  # before any flush: the counter recreated from 0
        "P4 flush beta 20",
    ]
    report = execute(trace)
    assert not report.failed, report.text()


# -- the ledger flags what it checks (pure: no server) ------------------------------------------


def _outcome(**parts: object) -> dict[str, object]:
    found: dict[str, object] = {
        "values": {},
        "floorless": {},
        "concurrent": {},
        "errors": [],
        "released": [],
        "child": None,
        "rewinds": dict.fromkeys(LABELS, 0),
        "logged": dict.fromkeys(LABELS, 0),
    }
    found.update(parts)
    return found


def _ledger(*processes: str) -> Ledger:
    ledger = Ledger()
    for name in processes:
        ledger.joined(name)
    return ledger


def test_the_ledger_flags_a_value_handed_out_twice_but_not_a_released_one() -> None:
    ledger = _ledger("P1", "P2")
    ledger.outcome("a", "P1", _outcome(values={"seq": [1, 2], "sid": [10_000_005]}))
    ledger.outcome("b", "P2", _outcome(values={"seq": [3]}, released=[10_000_005]))
    ledger.outcome("c", "P2", _outcome(values={"sid": [10_000_005]}))
    assert ledger.violations == []
    ledger.outcome("d", "P2", _outcome(values={"seq": [2]}))
    assert len(ledger.violations) == 1 and "seq value 2 handed out twice" in ledger.violations[0]


def test_the_ledger_counts_a_repeat_of_a_value_drawn_before_the_floor_apart() -> None:
    ledger = _ledger("P1", "P2")
    ledger.outcome("a", "P1", _outcome(values={"seq": [1, 2]}))
    ledger.outcome("b", "P2", _outcome(floorless={"seq": [2]}))
    assert ledger.violations == [] and len(ledger.limits) == 1


def _fetched(start: int, stop: int, began: float | None = None) -> dict[str, object]:
    """A buffered block of ``seqb`` fetched now (from ``began``, when given)."""
    now = time.monotonic()
    return {"seqb": [(now if began is None else began, now, start, stop, 1)]}


def test_the_ledger_counts_a_value_held_uncommitted_from_one_loss_to_the_next_apart() -> None:
    """A value taken between two losses (a block fetched then) and not committed at the second
    may come again after it: a limit. Taken twice between the same two losses, taken before
    the first loss, committed at the second, or fetched across a loss: a violation."""
    unique = [("IntegrityError", False, "UNIQUE constraint failed: beta.id")]
    ledger = _ledger("P1", "P2")
    ledger.lost({"seqb"}, time.monotonic(), {})
    ledger.outcome("a", "P1", _outcome(values={"seqb": [1001]}, fetched=_fetched(1001, 1051)))
    ledger.lost({"seqb"}, time.monotonic(), {"seqb": [1001]})
    second = _outcome(values={"seqb": [1001, 1002, 1003]}, fetched=_fetched(1001, 1051))
    ledger.outcome("b", "P2", second)
    assert len(ledger.violations) == 1 and "1001 handed out twice" in ledger.violations[0]
    ledger.outcome("c", "P1", _outcome(values={"seqb": [1002]}, errors=unique))  # held over
    assert len(ledger.violations) == 1 and "1002 again" in ledger.limits[0]
    assert "IntegrityError on the values above" in ledger.limits[1]
    ledger.outcome("d", "P2", _outcome(values={"seqb": [1003]}, errors=unique))  # same span
    assert "1003 handed out twice" in ledger.violations[1]
    assert "IntegrityError is not a SaRedisIdsError" in ledger.violations[2]

    early = _ledger("P1", "P2")
    early.outcome("a", "P1", _outcome(values={"seqb": [7]}, fetched=_fetched(1, 51)))
    early.lost({"seqb"}, time.monotonic(), {})
    early.lost({"seqb"}, time.monotonic(), {})
    early.outcome("b", "P2", _outcome(values={"seqb": [7]}, fetched=_fetched(1, 51)))
    assert len(early.violations) == 1 and early.limits == []  # taken before any loss

    across = _ledger("P1", "P2")
    across.lost({"seqb"}, time.monotonic(), {})
    began = time.monotonic()  # a fetch that began before the second loss, read after it
    across.lost({"seqb"}, time.monotonic(), {})
    across.outcome("a", "P1", _outcome(values={"seqb": [5]}, fetched=_fetched(1, 51, began)))
    across.outcome("b", "P2", _outcome(values={"seqb": [5]}, fetched=_fetched(1, 51)))
    assert len(across.violations) == 1 and across.limits == []  # it may have run after it


def test_the_ledger_counts_a_new_process_drawing_first_after_a_loss_apart() -> None:
    """A process that had not called a namespace draws first after a lagging replica's
    promotion and gets a block another process fetched after the replica was cut off and still
    holds: a limit, whichever hands the value out first. Not when the new process had drawn or
    called before the promotion, when the block was fetched before the cut (the replica has
    it), when another process healed the promotion before that first draw, when the new process
    healed itself, for a value committed at the promotion, or after a loss that was not such a
    promotion (an emptied node is healed from the floor with the headroom)."""

    def repeat(
        *,
        before: str = "",
        cut_after: bool = False,
        healed_by: str = "",
        committed: bool = False,
        moved: bool = True,
    ) -> Ledger:
        ledger = _ledger("P1", "P2")
        if before == "drew":
            ledger.outcome("a", "P1", _outcome(values={"seqb": [1]}, fetched=_fetched(1, 51)))
        elif before == "called":
            ledger.touched("P1", {"seqb"}, time.monotonic())
        if not cut_after:
            ledger.replica_cut(time.monotonic())
        ledger.outcome("b", "P2", _outcome(values={"seqb": [101]}, fetched=_fetched(101, 201)))
        if cut_after:
            ledger.replica_cut(time.monotonic())
        lost = frozenset({"seqb"}) if moved else frozenset()
        ledger.lost({"seqb"}, time.monotonic(), {"seqb": [102] if committed else []}, moved=lost)
        counted = dict.fromkeys(LABELS, 0) | {"seqb": 1}
        heal = {"rewinds": counted, "logged": counted}
        if healed_by == "P2":
            ledger.outcome("c", "P2", _outcome(**heal))
        new = _outcome(values={"seqb": [102]}, fetched=_fetched(101, 151))
        ledger.outcome("d", "P1", new | (heal if healed_by == "P1" else {}))
        ledger.outcome("e", "P2", _outcome(values={"seqb": [102]}))  # its block from before
        return ledger

    ledger = repeat()
    assert ledger.violations == [] and "drew first after a loss" in ledger.limits[0]
    for flagged in (
        repeat(before="drew"),
        repeat(before="called"),
        repeat(cut_after=True),
        repeat(healed_by="P2"),
        repeat(healed_by="P1"),
        repeat(committed=True),
        repeat(moved=False),
    ):
        assert any("102 handed out twice" in line for line in flagged.violations), flagged


def test_the_ledger_excuses_a_repeat_across_an_unseen_promotion_until_the_next_loss() -> None:
    ledger = _ledger("P1", "P2")
    ledger.outcome("a", "P1", _outcome(values={"seq": [1, 2, 3]}))
    moved = time.monotonic()
    ledger.lost({"seq"}, moved, {})
    ledger.promotion_unseen("seq", moved)
    ledger.outcome("b", "P2", _outcome(values={"seq": [1]}))
    assert ledger.violations == [] and "went unseen" in ledger.limits[0]
    ledger.tables({"seq": [1, 1, 3]})  # one generator on two tables: committed in both
    assert ledger.violations == []
    ledger.lost({"seq"}, time.monotonic(), {})  # a loss every process sees: healed from here
    ledger.outcome("c", "P2", _outcome(values={"seq": [2]}))
    assert len(ledger.violations) == 1 and "2 handed out twice" in ledger.violations[0]


def test_the_ledger_flags_a_rewind_without_a_loss_and_allows_one_after() -> None:
    ledger = _ledger("P1")
    counted = dict.fromkeys(LABELS, 0) | {"seq": 1}
    ledger.outcome("a", "P1", _outcome(values={"seq": [5]}, rewinds=counted, logged=counted))
    assert len(ledger.violations) == 1 and "no fault lost" in ledger.violations[0]
    ledger = _ledger("P1")
    ledger.lost({"seq"}, 0.0, {})
    ledger.outcome("a", "P1", _outcome(values={"seq": [5]}, rewinds=counted, logged=counted))
    assert ledger.violations == []
    twice = dict.fromkeys(LABELS, 0) | {"seq": 2}
    ledger.outcome("b", "P1", _outcome(values={"seq": [6]}, rewinds=twice, logged=counted))
    assert len(ledger.violations) == 2  # not lost again, and counted 1 but logged 0


def test_the_ledger_flags_close_concurrent_short_ids_reserved_ones_and_other_errors() -> None:
    ledger = _ledger("P1")
    close = [10_000_100, 10_000_101, 10_000_102, 10_000_110, 10_500_000]
    ledger.outcome("a", "P1", _outcome(concurrent={"sid": close}))
    assert len(ledger.violations) == 1 and "6 pairs of 5" in ledger.violations[0]
    ledger.outcome("a2", "P1", _outcome(concurrent={"sid": [20_000_000, 20_000_009, 20_000_030]}))
    assert len(ledger.violations) == 1, "one close pair is chance"
    ledger.reserve([10_300_000], "at step 1")
    ledger.outcome("b", "P1", _outcome(values={"sid": [10_300_000]}))
    assert "reserved" in ledger.violations[1]
    ledger.outcome("c", "P1", _outcome(errors=[("IntegrityError", False, "UNIQUE")]))
    assert "not a SaRedisIdsError" in ledger.violations[2]
    ledger.lost({"sid"}, 0.0, {})  # a lost bitmap loses its reservations: reserve again
    ledger.reserve([10_300_001], "at step 2")
    ledger.outcome("d", "P1", _outcome(values={"sid": [10_300_001]}))
    assert len(ledger.violations) == 4


def test_the_ledger_bounds_the_snowflake_lead_unless_a_loss_needed_more() -> None:
    ledger = _ledger("P1")
    now = 1_800_000_000_000
    ledger.snowflake("a", ledger.snowflake_loss_open(), 50, now)
    assert ledger.violations == []
    ledger.snowflake("b", ledger.snowflake_loss_open(), 200, now)
    assert len(ledger.violations) == 1 and "200 ms ahead" in ledger.violations[0]
    ledger.lost({"sf"}, 0.0, {})
    ledger.snowflake("c", ledger.snowflake_loss_open(), 1000, now)
    assert len(ledger.violations) == 1  # a heal resumes headroom (1000 ms) past the clock
    ledger.snowflake("d", ledger.snowflake_loss_open(), 1200, now)
    assert len(ledger.violations) == 2


def test_a_locked_database_names_who_holds_the_lock(tmp_path: Path) -> None:
    """What a run that stopped on "database is locked" reports: the holders, by name."""
    db_path = tmp_path / "model.sqlite"
    holder = sqlite3.connect(db_path, isolation_level=None)
    try:
        holder.execute("CREATE TABLE t (x)")
        assert lock_holders(db_path, {}) == "locks on the database: none"
        holder.execute("BEGIN EXCLUSIVE")
        found = lock_holders(db_path, {})
    finally:
        holder.close()
    assert found == "locks on the database: the harness: WRITE", found


def test_the_ledger_flags_a_lock_left_on_the_database_after_a_step() -> None:
    ledger = _ledger("P1")
    ledger.outcome("a", "P1", _outcome(locks=[]))
    assert ledger.violations == []
    ledger.outcome("b", "P1", _outcome(locks=["READ"]))
    assert len(ledger.violations) == 1 and "still holds READ locks" in ledger.violations[0]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_world_cut_short_while_it_starts_stops_every_server_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A soak stopped (SIGTERM, Ctrl-C) while a seed's Sentinel world starts: the servers and
    Sentinels started so far are stopped too, none left running."""
    started: list[int] = []
    servers: list[int] = []
    real_start = SentinelServer.start

    def start(sentinel: SentinelServer) -> SentinelServer:
        if not started:  # the master and the replica run by now
            assert worlds and worlds[0].topology is not None
            servers.extend(each.process.pid for each in worlds[0].topology.servers if each.process)
        if len(started) == 2:  # the third Sentinel: the signal arrives
            raise KeyboardInterrupt
        real_start(sentinel)
        assert sentinel.process is not None
        started.append(sentinel.process.pid)
        return sentinel

    monkeypatch.setattr(SentinelServer, "start", start)
    worlds: list[World] = []
    real_world_start = World.start

    def world_start(world: World) -> World:
        worlds.append(world)
        return real_world_start(world)

    monkeypatch.setattr(World, "start", world_start)
    with pytest.raises(KeyboardInterrupt):
        execute(["world sentinel", "spawn P1 sync"])
    assert len(started) == 2 and len(servers) == 2
    assert all(_gone(pid) for pid in servers), "the master or the replica still runs"
    assert all(_gone(pid) for pid in started), "a Sentinel started before the signal still runs"
