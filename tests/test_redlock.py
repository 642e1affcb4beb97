"""Redlock: acquire/release, expiry, compare-and-act release and extend, fencing tokens, node failures.

Single-node behaviour runs on the backend table (fake, redis, cluster); the quorum behaviour on three
independent fakeredis servers (fast, with an injected clock and sleep) and on three independent real
``redis-server`` processes that the tests stop, restart and freeze (SIGSTOP).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from sa_redis_ids import ConfigError, LockNotAcquired, RedisIds, Redlock
from sa_redis_ids.errors import LockHeld
from sa_redis_ids.lock import drift_for, lock_keys
from tests.conftest import Backend
from tests.support.processes import process_context
from tests.support.servers import RedisServer

NAME = "orders:20261122"


def _pttl(client: Any, key: str) -> int:
    return int(client.pttl(key))


# --- names and options -------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "x" * 201, "a b", "{tag}", "ünï", "a/b", 42, None], ids=repr)
def test_bad_lock_names_are_config_errors(name: Any) -> None:
    with pytest.raises(ConfigError, match="lock name"):
        RedisIds.embedded().lock(name)


def test_good_lock_names_are_accepted() -> None:
    ids = RedisIds.embedded()
    for name in ["a", "x" * 200, "orders:2026-11-22", "A.b_c-d:9"]:
        assert ids.lock(name).name == name


@pytest.mark.parametrize(
    "options",
    [
        {"ttl": 0},
        {"ttl": -1},
        {"ttl": float("nan")},
        {"ttl": True},
        {"ttl": "10"},
        {"timeout": -0.5},
        {"timeout": float("inf")},
        {"node_timeout": 0},
        {"retry_delay": 0},
    ],
    ids=repr,
)
def test_bad_options_are_config_errors(options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        RedisIds.embedded().lock("x", **options)


def test_lock_keys_share_the_name_as_hash_tag() -> None:
    key, fence = lock_keys("sa_redis_ids", NAME)
    assert key == "sa_redis_ids:lock:{orders:20261122}"
    assert fence == key + ":fence"
    assert key_slot(key.encode()) == key_slot(fence.encode()) == key_slot(NAME.encode())


def test_each_call_of_ids_lock_is_a_new_lease() -> None:
    ids = RedisIds.embedded()
    assert ids.lock("x") is not ids.lock("x")


# --- one node, on every backend -------------------------------------------------------------


def test_acquire_sets_token_validity_and_the_key(backend: Backend) -> None:
    ids = backend.ids()
    lease = ids.lock(NAME, ttl=5)
    assert not lease.held and lease.fencing_token == 0
    with lease as held:
        assert held is lease and lease.held
        assert lease.fencing_token >= 1
        assert 0 < lease.validity <= 5 - drift_for(5)
        assert 0 < _pttl(backend.client, lease.key) <= 5000
        assert backend.keys() == sorted([lease.key, lease.fence_key])
    assert not lease.held
    assert backend.client.exists(lease.key) == 0, "release deletes the lock key"
    assert backend.keys() == [lease.fence_key], "the fence counter outlives the lock"


def test_a_held_lock_refuses_a_second_holder(backend: Backend) -> None:
    ids = backend.ids()
    with ids.lock(NAME):
        other = ids.lock(NAME)
        with pytest.raises(LockNotAcquired) as caught:
            other.acquire(timeout=0)
    assert caught.value.name == NAME
    (error,) = caught.value.errors.values()
    assert isinstance(error, LockHeld) and 0 < error.ttl_ms <= 10_000
    assert not other.held
    with other:  # free again after the first holder left
        assert other.held


def test_fencing_tokens_increase_strictly_across_holders(backend: Backend) -> None:
    tokens = []
    for round_ in range(6):
        ids = backend.ids()  # a different RedisIds (as another process would have) every round
        with ids.lock(NAME) as lease:
            tokens.append(lease.fencing_token)
        if round_ == 2:
            with ids.lock("another.lock") as other:
                assert other.fencing_token == 1, "tokens count per lock name"
    assert tokens == sorted(set(tokens)) and len(tokens) == 6


def test_expired_lock_can_be_taken_by_another(backend: Backend) -> None:
    ids = backend.ids()
    first = ids.lock(NAME, ttl=0.3).acquire()
    second = ids.lock(NAME, ttl=10, timeout=10, retry_delay=0.05).acquire()  # waits for expiry
    assert second.fencing_token > first.fencing_token
    assert first.release() is False, "the expired holder no longer owns the lock"
    assert backend.client.exists(second.key) == 1, "and its release left the new holder's key"
    assert second.release() is True


def test_non_owner_release_and_extend_do_nothing(backend: Backend) -> None:
    ids = backend.ids()
    stale = ids.lock(NAME, ttl=5).acquire()
    backend.client.delete(stale.key)  # as if it expired while its holder was paused
    owner = ids.lock(NAME, ttl=30).acquire()
    owner_value = backend.client.get(owner.key)
    assert stale.release() is False
    assert backend.client.get(owner.key) == owner_value
    stale_again = ids.lock(NAME, ttl=5)
    stale_again._held, stale_again._token = True, "not-the-owner"  # a holder whose lease is gone
    with pytest.raises(LockNotAcquired, match="lost") as caught:
        stale_again.extend(ttl=300)
    assert caught.value.name == NAME and not stale_again.held
    assert backend.client.get(owner.key) == owner_value, "another holder's key is untouched"
    assert _pttl(backend.client, owner.key) <= 30_000, "and its TTL was not extended"
    assert owner.held and owner.release() is True


def test_extend_resets_the_ttl_and_validity(backend: Backend) -> None:
    with backend.ids().lock(NAME, ttl=2) as lease:
        validity = lease.extend(ttl=60)
        assert 2 < validity <= 60 - drift_for(60)
        assert lease.validity == validity and lease.remaining > 2
        assert _pttl(backend.client, lease.key) > 2000


def test_extend_or_acquire_twice_on_the_wrong_state_is_refused(backend: Backend) -> None:
    lease = backend.ids().lock(NAME)
    with pytest.raises(LockNotAcquired, match="not held"):
        lease.extend()
    with lease, pytest.raises(LockNotAcquired, match="already held"):
        lease.acquire()
    assert lease.release() is False, "a second release is a no-op"


def test_context_manager_releases_when_the_body_raises(backend: Backend) -> None:
    lease = backend.ids().lock(NAME)
    with pytest.raises(ZeroDivisionError), lease:
        _ = 1 / 0
    assert backend.client.exists(lease.key) == 0


def test_acquire_script_contract(backend: Backend) -> None:
    """SET NX PX + INCR; the same token again renews (a retry after a lost reply); another is refused."""
    lease = backend.ids().lock(NAME)
    node = lease.nodes[0]
    script = node.script("lock_acquire")
    keys = [lease.key, lease.fence_key]
    assert script(keys=keys, args=["tok-a", "1000", "0"]) == [0, b"1"]
    assert script(keys=keys, args=["tok-a", "5000", "0"]) == [0, b"2"]
    assert 1000 < _pttl(backend.client, lease.key) <= 5000
    status, ttl_ms = script(keys=keys, args=["tok-b", "1000", "0"])
    assert status == 20 and 0 < ttl_ms <= 5000
    assert backend.client.get(lease.key) == b"tok-a" and backend.client.get(lease.fence_key) == b"2"
    release = node.script("lock_release")
    assert release(keys=[lease.key], args=["tok-b"]) == [0, 0]
    assert release(keys=[lease.key], args=["tok-a"]) == [0, 1]
    assert backend.client.exists(lease.key) == 0


def test_fence_counter_lives_forever_unless_fence_ttl_is_given(backend: Backend) -> None:
    ids = backend.ids()
    with ids.lock(NAME) as lease:
        pass
    assert _pttl(backend.client, lease.fence_key) == -1, "no expiry by default"
    with ids.lock("day.20261122", ttl=5, fence_ttl=3600) as dated:
        assert dated.fencing_token == 1
    assert 5_000 < _pttl(backend.client, dated.fence_key) <= 3_600_000
    with pytest.raises(ConfigError, match="fence_ttl"):
        ids.lock(NAME, ttl=10, fence_ttl=5)


def test_standalone_redlock_on_a_client(backend: Backend) -> None:
    with Redlock(backend.client, NAME, prefix=backend.prefix, ttl=3) as lease:
        assert lease.held and lease.quorum == 1
        assert backend.client.exists(lease.key) == 1


# --- quorum logic on three fakeredis servers (fast; injected clock and sleep) -----------------


class FakeTime:
    """A clock that only moves when the code under test sleeps (or a test says so)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] = lambda count: None

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        self.on_sleep(len(self.sleeps))


