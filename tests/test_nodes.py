"""N independent nodes: residue classes, claims, failover, and a dead Redis failing fast."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from collections.abc import Callable
from datetime import date
from datetime import time as dt_time

import pytest
import redis
from redis.exceptions import RedisClusterException

from sa_redis_ids import (
    ConfigError,
    RedisIds,
    RedisUnavailable,
    SequenceExhausted,
    fail_fast_options,
)
from sa_redis_ids.bounds import BIGINT_MAX
from sa_redis_ids.redis.connect import embedded_client
from sa_redis_ids.redis.nodes import NodeSet
from tests.support.days import shift_to_local
from tests.support.servers import RedisServer
from tests.support.uniqueness import duplicates

StartServers = Callable[[int], list[RedisServer]]


def _urls(servers: list[RedisServer]) -> list[str]:
    return [server.url for server in servers]


def test_each_of_three_nodes_issues_only_its_residue_class(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    seq = RedisIds.from_urls(_urls(servers)).sequence("users")
    values = [seq.next_id() for _ in range(30)] + seq.next_ids(30) + seq.next_ids(31)
    assert not duplicates(values)
    # Every node was used and each value's residue names the node that issued it.
    by_node = {k: [v for v in values if (v - 1) % 3 == k] for k in range(3)}
    assert all(by_node.values())
    for k, node_values in by_node.items():
        node = RedisIds.from_urls(_urls(servers)).nodes.nodes[k]
        counter = int(node.client.get(seq.counter_key))
        assert max(node_values) == 1 + (counter - 1) * 3 + k


def test_nodes_rotate_call_by_call(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    seq = RedisIds.from_urls(_urls(servers)).sequence("users")
    residues = [(seq.next_id() - 1) % 3 for _ in range(6)]
    assert sorted(residues[:3]) == [0, 1, 2]
    assert residues[:3] == residues[3:]


def test_a_reordered_node_list_is_refused(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    RedisIds.from_urls(_urls(servers)).sequence("users").next_ids(3)
    swapped = [servers[1].url, servers[0].url, servers[2].url]
    seq = RedisIds.from_urls(swapped).sequence("users")
    with pytest.raises(ConfigError, match="reordered") as caught:
        for _ in range(3):
            seq.next_id()
    assert caught.value.node is not None
    assert caught.value.namespace == "users"


def test_a_resized_node_list_is_refused(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    RedisIds.from_urls(_urls(servers)).sequence("users").next_ids(3)
    seq = RedisIds.from_urls(_urls(servers)[:2]).sequence("users")
    with pytest.raises(ConfigError, match="0/3"):
        seq.next_id()


def test_a_listed_node_twice_is_refused() -> None:
    with pytest.raises(ConfigError, match="twice"):
        RedisIds.from_urls(["redis://127.0.0.1:1/0", "redis://127.0.0.1:1/0"])


def test_issuance_goes_on_when_one_node_stops_mid_run(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    seq = RedisIds.from_urls(_urls(servers)).sequence("users")
    values: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def draw() -> None:
        try:
            while not stop.is_set():
                values.extend(seq.next_ids(7))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=draw) for _ in range(4)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    servers[1].stop()
    before = len(values)
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert len(values) > before, "issuance stopped with one node of three down"
    assert not duplicates(values)
    late = values[before + 4 * 7 :]  # past calls that may have been in flight at the stop
    assert {(v - 1) % 3 for v in late} <= {0, 2}


def test_a_node_that_comes_back_is_used_again() -> None:
    now = [0.0]
    nodes = NodeSet(["a", "b"], names=["a", "b"], retry_after=2.0, clock=lambda: now[0])
    failing = {"b"}

    def action(node):  # type: ignore[no-untyped-def]
        if node.name in failing:
            import redis

            raise redis.ConnectionError("down")
        return node.name

    assert {nodes.call("ns", action) for _ in range(4)} == {"a"}
    failing.clear()
    assert {nodes.call("ns", action) for _ in range(4)} == {"a"}, "b rests for retry_after"
    now[0] = 2.5
    assert {nodes.call("ns", action) for _ in range(4)} == {"a", "b"}


def test_all_nodes_down_raises_redis_unavailable_fast(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    ids = RedisIds.from_urls(_urls(servers))
    seq = ids.sequence("users")
    seq.next_ids(3)
    for server in servers:
        server.stop()
    started = time.monotonic()
    with pytest.raises(RedisUnavailable) as caught:
        seq.next_id()
    elapsed = time.monotonic() - started
    assert set(caught.value.errors) == {node.name for node in ids.nodes.nodes}
    assert caught.value.namespace == "users"
    print(f"all three nodes down: RedisUnavailable after {elapsed:.3f} s")


def test_all_nodes_down_chains_the_last_nodes_redis_error() -> None:
    nodes = NodeSet(["a", "b"], names=["a", "b"])

    def action(node):  # type: ignore[no-untyped-def]
        raise redis.ConnectionError(f"{node.name} is down")

    with pytest.raises(RedisUnavailable) as caught:
        nodes.call("ns", action)
    cause = caught.value.__cause__
    assert isinstance(cause, redis.ConnectionError)
    assert cause is caught.value.errors[str(cause).split()[0]]


def test_all_nodes_hung_fail_a_call_after_two_nodes_waited_on_not_four(
    redis_servers: StartServers,
) -> None:
    servers = redis_servers(4)
    timeout = 0.4
    ids = RedisIds.from_urls(_urls(servers), socket_timeout=timeout, connect_timeout=timeout)
    users = ids.sequence("users")
    assert len({users.next_id() for _ in range(4)}) == 4  # every node connected and checked
    for server in servers:
        server.pause()
    try:
        for _ in range(3):  # each call: hung nodes not yet known down, then all known down
            with pytest.raises(RedisUnavailable, match="not tried") as caught:
                users.next_id()
            # A socket timeout never fires early: two of them spend the call's budget of two.
            assert len(caught.value.errors) == 2, caught.value.errors
            assert isinstance(caught.value.__cause__, redis.TimeoutError)
    finally:
        for server in servers:
            server.resume()


def test_a_client_without_a_socket_timeout_warns_and_fail_fast_options_do_not() -> None:
    with pytest.warns(RuntimeWarning, match="no socket timeout"):
        RedisIds(redis.Redis(host="127.0.0.1", port=1, socket_timeout=None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ids = RedisIds(redis.Redis(host="127.0.0.1", port=1, **fail_fast_options()))
        RedisIds(embedded_client())
    assert ids.nodes.call_timeout == 1.0


def test_a_cluster_url_that_cannot_be_reached_raises_redis_unavailable() -> None:
    with pytest.raises(RedisUnavailable) as caught:
        RedisIds.from_url("redis://user:secret@127.0.0.1:1/0", cluster=True)
    assert isinstance(caught.value.__cause__, RedisClusterException)
    assert "secret" not in str(caught.value)


def test_a_cluster_url_of_a_server_without_cluster_mode_raises_config_error(
    real_redis: redis.Redis,
) -> None:
    kwargs = real_redis.connection_pool.connection_kwargs
    url = f"redis://{kwargs['host']}:{kwargs['port']}/0"
    with pytest.raises(ConfigError, match="cluster") as caught:
        RedisIds.from_url(url, cluster=True)
    assert isinstance(caught.value.__cause__, RedisClusterException)


def test_a_sequence_goes_on_while_another_node_has_values_left() -> None:
    start = BIGINT_MAX - 9  # ten values: five per node
    users = RedisIds([embedded_client(), embedded_client()]).sequence("users", start=start)
    got = users.next_ids(5)  # node 0's whole share
    got += [users.next_id() for _ in range(5)]  # every other call asks node 0 first
    assert sorted(got) == list(range(start, start + 10))
    with pytest.raises(SequenceExhausted):
        users.next_id()


def test_a_day_goes_on_while_another_node_has_values_left() -> None:
    codes = RedisIds([embedded_client(), embedded_client()]).daily_code("orders", digits=2)
    shift_to_local(codes, date(2031, 2, 3), dt_time(12))
    got = codes.next_ids(50)  # node 0's whole share of the day: 1, 3 … 99
    got += [codes.next_id() for _ in range(49)]  # node 1's: 2, 4 … 98
    assert sorted(codes.parse(code).counter for code in got) == list(range(1, 100))
    with pytest.raises(SequenceExhausted):
        codes.next_id()


def test_client_defaults_make_a_dead_redis_fail_in_about_a_second() -> None:
    client = RedisIds.from_url("redis://127.0.0.1:1/0").nodes.nodes[0].client
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["socket_connect_timeout"] == 1.0
    assert kwargs["socket_timeout"] == 1.0
    assert kwargs["retry"].get_retries() == 0


@pytest.mark.parametrize(
    "url", ["redis://u:p@127.0.0.1:6390/2", "rediss://127.0.0.1:6390", "unix:///tmp/redis.sock"]
)
def test_url_schemes_are_accepted(url: str) -> None:
    assert RedisIds.from_url(url).nodes.nodes[0].name


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "127.0.0.1:6379", ""])
def test_bad_url_is_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="must start with"):
        RedisIds.from_url(url)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_refuses_the_embedded_redis_instead_of_copying_it() -> None:
    # The embedded server lives in the parent's memory; a forked child only has a copy of it, so
    # both would go on from the same counters and issue the same IDs.
    seq = RedisIds.embedded().sequence("users")
    assert seq.next_id() == 1
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        try:
            os.close(read_end)
            try:
                found: object = seq.next_ids(3)
            except ConfigError as exc:
                found = f"ConfigError: {exc}"
            with os.fdopen(write_end, "w") as out:
                json.dump(found, out)
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as source:
        in_child = json.load(source)
    os.waitpid(pid, 0)
    in_parent = seq.next_ids(3)
    assert in_parent == [2, 3, 4]
    assert isinstance(in_child, str) and "fork" in in_child, in_child


def test_used_up_nodes_and_a_down_node_raise_sequence_exhausted_so_a_pool_spreads(
    redis_servers: StartServers,
) -> None:
    servers = redis_servers(3)
    pool = RedisIds.from_urls(_urls(servers), retry_after=60).short_id(
        "codes", pool_size=9, offset=100
    )
    taken = pool.next_ids(2) + pool.next_ids(2) + pool.next_ids(3)  # nodes 0 and 1 keep one each
    servers[2].kill()
    spread = pool.next_ids(2)  # no node alone has 2: the pool takes one from each that answers
    assert len(spread) == 2 and not set(spread) & set(taken)
    with pytest.raises(SequenceExhausted):  # not RedisUnavailable: the nodes that answered are full
        pool.next_id()
