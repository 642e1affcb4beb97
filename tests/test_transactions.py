"""A sequence's sound call is one transaction, not a script, where the node has a fast lane.

The transaction (``MULTI``, ``GET`` of the identity marker, ``INCRBY``, ``EXEC``) takes values
without a check on the server; the generator checks what it read at the moment it took, and where
the marker did not vouch for the node the script judges what the transaction found. These tests
prove each case on the backend table: the transaction is what a sound call sends on the real
servers (fakeredis has no fast lane and calls the script), an expired marker loses no value, a
counter set back by less than a batch is still healed above what was issued, and an error inside
the transaction is reported as the script reports it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

from sa_redis_ids import RedisIds, ScriptError, SequenceExhausted
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.redis.fastlane import FastLane
from sa_redis_ids.redis.nodes import Node
from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.support.uniqueness import draw_in_processes, duplicates


class Calls:
    """What a node was asked: the scripts run (name, and the ``pre`` argument with which a
    sequence script judges a transaction, None without one) and each transaction's outcome
    (EXEC's replies, or None)."""

    def __init__(self, node: Node):
        self.scripts: list[tuple[str, str | None]] = []
        self.transactions: list[list[Any] | None] = []
        run, transact = node.run, node.transact
        run_async, transact_async = node.run_async, node.transact_async

        def counted_run(name: str, keys: Any, args: Any) -> Any:
            self.scripts.append((name, args[5] if len(args) > 5 else None))
            return run(name, keys, args)

        def counted_transact(key: Any, commands: Any) -> Any:
            done = transact(key, commands)
            self.transactions.append(done)
            return done

        async def counted_run_async(name: str, keys: Any, args: Any) -> Any:
            self.scripts.append((name, args[5] if len(args) > 5 else None))
            return await run_async(name, keys, args)

        async def counted_transact_async(key: Any, commands: Any) -> Any:
            done = await transact_async(key, commands)
            self.transactions.append(done)
            return done

        node.run = counted_run  # type: ignore[method-assign]
        node.transact = counted_transact  # type: ignore[method-assign]
        node.run_async = counted_run_async  # type: ignore[method-assign]
        node.transact_async = counted_transact_async  # type: ignore[method-assign]

    def reset(self) -> None:
        self.scripts.clear()
        self.transactions.clear()


def watched(ids: RedisIds | AsyncRedisIds) -> Calls:
    return Calls(ids.nodes.nodes[0])


def test_a_sound_call_is_one_transaction_on_a_real_server_and_a_script_elsewhere(
    backend: Backend,
) -> None:
    ids = backend.ids()
    users = ids.sequence("users")
    calls = watched(ids)
    assert users.next_ids(2) == [1, 2]  # the first call learns the node's identity: a script
    assert [name for name, _ in calls.scripts] == ["sequence"] and not calls.transactions
    calls.reset()
    drawn = [users.next_id() for _ in range(30)] + users.next_ids(5)
    assert drawn == list(range(3, 38)), "dense: no value skipped"
    if backend.name == "fake":
        assert ids.nodes.nodes[0].transactions is False
        assert len(calls.scripts) == 31 and not calls.transactions
        return
    assert ids.nodes.nodes[0].transactions is True
    assert len(calls.transactions) == 31 and all(calls.transactions)
    # A marker that expired just before a call (its one-second life) leaves the judging to the
    # script; anything else is served by the transaction alone.
    assert len(calls.scripts) <= 2
    assert all(pre is not None for _, pre in calls.scripts), "the script judged a transaction"


def test_a_sound_call_costs_the_server_no_script(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    users.next_id()
    client = server.client()
    client.config_resetstat()
    for _ in range(200):
        users.next_id()
    stats = client.info("commandstats")
    assert stats["cmdstat_exec"]["calls"] == 200
    assert stats["cmdstat_incrby"]["calls"] == 200
    assert stats["cmdstat_mget"]["calls"] == 200
    # At most a script call a second, when the identity marker expired.
    assert stats.get("cmdstat_evalsha", {"calls": 0})["calls"] <= 5
    assert client.get(users.counter_key) == b"201"


def test_an_expired_marker_loses_no_value(backend: Backend) -> None:
    ids = backend.ids()
    users = ids.sequence("users")
    calls = watched(ids)
    first = users.next_ids(3)
    for _ in range(3):
        backend.client.delete(users.identity_key)  # as its one-second expiry does
        calls.reset()
        first += users.next_ids(3)
        if backend.name != "fake":
            assert calls.scripts == [("sequence", str(first[-3] - 1))], (
                "the transaction took, the script kept its values"
            )
        first.append(users.next_id())
    assert first == list(range(1, len(first) + 1)), "no gap: each transaction's values kept"
    assert users.rewinds == 0


@pytest.mark.parametrize("batch", [2, 10])
def test_a_counter_set_back_by_less_than_a_batch_is_still_healed(
    backend: Backend, batch: int, caplog: pytest.LogCaptureFixture
) -> None:
    users = backend.ids().sequence("users", headroom=0)
    issued = users.next_ids(20)
    backend.client.set(users.counter_key, 20 - batch // 2)  # behind by less than one batch
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        after = users.next_ids(batch)
    # Healed to the guard (20, headroom 0), plus the drift of a stalled machine if any; on the
    # real servers the transaction's values are dropped (a gap), never issued.
    assert 21 <= after[0] <= 21 + batch + users.drift_most
    assert after == list(range(after[0], after[0] + batch))
    assert not set(issued) & set(after)
    assert users.rewinds == 1, "the set-back is noticed, though the transaction raised it"
    assert f"state {20 - batch // 2}" in caplog.text or f"from {20 - batch // 2}" in caplog.text


def test_a_lost_counter_is_reported_missing_after_a_transaction_recreated_it(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    users = backend.ids().sequence("users", headroom=100)
    users.next_ids(50)
    backend.client.delete(users.counter_key)
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        after = users.next_id()
    assert 151 <= after <= 151 + users.drift_most
    assert users.rewinds == 1
    assert "state missing" in caplog.text


def test_a_counter_that_is_not_a_number_is_reported_as_without_transactions(
    backend: Backend,
) -> None:
    users = backend.ids().sequence("users")
    users.next_id()
    backend.client.set(users.counter_key, "not a number")
    with pytest.raises(ScriptError, match="not an integer"):
        users.next_id()
    assert backend.client.get(users.counter_key) == b"not a number"
    backend.client.set(users.counter_key, 7)
    assert users.next_id() == 8


def test_an_exhausted_counter_is_reported_whatever_the_transactions_took(
    backend: Backend,
) -> None:
    users = backend.ids().sequence("users", js_safe=True)
    users.next_id()
    users.ensure_at_least(users.max_value - 3)
    assert users.next_ids(3) == [users.max_value - 2, users.max_value - 1, users.max_value]
    for _ in range(3):
        with pytest.raises(SequenceExhausted):
            users.next_id()
        with pytest.raises(SequenceExhausted):
            users.next_ids(5)


def test_the_lane_reports_a_transaction_that_did_not_run_whole_and_stays_in_step(
    server: RedisServer,
) -> None:
    lane = FastLane(server.client())
    client = server.client()
    client.set("text", "abc")
    first = client.register_script("return 1")
    assert lane.transact("n", ((b"INCRBY", "n", 2),)) is None, "no script answered on n yet"
    assert client.get("n") is None, "nothing was sent"
    for key in ("n", "text"):
        assert lane.call(first, [key], []) == 1
    assert lane.transact("n", ((b"INCRBY", "n", 2), (b"GET", "n"))) == [2, b"2"]
    assert lane.transact("text", ((b"GET", "n"), (b"INCRBY", "text", 1))) is None, (
        "an error inside EXEC's reply"
    )
    assert lane.transact("n", ((b"INCRBY", "n"), (b"INCRBY", "n", 1))) is None, (
        "a queued command refused: EXEC aborts"
    )
    assert client.get("n") == b"2", "nothing of the aborted transaction ran"
    assert lane.transact("n", ((b"INCRBY", "n", 1),)) == [3], "the connection is in step"


def test_a_restarted_server_is_crossed_by_the_script_and_the_lane_reconnects(
    server: RedisServer,
) -> None:
    ids = RedisIds.from_url(server.url, retry_after=0.0)
    users = ids.sequence("users")
    calls = watched(ids)
    assert users.next_ids(3) == [1, 2, 3]
    server.stop()  # no persistence: the counter is lost, this process's guard heals it
    server.start()
    calls.reset()
    after = users.next_id()
    assert after > 3 + users.headroom - 1
    assert calls.transactions[:1] == [None], "the held connection died with the old server"
    calls.reset()
    assert users.next_id() == after + 1
    assert calls.transactions and calls.transactions[0] is not None


def test_the_asyncio_front_end_takes_the_same_transaction(server: RedisServer) -> None:
    async def main() -> tuple[list[int], Calls]:
        ids = AsyncRedisIds.from_url(server.url)
        try:
            users = ids.sequence("users")
            calls = watched(ids)
            drawn = [await users.next_id()]
            calls.reset()
            drawn += await asyncio.gather(*(users.next_id() for _ in range(50)))
            drawn += await users.next_ids(5)
            await ids.nodes.nodes[0].client.delete(users.identity_key)
            drawn.append(await users.next_id())
            return drawn, calls
        finally:
            await ids.aclose()

    drawn, calls = asyncio.run(main())
    assert sorted(drawn) == list(range(1, 58)), "unique and dense"
    assert calls.transactions and all(calls.transactions)
    assert all(pre is not None for _, pre in calls.scripts), "a script only judged a transaction"


def test_a_flushed_namespace_is_healed_though_another_transaction_recreated_its_counter(
    real_backend: Backend,
) -> None:
    early = real_backend.ids().sequence("users")  # a process that drew one value long ago
    busy_ids = real_backend.ids()
    busy = busy_ids.sequence("users")
    assert early.next_id() == 1
    drawn = busy.next_ids(100) + [busy.next_id() for _ in range(3)]
    real_backend.forget()  # FLUSHALL, for this test's keys only
    # The busy process's transaction lands first and recreates the counter at 5; before its
    # script heals it, the early process calls.
    node = busy_ids.nodes.nodes[0]
    assert node.transact(busy.counter_key, busy._transaction(5)) == [[None, None], 5]
    after = early.next_id()
    assert after not in drawn and after > max(drawn), "judged as missing: healed above its guard"
    assert early.rewinds == 1
    assert busy.next_id() > after, "the busy process goes on above the heal"


def test_a_node_that_may_evict_takes_no_transaction() -> None:
    own = RedisServer(args=["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]).start()
    try:
        ids = RedisIds.from_url(own.url)
        users = ids.sequence("users")
        calls = watched(ids)
        assert [users.next_id() for _ in range(20)] == list(range(1, 21))
        node = ids.nodes.nodes[0]
        assert node.transactions is False
        assert len(calls.scripts) == 20 and not calls.transactions
        assert node.transact(users.counter_key, users._transaction(1)) is None
        assert own.client().get(users.counter_key) == b"20", "nothing sent"
    finally:
        own.stop()


def test_after_a_restart_each_namespace_starts_with_its_script(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url, retry_after=0.0)
    users, orders = ids.sequence("users"), ids.sequence("orders")
    assert users.next_ids(2) == [1, 2] and orders.next_ids(2) == [1, 2]
    assert users.next_id() == 3 and orders.next_id() == 3  # transactions on one connection
    server.stop()
    server.start()
    client = server.client()
    calls = watched(ids)
    healed_users = users.next_id()  # its transaction meets the dead connection: its script
    healed_orders = orders.next_id()  # the new connection has judged no "orders": its script
    assert healed_users > 3 and healed_orders > 3
    assert calls.transactions == [None, None]
    assert calls.scripts == [("sequence", None), ("sequence", None)], "full scripts"
    assert "cmdstat_exec" not in client.info("commandstats"), "no transaction reached the server"
    calls.reset()
    assert orders.next_id() == healed_orders + 1
    assert calls.transactions and calls.transactions[0] is not None and not calls.scripts


def test_a_first_script_after_a_flush_heals_a_counter_a_transaction_recreated(
    real_backend: Backend,
) -> None:
    busy_ids = real_backend.ids()
    busy = busy_ids.sequence("users", headroom=1000)
    drawn = busy.next_ids(1000) + busy.next_ids(1000) + busy.next_ids(1000)
    real_backend.forget()
    # The busy process's transaction recreates the counter at 2500; before its script heals,
    # a new process (a floor of 2000, its first call: a script) calls.
    assert busy_ids.nodes.nodes[0].transact(busy.counter_key, busy._transaction(2500)) == [
        [None, None],
        2500,
    ]
    fresh = real_backend.ids().sequence("users", headroom=1000, floor=lambda: 2000)
    values = fresh.next_ids(1000)
    assert not set(values) & set(drawn), "a counter under a missing claim is healed: 3001 on"
    assert values[0] >= 3001 and fresh.rewinds == 1


def test_a_flush_between_a_transaction_and_its_script_leaves_no_unhealed_counter(
    real_backend: Backend,
) -> None:
    ids_a, ids_b, ids_c = (real_backend.ids() for _ in range(3))
    a, b, c = (ids.sequence("users", headroom=1000) for ids in (ids_a, ids_b, ids_c))
    issued = c.next_ids(1000) + c.next_ids(1000) + a.next_ids(1000) + a.next_ids(1000)
    issued += b.next_ids(1) + b.next_ids(1)
    real_backend.client.delete(a.identity_key)  # the marker expires
    node_a, node_b = ids_a.nodes.nodes[0], ids_b.nodes.nodes[0]
    transact_a, transact_b = node_a.transact, node_b.transact

    def flushed_after(key: Any, commands: Any) -> Any:
        done = transact_a(key, commands)
        real_backend.forget()  # lands between A's transaction and A's script
        return done

    def c_draws_meanwhile(key: Any, commands: Any) -> Any:
        done = transact_b(key, commands)
        issued.extend(c.next_ids(1000))  # between B's transaction and B's script
        return done

    node_a.transact = flushed_after  # type: ignore[method-assign]
    issued += a.next_ids(10)
    node_a.transact = transact_a  # type: ignore[method-assign]
    node_b.transact = c_draws_meanwhile  # type: ignore[method-assign]
    issued += b.next_ids(2500)
    assert len(issued) == len(set(issued)), "no value issued twice"


def test_a_batch_past_the_limit_issues_nothing_past_it(backend: Backend) -> None:
    users = backend.ids().sequence("users", js_safe=True)
    users.next_id()
    users.ensure_at_least(users.max_value - 6)
    drawn = [users.next_id()]
    assert drawn == [users.max_value - 5]
    with pytest.raises(SequenceExhausted):
        users.next_ids(8)  # this process knows it is near the top: its script refuses atomically
    drawn += users.next_ids(5)
    assert drawn[1:] == list(range(users.max_value - 4, users.max_value + 1))
    for _ in range(3):
        with pytest.raises(SequenceExhausted):
            users.next_id()
    assert backend.client.get(users.counter_key) == str(users.max_value).encode()


def test_a_process_that_does_not_know_the_top_is_near_exhausts_it_early(backend: Backend) -> None:
    behind = backend.ids().sequence("users", js_safe=True)
    ahead = backend.ids().sequence("users", js_safe=True)
    behind.next_id()
    behind.ensure_at_least(behind.max_value - 6)
    drawn = [behind.next_id(), *ahead.next_ids(3)]  # ahead: max - 4 … max - 2
    with pytest.raises(SequenceExhausted):
        behind.next_ids(3)  # two left; behind's mark says five
    top = [behind.max_value - 1, behind.max_value]
    if backend.name == "fake":  # scripts alone: the batch was refused atomically
        drawn += ahead.next_ids(2)
        assert drawn[-2:] == top
    else:  # its transaction took past the top: the last two stay unissued
        with pytest.raises(SequenceExhausted):
            ahead.next_ids(2)
    assert max(drawn) <= behind.max_value and len(drawn) == len(set(drawn))


def test_a_connection_reopened_under_the_lane_starts_with_a_script(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    users.next_ids(2)
    users.next_id()
    calls = watched(ids)
    ids.nodes.nodes[0].client.connection_pool.disconnect()  # redis-py reconnects at next use
    assert users.next_id() == 4
    assert calls.transactions == [None] and calls.scripts == [("sequence", None)]
    calls.reset()
    assert users.next_id() == 5
    assert calls.transactions and calls.transactions[0] is not None and not calls.scripts


def test_processes_drawing_while_the_marker_keeps_vanishing_issue_each_value_once_and_densely(
    real_backend: Backend,
) -> None:
    spec = real_backend.spec("sequence", "users")
    marker = real_backend.ids().sequence("users").identity_key
    drawn: list[Any] = []
    drawing = threading.Thread(
        target=lambda: drawn.extend(
            draw_in_processes(spec, processes=4, threads=4, per_thread=2000)
        )
    )
    drawing.start()
    deletions = 0
    while drawing.is_alive():  # each deletion sends every next transaction to the script
        deletions += real_backend.client.delete(marker)
        time.sleep(0.02)
    drawing.join()
    assert deletions > 0, "the markers the draws wrote were deleted under them"
    assert len(drawn) == 4 * 4 * 2000
    assert duplicates(drawn) == {}
    assert sorted(drawn) == list(range(1, len(drawn) + 1)), "the scripts kept every value"
