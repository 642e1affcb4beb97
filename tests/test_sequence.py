"""Sequence on every backend: order, batches, bounds, claims, script reloading."""

from __future__ import annotations

import pytest

from sa_redis_ids import ConfigError, RedisIds, SequenceExhausted
from sa_redis_ids.bounds import BIGINT_MAX, JS_SAFE_MAX
from tests.conftest import Backend


def test_values_start_at_start_and_increase(ids: RedisIds) -> None:
    users = ids.sequence("users")
    assert [users.next_id() for _ in range(3)] == [1, 2, 3]
    assert ids.sequence("other", start=1000).next_id() == 1000


def test_next_ids_returns_a_contiguous_batch(ids: RedisIds) -> None:
    users = ids.sequence("users")
    assert users.next_ids(5) == [1, 2, 3, 4, 5]
    assert users.next_id() == 6


def test_next_ids_zero_is_empty_and_negative_is_refused(ids: RedisIds) -> None:
    users = ids.sequence("users")
    assert users.next_ids(0) == []
    with pytest.raises(ValueError, match="0 or more"):
        users.next_ids(-1)
    with pytest.raises(TypeError):
        users.next_ids(2.5)  # type: ignore[arg-type]
    assert users.next_id() == 1, "refused calls must not consume values"


def test_max_value_is_bigint_or_js_safe(ids: RedisIds) -> None:
    assert ids.sequence("a").max_value == BIGINT_MAX
    assert ids.sequence("b", js_safe=True).max_value == JS_SAFE_MAX


def test_start_past_the_limit_is_config_error(ids: RedisIds) -> None:
    with pytest.raises(ConfigError, match="start"):
        ids.sequence("a", start=BIGINT_MAX + 1)
    with pytest.raises(ConfigError, match="start"):
        ids.sequence("b", start=JS_SAFE_MAX + 1, js_safe=True)
    with pytest.raises(ConfigError, match="start"):
        ids.sequence("c", start=-1)


def test_values_are_exact_at_the_top_of_bigint(ids: RedisIds) -> None:
    top = ids.sequence("top", start=BIGINT_MAX - 4)
    assert top.next_ids(3) == [BIGINT_MAX - 4, BIGINT_MAX - 3, BIGINT_MAX - 2]
    assert top.next_ids(2) == [BIGINT_MAX - 1, BIGINT_MAX]
    with pytest.raises(SequenceExhausted) as caught:
        top.next_id()
    assert caught.value.namespace == "top"


def test_exhausted_batch_takes_nothing(ids: RedisIds) -> None:
    top = ids.sequence("top", start=BIGINT_MAX - 2)
    with pytest.raises(SequenceExhausted):
        top.next_ids(4)
    assert top.next_ids(3) == [BIGINT_MAX - 2, BIGINT_MAX - 1, BIGINT_MAX]


def test_js_safe_sequence_stops_at_2_pow_53(ids: RedisIds) -> None:
    js = ids.sequence("js", start=JS_SAFE_MAX, js_safe=True)
    assert js.next_id() == JS_SAFE_MAX
    with pytest.raises(SequenceExhausted):
        js.next_id()


def test_same_options_give_the_same_generator(ids: RedisIds) -> None:
    assert ids.sequence("users") is ids.sequence("users")
    with pytest.raises(ConfigError, match="already exists"):
        ids.sequence("users", start=5)


def test_changed_start_on_a_used_namespace_is_caught_by_the_node(backend: Backend) -> None:
    backend.ids().sequence("users").next_id()
    with pytest.raises(ConfigError, match="start=5"):
        backend.ids().sequence("users", start=5).next_id()


def test_script_flush_is_survived(backend: Backend) -> None:
    users = backend.ids().sequence("users")
    assert users.next_id() == 1
    if backend.name == "cluster":
        for node in backend.client.get_primaries():
            backend.client.get_redis_connection(node).script_flush()
    else:
        backend.client.script_flush()
    assert users.next_id() == 2


def test_parse_tells_node_and_counter(ids: RedisIds) -> None:
    users = ids.sequence("users", start=10)
    value = users.next_ids(3)[-1]
    parts = users.parse(value)
    assert (parts.value, parts.node_index, parts.counter) == (12, 0, 3)
    with pytest.raises(ValueError):
        users.parse(5)
