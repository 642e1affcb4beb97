"""Every key of a snowflake namespace's state, lost alone while the others survive.

A snowflake namespace spans three keys on a node:

* the state hash ``prefix:{ns}:snowflake`` (``ms``: last millisecond issued, ``c``: last slot in
  it, ``seen``: latest Redis time seen; a hash missing one field is covered in
  ``tests/test_snowflake.py``);
* the node claim ``prefix:{ns}:snowflake:node`` (which node index of how many, and the layout);
* the identity marker ``prefix:{ns}:identity`` (the node's replication ID and the claim, for about
  a second; real servers only: the embedded Redis reports no replication ID).

For each, the key alone is deleted after a process drew IDs (a burst that borrows milliseconds
ahead of the clock), the maintenance calls a snowflake has run first (``check_claims``,
``recorded_claims`` and a reseed, which a snowflake refuses) and must leave the loss as it is,
then this process and a new one draw, either first. A lost state is a loss: the process that finds
it heals above everything issued and counts it, whether it drew before (its mark) or not (the
surviving claim says the namespace is not new). A lost claim or marker loses no ID: nothing is
healed, the key is written again, and a process of another layout is refused once the claim is
back. No ID comes twice. On the backend table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import BigInteger, Column, MetaData, Table, create_engine

from sa_redis_ids import ConfigError
from sa_redis_ids.generators.snowflake import SnowflakeGenerator
from sa_redis_ids.maintenance.reseed import reseed_from_table
from tests.conftest import Backend
from tests.support.uniqueness import duplicates

KEYS = ("state", "claim", "identity")
BURST = 20_000
"""IDs drawn in one call before the loss: about 20 ms borrowed ahead of the clock."""


def key_of(generator: SnowflakeGenerator, name: str) -> str:
    return {
        "state": generator.state_key,
        "claim": generator.claim_key,
        "identity": generator.identity_key,
    }[name]


def present(backend: Backend, generator: SnowflakeGenerator) -> set[str]:
    """Which of the namespace's keys exist."""
    return {name for name in KEYS if backend.client.exists(key_of(generator, name))}


def maintain(generator: SnowflakeGenerator, tmp_path: Path) -> None:
    """Every maintenance call a snowflake namespace has: the claim checks, and a reseed, which
    it refuses (its IDs come from the Redis time: there is no counter to raise)."""
    generator.check_claims()
    assert generator.recorded_claims()
    engine = create_engine(f"sqlite:///{tmp_path / 'reseed.sqlite3'}")
    table = Table("orders", MetaData(), Column("id", BigInteger, primary_key=True))
    table.metadata.create_all(engine)
    with pytest.raises(ConfigError, match="no counter to reseed"):
        reseed_from_table(generator, engine, "orders", "id")
    engine.dispose()


def test_a_snowflake_namespace_spans_the_state_the_claim_and_the_marker(
    backend: Backend,
) -> None:
    orders = backend.ids().snowflake("orders")
    orders.next_ids(10)
    names = set(backend.keys())
    everything = {key_of(orders, name) for name in KEYS}
    assert names <= everything, "no other key"
    expected = set(KEYS) if backend.name != "fake" else {"state", "claim"}
    assert present(backend, orders) == expected


@pytest.mark.parametrize("first", ["this process", "a new process"])
@pytest.mark.parametrize("lost", KEYS)
def test_a_key_lost_alone_repeats_no_id_and_a_lost_state_is_healed_once(
    backend: Backend, tmp_path: Path, lost: str, first: str
) -> None:
    if lost == "identity" and backend.name == "fake":
        pytest.skip("the embedded Redis reports no replication ID: it keeps no marker")
    this = backend.ids().snowflake("orders")
    before = this.next_ids(BURST)
    for _ in range(5):  # a call writes the marker again once it expired (after a second)
        before.append(this.next_id())
        if lost in present(backend, this):
            break
    assert lost in present(backend, this)
    kept = present(backend, this) - {lost}
    backend.client.delete(key_of(this, lost))
    assert present(backend, this) == kept, "the others survive"
    maintain(this, tmp_path)
    assert present(backend, this) == kept, "maintenance re-creates nothing"
    new = backend.ids().snowflake("orders")  # a process that received nothing from the node
    order = [this, new] if first == "this process" else [new, this]
    after = [value for generator in order for value in generator.next_ids(500)]
    after += [value for generator in order for value in generator.next_ids(500)]
    assert min(after) > max(before)
    assert duplicates(before + after) == {}
    finder = order[0]
    expected = {id(finder): 1 if lost == "state" else 0}
    assert (this.rewinds, new.rewinds) == (
        expected.get(id(this), 0),
        expected.get(id(new), 0),
    ), "a lost state is a loss for the process that finds it, and only for it"
    assert {"state", "claim"} <= present(backend, this), "written again"


def test_a_claim_lost_alone_is_recorded_again_and_refuses_another_layout(
    backend: Backend,
) -> None:
    this = backend.ids().snowflake("orders")
    before = this.next_ids(100)
    claim = backend.client.get(this.claim_key)
    backend.client.delete(this.claim_key)
    new = backend.ids().snowflake("orders")
    after = new.next_ids(100) + this.next_ids(100)
    assert backend.client.get(this.claim_key) == claim
    with pytest.raises(ConfigError, match="bits=41/0/12"):
        backend.ids().snowflake("orders", layout="js_safe").next_id()
    assert duplicates(before + after) == {} and min(after) > max(before)
    assert this.rewinds == new.rewinds == 0