@pytest.fixture
def fake_nodes() -> list[fakeredis.FakeServer]:
    return [fakeredis.FakeServer() for _ in range(3)]


def _clients(servers: list[fakeredis.FakeServer]) -> list[fakeredis.FakeRedis]:
    return [fakeredis.FakeRedis(server=server) for server in servers]


def test_busy_lock_retries_with_random_delays_until_the_timeout(
    fake_nodes: list[fakeredis.FakeServer],
) -> None:
    clients = _clients(fake_nodes)
    holder = Redlock(clients, NAME).acquire()
    fake = FakeTime()
    draws = iter([0.0, 1.0] * 50)
    waiter = Redlock(
        clients,
        NAME,
        timeout=2.0,
        retry_delay=0.2,
        clock=fake.clock,
        sleep=fake.sleep,
        jitter=lambda: next(draws),
    )
    with pytest.raises(LockNotAcquired) as caught:
        waiter.acquire()
    assert set(caught.value.errors) == {"embedded#0", "embedded#1", "embedded#2"}
    assert all(isinstance(e, LockHeld) for e in caught.value.errors.values())
    assert fake.sleeps[:4] == [0.1, 0.2, 0.1, 0.2], (
        "delays are drawn from [retry_delay/2, retry_delay]"
    )
    assert sum(fake.sleeps) == pytest.approx(2.0), "it retries until the timeout, then stops"
    assert holder.held and all(c.get(holder.key) for c in clients), "the holder is untouched"


