"""Writes that do not issue values (reseeding, reserving) honour the node claim, and generators
can be rebuilt from the claims the nodes record."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.maintenance.claims import (
    generator_from_claims,
    options_from_config,
    recorded_config,
)
from sa_redis_ids.redis.connect import embedded_client
from tests.conftest import Backend


def redis_today(ids: RedisIds, tz: str) -> date:
    seconds, _ = ids.nodes.nodes[0].client.time()
    return datetime.fromtimestamp(int(seconds), tz=timezone.utc).astimezone(ZoneInfo(tz)).date()


def text(value: object) -> str | None:
    return value.decode() if isinstance(value, bytes) else None


# -- ensure_at_least and reserve refuse another claim, and change nothing ------------------------


def test_sequence_ensure_at_least_with_another_start_is_refused(backend: Backend) -> None:
    app = backend.ids().sequence("users", start=0)
    assert app.next_ids(3) == [0, 1, 2]
    other = backend.ids().sequence("users", start=1)
    with pytest.raises(ConfigError) as caught:
        other.ensure_at_least(500)
    message = str(caught.value)
    assert "'0/1|sequence:start=0'" in message and "'0/1|sequence:start=1'" in message
    assert caught.value.node == app.recorded_claims()[0][0].name
    assert text(backend.client.get(app.counter_key)) == "3", "the counter did not move"
    assert app.next_id() == 3


def test_sequence_ensure_at_least_records_the_claim_with_the_counter(backend: Backend) -> None:
    users = backend.ids().sequence("users", start=0)
    assert users.ensure_at_least(41) == [(users.recorded_claims()[0][0].name, None, 42)]
    assert text(backend.client.get(users.claim_key)) == "0/1|sequence:start=0"
    assert users.next_id() == 42
    with pytest.raises(ConfigError, match="sequence:start=0"):
        backend.ids().sequence("users", start=1).next_id()


def test_date_prefixed_ensure_at_least_with_another_length_is_refused(backend: Backend) -> None:
    ids = backend.ids()
    app = ids.date_prefixed("invoices", length=19, tz="UTC")
    first = app.next_id()
    today = redis_today(ids, "UTC")
    other = backend.ids().date_prefixed("invoices", length=18, tz="UTC")
    with pytest.raises(ConfigError, match=r"length=19.*length=18"):
        other.ensure_at_least(other.compose(today, 900))
    field = today.strftime("%Y%m%d")
    assert text(backend.client.hget(app._store_key(), field)) == "1"
    assert app.next_id() == first + 1


def test_daily_code_ensure_at_least_with_other_digits_is_refused(backend: Backend) -> None:
    ids = backend.ids()
    app = ids.daily_code("codes", digits=6, tz="UTC")
    app.next_id()
    today = redis_today(ids, "UTC")
    other = backend.ids().daily_code("codes", digits=4, tz="UTC")
    with pytest.raises(ConfigError, match=r"digits=6.*digits=4"):
        other.ensure_at_least(other.compose(today, 9000))
    assert app.next_id() == app.compose(today, 2)


def test_short_id_reserve_with_another_pool_is_refused(backend: Backend) -> None:
    app = backend.ids().short_id("members", pool_size=100, offset=1000)
    app.next_ids(5)
    other = backend.ids().short_id("members", pool_size=200, offset=1000)
    with pytest.raises(ConfigError, match=r"pool_size=100.*pool_size=200"):
        other.reserve([1150, 1010])
    assert int(backend.client.bitcount(app.bitmap_key)) == 5
    assert app.stats().issued == 5


def test_a_refusal_on_one_node_leaves_the_other_nodes_untouched() -> None:
    clients = [embedded_client(), embedded_client()]
    RedisIds(clients[1:]).sequence("users", start=5).next_id()  # node 1 once served alone
    users = RedisIds(clients).sequence("users", start=5)
    with pytest.raises(ConfigError, match="the node list was reordered or resized"):
        users.ensure_at_least(1000)
    assert clients[0].keys("*") == [], "node 0 got neither a counter nor a claim"


# -- rebuilding generators from the claims --------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "options", "cls"),
    [
        ("sequence", {"start": 0}, SequenceGenerator),
        ("date_prefixed", {"fmt": "YYDDD", "length": 12, "start": 0, "tz": "Asia/Tokyo"}, None),
        (
            "daily_code",
            {"code_prefix": "123", "digits": 6, "tz": "Europe/Berlin"},
            DailyCodeGenerator,
        ),
        ("short_id", {"pool_size": 500, "offset": 7}, ShortIdGenerator),
    ],
)
def test_a_generator_is_rebuilt_with_the_options_its_claim_records(
    backend: Backend, factory: str, options: dict[str, object], cls: type | None
) -> None:
    app = getattr(backend.ids(), factory)("ns", **options)
    app.next_id()
    rebuilt = generator_from_claims(backend.ids(), "ns", factory)
    assert isinstance(rebuilt, cls or DatePrefixedGenerator)
    assert rebuilt.config == app.config
    assert options_from_config(app.config) == (factory, options)


def test_no_claim_rebuilds_nothing_and_writes_nothing(backend: Backend) -> None:
    assert generator_from_claims(backend.ids(), "ns", "date_prefixed") is None
    assert backend.keys() == []


def test_an_option_that_differs_from_the_claim_is_refused(backend: Backend) -> None:
    backend.ids().sequence("users", start=0).next_id()
    with pytest.raises(ConfigError, match="start=1 differs from the claim"):
        generator_from_claims(backend.ids(), "users", "sequence", {"start": 1})
    same = generator_from_claims(backend.ids(), "users", "sequence", {"start": 0, "js_safe": True})
    assert isinstance(same, SequenceGenerator) and same.js_safe and same.next_id() == 1


def test_nodes_that_record_different_claims_are_an_error() -> None:
    clients = [embedded_client(), embedded_client()]
    RedisIds(clients[:1]).sequence("users", start=0).next_id()
    RedisIds(clients[1:]).sequence("users", start=1).next_id()
    ids = RedisIds(clients)
    with pytest.raises(ConfigError, match="record different sequence claims"):
        recorded_config(ids, "users", "sequence")


def test_a_rebuilt_generator_is_checked_against_the_node_list() -> None:
    clients = [embedded_client(), embedded_client()]
    RedisIds(clients).sequence("users").next_ids(2)
    with pytest.raises(ConfigError, match="reordered or resized"):
        generator_from_claims(RedisIds(clients[::-1]), "users", "sequence")
    assert generator_from_claims(RedisIds(clients), "users", "sequence") is not None


def test_maintenance_without_precreation_only_purges_and_reports(backend: Backend) -> None:
    ids = backend.ids()
    app = ids.date_prefixed("invoices", tz="UTC")
    app.next_id()
    rebuilt = backend.ids()
    generator_from_claims(rebuilt, "invoices", "date_prefixed")
    summary = rebuilt.maintenance(precreate=False).run_once()
    assert summary.ok and summary.created == {}
    today = redis_today(ids, "UTC")
    assert app.days_present() == [today]
    assert summary.counters[0].today == today
    assert today + timedelta(days=1) not in app.days_present()


# -- a running generator's fast path still sees another claim -----------------------------------

CLAIMED = {
    "sequence": ({"start": 0}, {"start": 1}),
    "snowflake": ({"layout": "default"}, {"layout": "js_safe"}),
    "date_prefixed": ({"length": 18}, {"length": 19}),
    "daily_code": ({"digits": 6}, {"digits": 7}),
    "short_id": ({"pool_size": 1000}, {"pool_size": 2000}),
}


@pytest.mark.parametrize("strategy", list(CLAIMED))
def test_a_claim_changed_under_a_running_generator_stops_it_at_its_next_call(
    backend: Backend, strategy: str
) -> None:
    """While a generator draws, one read of the namespace's marker stands for the claim check
    (see ``claim_and_identity`` in ``common.lua``). When the claim is replaced under it (its key
    deleted and another configuration drawing first), the marker no longer matches: the next call
    checks the claim again and is refused, with nothing taken."""
    ours, theirs = CLAIMED[strategy]
    running = getattr(backend.ids(), strategy)("users", **ours)
    for _ in range(3):
        running.next_id()
    backend.client.delete(running.claim_key)
    other = getattr(backend.ids(), strategy)("users", **theirs)
    other.next_id()
    with pytest.raises(ConfigError, match="recorded the claim"):
        running.next_id()


RECORD_ONLY = ["sequence", "date_prefixed", "daily_code", "short_id reserve", "short_id release"]


@pytest.mark.parametrize("write", RECORD_ONLY)
def test_a_claim_recorded_by_a_write_that_issues_nothing_stops_a_running_generator(
    backend: Backend, write: str
) -> None:
    """The claim key of a running generator is deleted (by hand, or evicted: its fast path reads
    only the marker), and another configuration records its claim with a write that issues
    nothing (``ensure_at_least``, ``reserve``, ``release``). That write deletes the namespace's
    marker, so the running generator checks the claim at its next call and is refused, with
    nothing taken, instead of trusting the marker for up to a second."""
    strategy = write.split()[0]
    ours, theirs = CLAIMED[strategy]
    zone = {} if strategy in ("sequence", "short_id") else {"tz": "UTC"}
    ids = backend.ids()
    running = getattr(ids, strategy)("users", **ours, **zone)
    for _ in range(3):
        running.next_id()
    backend.client.delete(running.claim_key)
    other = getattr(backend.ids(), strategy)("users", **theirs, **zone)
    if write == "short_id reserve":
        assert other.reserve([other.offset + 1500]) == 1
    elif write == "short_id release":
        assert other.release(other.offset + 1500) is False
    elif strategy == "sequence":
        other.ensure_at_least(500)
    else:
        other.ensure_at_least(other.compose(redis_today(ids, "UTC"), 900))
    [(node, recorded)] = running.recorded_claims()
    assert recorded == other.claim_for(node)
    with pytest.raises(ConfigError, match="recorded the claim"):
        running.next_id()


@pytest.mark.parametrize("strategy", ["snowflake", "date_prefixed", "daily_code"])
def test_a_sound_call_the_full_path_serves_still_answers_one_integer(
    backend: Backend, strategy: str
) -> None:
    """With the identity marker gone (it lasts a second), a running generator's next call takes
    the script's full path, which checks the claim and the node again; when both hold it answers
    the same single integer as the fast path. (A date-keyed generator's short call, dated_fast,
    finds no marker and takes nothing; dated_take then answers.)"""
    ids = backend.ids()
    generator = getattr(ids, strategy)(
        "users", **({} if strategy == "snowflake" else {"tz": "UTC"})
    )
    node = ids.nodes.nodes[0]
    replies: list[tuple[str, object]] = []
    run = node.run

    def recording(name: str, keys: Any, args: Any) -> Any:
        reply = run(name, keys, args)
        replies.append((name, reply))
        return reply

    generator.next_id()
    generator.next_id()
    backend.client.delete(generator.identity_key)
    node.run = recording  # type: ignore[method-assign]
    generator.next_id()
    # a server without a replication ID (fakeredis) never has a marker: no short call there
    short = strategy != "snowflake" and backend.name != "fake"
    names = [name for name, _ in replies]
    if strategy == "snowflake":
        assert names == ["snowflake"]
    else:
        assert names == (["dated_fast", "dated_take"] if short else ["dated_take"])
    assert type(replies[-1][1]) is int, replies
    if short:
        assert replies[0][1] is None
    replies.clear()
    generator.next_id()  # the marker is back: one short call
    assert [name for name, _ in replies] == [names[0]]  # dated_fast, or dated_take on fakeredis
    assert type(replies[0][1]) is int, replies
