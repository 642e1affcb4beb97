"""``replicas=N``: a script's values are handed out only when N replicas acknowledged its write."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable, ReplicasNotAcknowledged
from sa_redis_ids.redis.connect import embedded_client
from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.support.topologies import ReplicatedCluster, ReplicatedPair

BAD_REPLICAS: list[Any] = [True, -1, 1.5, "1", None]
BAD_TIMEOUTS: list[Any] = [True, math.nan, math.inf, -1.0, 0, "0.5", None]
#: Where a test needs the replica to acknowledge, generous timeouts: the machine may be loaded.
PATIENT: dict[str, Any] = {"replica_timeout": 3.0, "socket_timeout": 5.0}


@pytest.mark.parametrize("replicas", BAD_REPLICAS, ids=repr)
def test_a_bad_replicas_option_is_refused_by_every_constructor(replicas: Any) -> None:
    constructors = [
        lambda: RedisIds(embedded_client(), replicas=replicas),
        lambda: RedisIds.from_url("redis://127.0.0.1:1/0", replicas=replicas),
        lambda: RedisIds.from_urls(["redis://127.0.0.1:1/0"], replicas=replicas),
        lambda: RedisIds.from_sentinel(["127.0.0.1:1"], "svc", replicas=replicas),
        lambda: RedisIds.embedded(replicas=replicas),
    ]
    for construct in constructors:
        with pytest.raises(ConfigError, match="replicas must be"):
            construct()


@pytest.mark.parametrize("timeout", BAD_TIMEOUTS, ids=repr)
def test_a_bad_replica_timeout_is_refused_by_every_constructor(timeout: Any) -> None:
    constructors = [
        lambda: RedisIds(redis.Redis(port=1), replicas=1, replica_timeout=timeout),
        lambda: RedisIds.from_url("redis://127.0.0.1:1/0", replica_timeout=timeout),
        lambda: RedisIds.from_urls(["redis://127.0.0.1:1/0"], replica_timeout=timeout),
        lambda: RedisIds.from_sentinel(["127.0.0.1:1"], "svc", replica_timeout=timeout),
    ]
    for construct in constructors:
        with pytest.raises(ConfigError, match="replica_timeout must be"):
            construct()


def test_the_embedded_redis_refuses_replicas() -> None:
    with pytest.raises(ConfigError, match="no replicas"):
        RedisIds.embedded(replicas=1)
    with pytest.raises(ConfigError, match="no replicas"):
        RedisIds(embedded_client(), replicas=1)


def test_a_replica_timeout_the_socket_would_cut_short_is_refused() -> None:
    with pytest.raises(ConfigError, match="socket_timeout"):
        RedisIds.from_url("redis://127.0.0.1:1/0", replicas=1, replica_timeout=1.0)
    ids = RedisIds.from_url(
        "redis://127.0.0.1:1/0", replicas=1, replica_timeout=1.0, socket_timeout=2.0
    )
    assert ids.nodes.nodes[0].replicas == 1


def test_replicas_the_server_does_not_have_never_acknowledge(backend: Backend) -> None:
    if backend.name == "fake":
        with pytest.raises(ConfigError, match="no replicas"):
            backend.ids(replicas=1)
        return
    if backend.name == "redis" and backend.client.info("replication")["connected_slaves"] >= 5:
        pytest.skip("the shared Redis has 5 replicas")
    seq = backend.ids(replicas=5, replica_timeout=0.05).sequence("users")
    with pytest.raises(ReplicasNotAcknowledged) as caught:
        seq.next_id()
    assert (caught.value.required, caught.value.namespace) == (5, "users")
    assert caught.value.acknowledged < 5
    assert isinstance(caught.value, RedisUnavailable)


def test_replicas_0_issues_as_before(backend: Backend) -> None:
    seq = backend.ids(replicas=0).sequence("users")
    assert seq.next_ids(3) == [1, 2, 3]


def test_acknowledged_values_are_on_the_replica(replicated_pair: ReplicatedPair) -> None:
    ids = RedisIds.from_url(replicated_pair.master.url, replicas=1, prefix="ack", **PATIENT)
    seq = ids.sequence("users")
    assert [seq.next_id() for _ in range(3)] + seq.next_ids(2) == [1, 2, 3, 4, 5]
    # WAIT returned only once the replica had the write: no polling needed.
    assert int(replicated_pair.replicas[0].client().get(seq.counter_key) or 0) == 5


def test_a_paused_replica_raises_and_nothing_is_handed_out(
    replicated_pair: ReplicatedPair,
) -> None:
    ids = RedisIds.from_url(
        replicated_pair.master.url, replicas=1, replica_timeout=0.1, prefix="ack"
    )
    seq = ids.sequence("users")
    patient = RedisIds.from_url(replicated_pair.master.url, replicas=1, prefix="ack", **PATIENT)
    assert patient.sequence("users").next_id() == 1
    replica = replicated_pair.replicas[0]
    replica.pause()
    try:
        with pytest.raises(ReplicasNotAcknowledged) as caught:
            seq.next_id()
    finally:
        replica.resume()
    assert (caught.value.required, caught.value.acknowledged) == (1, 0)
    assert caught.value.namespace == "users"
    assert replicated_pair.master.url.split("//")[1].split("/")[0] in str(caught.value)
    replicated_pair.wait_in_sync()
    assert (
        patient.sequence("users").next_id() == 3
    )  # 2 was issued by the master but never handed out: a gap


@pytest.mark.parametrize(
    "strategy", ["sequence", "snowflake", "date_prefixed", "daily_code", "short_id"]
)
def test_a_paused_replica_fails_a_generator_on_its_fast_path_too(
    replicated_pair: ReplicatedPair, strategy: str
) -> None:
    """A generator that drew before takes its script's fast path, whose reply is one integer:
    a missing acknowledgement must drop those values just the same."""
    ids = RedisIds.from_url(
        replicated_pair.master.url,
        replicas=1,
        replica_timeout=0.1,
        retry_after=0.05,
        prefix=f"warm_{strategy}",
    )
    generator = getattr(ids, strategy)("users")
    drawn = 0
    for _ in range(200):  # warm up: on a loaded machine a 0.1 s WAIT may time out now and then
        try:
            generator.next_id()
            drawn += 1
        except RedisUnavailable:
            time.sleep(0.05)
        if drawn == 3:
            break
    assert drawn == 3, "the generator could not draw with its replica in sync"
    replica = replicated_pair.replicas[0]
    replica.pause()
    try:
        with pytest.raises(ReplicasNotAcknowledged):
            generator.next_id()
    finally:
        replica.resume()


def test_a_script_flushed_from_the_server_is_loaded_again(
    replicated_pair: ReplicatedPair,
) -> None:
    ids = RedisIds.from_url(replicated_pair.master.url, replicas=1, prefix="ack", **PATIENT)
    seq = ids.sequence("u")
    assert seq.next_id() == 1
    replicated_pair.master.client().script_flush()
    assert seq.next_id() == 2


def test_replicas_on_a_cluster_with_replicas(replicated_cluster: ReplicatedCluster) -> None:
    client = RedisCluster.from_url(replicated_cluster.url, socket_timeout=5)
    try:
        ids = RedisIds(client, replicas=1, replica_timeout=3.0, prefix="ack_cluster")
        # Namespaces hash to different slots, so several masters answer.
        values = {name: ids.sequence(name).next_ids(3) for name in ("a", "b", "c", "d", "e")}
        assert all(found == [1, 2, 3] for found in values.values())
        strict = RedisIds(client, replicas=2, replica_timeout=0.05, prefix="ack_cluster")
        with pytest.raises(ReplicasNotAcknowledged) as caught:
            strict.sequence("a").next_id()
        assert (caught.value.required, caught.value.acknowledged) == (2, 1)
        assert ids.sequence("a").next_id() == 5  # 4 went to the refused call: a gap
    finally:
        client.close()


def test_a_replica_answers_readonly_which_is_unavailable_not_a_script_error(
    replicated_pair: ReplicatedPair,
) -> None:
    for replicas in (0, 1):
        seq = RedisIds.from_url(
            replicated_pair.replicas[0].url, replicas=replicas, prefix="ro"
        ).sequence("users")
        with pytest.raises(RedisUnavailable) as caught:
            seq.next_id()
        assert isinstance(caught.value.errors[seq._nodes.nodes[0].name], redis.ReadOnlyError)


def test_noreplicas_is_unavailable_not_a_script_error(
    redis_servers: Any,
) -> None:
    (server,) = redis_servers(1)
    assert isinstance(server, RedisServer)
    server.client().config_set("min-replicas-to-write", 1)
    for replicas in (0, 1):
        seq = RedisIds.from_url(server.url, replicas=replicas, prefix="nr").sequence("users")
        with pytest.raises(RedisUnavailable) as caught:
            seq.next_id()
        assert "NOREPLICAS" in str(caught.value)
        assert not isinstance(caught.value, ReplicasNotAcknowledged)