def test_a_waiter_gets_the_lock_once_the_holder_releases(
    fake_nodes: list[fakeredis.FakeServer],
) -> None:
    clients = _clients(fake_nodes)
    holder = Redlock(clients, NAME).acquire()
    fake = FakeTime()

    def release_on_third_sleep(count: int) -> None:
        if count == 3:
            holder.release()

    fake.on_sleep = release_on_third_sleep
    waiter = Redlock(clients, NAME, timeout=10, clock=fake.clock, sleep=fake.sleep)
    with waiter:
        assert len(fake.sleeps) == 3
        assert waiter.remaining == pytest.approx(waiter.validity), "validity counts from the reply"
        assert waiter.fencing_token > holder.fencing_token


def test_one_node_down_still_acquires_two_down_do_not(
    fake_nodes: list[fakeredis.FakeServer],
) -> None:
    clients = _clients(fake_nodes)
    fake_nodes[2].connected = False
    with Redlock(clients, NAME, timeout=0) as lease:
        assert lease.quorum == 2
        assert [bool(c.get(lease.key)) for c in clients[:2]] == [True, True]
    fake_nodes[1].connected = False
    with pytest.raises(LockNotAcquired) as caught:
        Redlock(clients, NAME, timeout=0).acquire()
    assert set(caught.value.errors) == {"embedded#1", "embedded#2"}
    assert all(isinstance(e, redis.ConnectionError) for e in caught.value.errors.values())
    assert clients[0].exists(lease.key) == 0, "a failed attempt unlocks the node it did get"


def test_an_attempt_that_outlives_its_ttl_fails_and_unlocks(
    fake_nodes: list[fakeredis.FakeServer],
) -> None:
    clients = _clients(fake_nodes)
    readings = iter([0.0, 0.0, 11.0, 11.0, 11.0, 11.0])  # the round trip "took" 11 s of a 10 s TTL
    lock = Redlock(clients, NAME, ttl=10, timeout=0, clock=lambda: next(readings))
    with pytest.raises(LockNotAcquired, match="granted too late"):
        lock.acquire()
    assert not any(c.exists(lock.key) for c in clients)


def test_fencing_token_is_raised_on_the_majority_so_later_majorities_exceed_it(
    fake_nodes: list[fakeredis.FakeServer],
) -> None:
    clients = _clients(fake_nodes)
    lock = Redlock(clients, NAME)
    clients[0].set(lock.fence_key, 10)  # node 0 has seen more acquisitions than the others
    with lock:
        assert lock.fencing_token == 11
    assert [int(c.get(lock.fence_key)) for c in clients] == [11, 11, 11]
    fake_nodes[0].connected = False  # the node that knew 11 is gone
    with Redlock(clients, NAME) as later:
        assert later.fencing_token == 12, "without the raise it would have been 2"


