"""Key naming, hash tags and namespace validation."""

from __future__ import annotations

import pytest
from redis.cluster import key_slot

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.keys import KeySpace, validate_namespace
from tests.support.clients import Untouchable


def test_keys_carry_prefix_and_namespace_as_hash_tag() -> None:
    space = KeySpace("sa_redis_ids", "orders")
    assert space.key("seq") == "sa_redis_ids:{orders}:seq"
    assert space.key("dp", "purged") == "sa_redis_ids:{orders}:dp:purged"


def test_all_keys_of_a_namespace_share_one_cluster_slot() -> None:
    space = KeySpace("p", "orders.eu-1")
    slots = {key_slot(space.key(part).encode()) for part in ("seq", "node", "dp", "x:y:z")}
    assert len(slots) == 1


@pytest.mark.parametrize("namespace", ["a", "orders", "A.b-c_9", "x" * 100])
def test_valid_namespaces_pass(namespace: str) -> None:
    assert validate_namespace(namespace) == namespace


@pytest.mark.parametrize(
    ("namespace", "message"),
    [
        ("", "empty"),
        ("two words", "may only hold"),
        ("with{brace}", "may only hold"),
        ("colon:inside", "may only hold"),
        ("x" * 101, "at most 100"),
        (42, "must be a str"),
    ],
)
def test_bad_namespace_is_config_error_before_redis_is_touched(
    namespace: object, message: str
) -> None:
    ids = RedisIds(Untouchable())
    with pytest.raises(ConfigError, match=message):
        ids.sequence(namespace)  # type: ignore[arg-type]


@pytest.mark.parametrize("prefix", ["", "has space", "a{b}"])
def test_bad_prefix_is_config_error(prefix: str) -> None:
    with pytest.raises(ConfigError, match="prefix"):
        RedisIds.embedded(prefix=prefix)


def test_generator_keys_live_under_the_prefix(backend) -> None:  # type: ignore[no-untyped-def]
    backend.ids().sequence("users").next_id()
    keys = set(backend.keys())
    lasting = {f"{backend.prefix}:{{users}}:seq", f"{backend.prefix}:{{users}}:seq:node"}
    # The node-identity marker lives for a second where the server has a replication ID.
    assert lasting <= keys <= lasting | {f"{backend.prefix}:{{users}}:identity"}