def test_fencing_raise_failing_on_the_majority_fails_the_attempt(
    fake_nodes: list[fakeredis.FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = _clients(fake_nodes)
    lock = Redlock(clients, NAME, timeout=0)
    clients[0].set(lock.fence_key, 10)

    def refuse(node: Any, args: list[str]) -> int:
        raise redis.ConnectionError("gone before the raise")

    monkeypatch.setattr(lock, "_raise_fence", refuse)
    with pytest.raises(LockNotAcquired, match="fencing token raised on only 1 of 3"):
        lock.acquire()
    assert not any(c.exists(lock.key) for c in clients)


def test_a_late_unlock_of_a_failed_attempt_cannot_delete_a_later_attempts_key(
    fake_nodes: list[fakeredis.FakeServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = _clients(fake_nodes)
    fake = FakeTime()
    lock = Redlock(clients, NAME, timeout=10, clock=fake.clock, sleep=fake.sleep)
    for client in clients[1:]:  # another holder's key: the first attempt gets only node 0
        client.set(lock.key, "someone-else", px=60_000)
    tokens: list[str] = []
    attempt = lock._try_plan

    def recording(token: str) -> Any:
        tokens.append(token)
        return attempt(token)

    monkeypatch.setattr(lock, "_try_plan", recording)
    fake.on_sleep = lambda count: [client.delete(lock.key) for client in clients[1:]]
    with lock:
        assert len(tokens) == 2
        for node in lock.nodes:  # the first attempt's unlock, arriving only now
            node.run("lock_release", keys=[lock.key], args=[tokens[0]])
        assert all(client.get(lock.key) == tokens[1].encode() for client in clients), (
            "a failed attempt's token must not match the key of the attempt that won"
        )


# --- three independent real redis-server processes -------------------------------------------


@pytest.fixture
def three(redis_servers: Callable[[int], list[RedisServer]]) -> Iterator[list[RedisServer]]:
    servers = redis_servers(3)
    yield servers
    for server in servers:  # never leave a frozen process behind
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)


def _ids(servers: list[RedisServer], **kwargs: Any) -> RedisIds:
    return RedisIds.from_urls([s.url for s in servers], **kwargs)


def test_real_acquire_and_release_on_all_three(three: list[RedisServer]) -> None:
    ids = _ids(three)
    with ids.lock(NAME) as lease:
        assert lease.quorum == 2
        tokens = {s.client().get(lease.key) for s in three}
        assert len(tokens) == 1 and None not in tokens, "one token on every node"
    assert [s.client().exists(lease.key) for s in three] == [0, 0, 0]


def test_real_one_node_stopped_still_acquires(three: list[RedisServer]) -> None:
    ids = _ids(three)
    three[1].stop()
    with ids.lock(NAME, timeout=5) as lease:
        assert lease.held
        assert [three[i].client().exists(lease.key) for i in (0, 2)] == [1, 1]
    assert lease.release() is False  # already released by the with block


def test_real_two_nodes_stopped_raise_lock_not_acquired(three: list[RedisServer]) -> None:
    ids = _ids(three)
    three[0].stop()
    three[2].stop()
    with pytest.raises(LockNotAcquired) as caught:
        ids.lock(NAME, timeout=1, retry_delay=0.1).acquire()
    assert caught.value.name == NAME
    down = {f"127.0.0.1:{three[i].port}/0" for i in (0, 2)}
    assert set(caught.value.errors) == down
    assert all(isinstance(e, redis.ConnectionError) for e in caught.value.errors.values())
    assert three[1].client().exists(lock_keys("sa_redis_ids", NAME)[0]) == 0
    three[0].start()
    with ids.lock(NAME, timeout=5) as lease:
        assert lease.held


def test_real_frozen_node_does_not_stall_the_acquisition(three: list[RedisServer]) -> None:
    # Clients wait up to 20 s for a reply; with a 10 s TTL, waiting that long for the frozen node
    # would leave no validity. Acquiring at all shows the per-node timeout bounded the wait.
    ids = _ids(three, socket_timeout=20)
    assert three[2].process is not None
    ids.lock("warm-up").acquire().release()  # connections open before the freeze
    three[2].process.send_signal(signal.SIGSTOP)
    try:
        with ids.lock(NAME, ttl=10, timeout=0, node_timeout=0.3) as lease:
            assert lease.validity > 0
    finally:
        three[2].process.send_signal(signal.SIGCONT)


def test_real_expired_lock_can_be_taken_by_another(three: list[RedisServer]) -> None:
    first = _ids(three).lock(NAME, ttl=0.4).acquire()
    second = _ids(three).lock(NAME, timeout=10, retry_delay=0.05).acquire()
    assert second.fencing_token > first.fencing_token
    assert first.release() is False
    # A majority holds the second lock; the third node may still have held the first one's key
    # (keys expire a few ms apart on the nodes) when the second lock was granted.
    assert sum(bool(s.client().exists(second.key)) for s in three) >= second.quorum
    assert second.release() is True


def test_real_non_owner_release_and_extend_do_nothing(three: list[RedisServer]) -> None:
    ids = _ids(three)
    stale = ids.lock(NAME, ttl=5).acquire()
    for server in three:
        server.client().delete(stale.key)  # its lease ran out
    owner = ids.lock(NAME, ttl=30).acquire()
    before = [s.client().get(owner.key) for s in three]
    assert stale.release() is False
    stale._held = True  # pretend it still believes it holds the lock
    with pytest.raises(LockNotAcquired, match="lost"):
        stale.extend(ttl=300)
    assert [s.client().get(owner.key) for s in three] == before
    assert all(0 < _pttl(s.client(), owner.key) <= 30_000 for s in three)
    assert owner.release() is True


def test_real_fencing_tokens_increase_as_the_majority_changes(three: list[RedisServer]) -> None:
    ids = _ids(three)
    tokens = []
    for stopped in (None, 0, 1, 2, None):
        if stopped is not None:
            three[stopped].stop()
        with ids.lock(NAME, timeout=5) as lease:
            tokens.append(lease.fencing_token)
        if stopped is not None:
            three[stopped].start()  # restarted without persistence: its fence counter is gone
    assert tokens == sorted(set(tokens)), tokens


# --- contention from several processes ----------------------------------------------------------


def _contend(
    lock_target: dict[str, Any], prefix: str, state_url: str, threads: int, rounds: int
) -> tuple[int, list[str]]:
    """Worker process: ``threads`` threads each take the lock ``rounds`` times and check for overlap."""
    if "cluster" in lock_target:
        ids = RedisIds.from_url(lock_target["cluster"], prefix=prefix, cluster=True)
        state: Any = RedisCluster.from_url(lock_target["cluster"])
    else:
        urls = lock_target["urls"]
        ids = (
            RedisIds.from_urls(urls, prefix=prefix)
            if len(urls) > 1
            else RedisIds.from_url(urls[0], prefix=prefix)
        )
        state = redis.Redis.from_url(state_url)
    holder, last, counter = (f"{prefix}:{{state}}:{part}" for part in ("holder", "last", "counter"))
    problems: list[str] = []
    done = [0]
    guard = threading.Lock()

    def work(slot: int) -> None:
        for _ in range(rounds):
            with ids.lock(NAME, ttl=10, timeout=120, retry_delay=0.05) as lease:
                me = f"{os.getpid()}.{slot}.{lease.fencing_token}"
                found = state.set(holder, me, get=True)
                seen = int(state.get(last) or 0)
                count = int(state.get(counter) or 0)
                state.set(last, lease.fencing_token)
                time.sleep(0.002)
                state.set(counter, count + 1)  # read-modify-write: any overlap loses an update
                still = state.get(holder)
                state.delete(holder)
            with guard:
                done[0] += 1
                if found is not None:
                    problems.append(f"{me} entered while {found!r} held the lock")
                if lease.fencing_token <= seen:
                    problems.append(f"{me}: token not above the previous holder's {seen}")
                if still != me.encode():
                    problems.append(f"{me} left while {still!r} held the lock")

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return done[0], problems


def _run_contention(
    lock_target: dict[str, Any],
    prefix: str,
    state_url: str,
    state: Any,
    *,
    processes: int = 4,
    threads: int = 3,
    rounds: int = 4,
) -> None:
    ctx = process_context()
    with ctx.Pool(processes) as pool:
        results = pool.starmap(
            _contend, [(lock_target, prefix, state_url, threads, rounds)] * processes
        )
    total = processes * threads * rounds
    assert sum(done for done, _ in results) == total
    assert [p for _, found in results for p in found] == []
    assert int(state.get(f"{prefix}:{{state}}:counter")) == total, "no increment was lost"


@pytest.mark.slow
def test_real_contention_from_processes_never_has_two_holders(three: list[RedisServer]) -> None:
    urls = [s.url for s in three]
    _run_contention({"urls": urls}, "sa_redis_ids", urls[0], three[0].client())


@pytest.mark.slow
def test_contention_on_one_node_never_has_two_holders(real_backend: Backend) -> None:
    target = real_backend.spec("sequence", "unused").target
    state_url = target.get("cluster") or target["urls"][0]
    _run_contention(
        target, real_backend.prefix, state_url, real_backend.client, processes=2, rounds=3
    )
