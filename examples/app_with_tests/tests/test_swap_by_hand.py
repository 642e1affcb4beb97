"""``ids.use(test_ids)`` by hand, for a block of a test: the shop's generators take IDs from the
test's Redis inside the block and are back on their own afterwards."""

from __future__ import annotations

from shop.db import Session
from shop.ids import TZ, ids
from shop.models import Customer, customer_ids, pickup_codes
from shop.orders import create_order


def test_a_block_on_the_test_redis(redis_ids, redis_clock, tables: None) -> None:
    with ids.use(redis_ids), Session() as session:
        assert customer_ids.redis_clock is redis_ids.nodes.clock
        customer = Customer(name="Bo")
        session.add(customer)
        session.flush()
        assert customer.id == 1

        new_day = redis_clock.to_midnight(TZ, before_ms=0)  # the test's clock moves the shop's
        order = create_order(session, customer)
        assert order.pickup_code == f"PK{new_day:%Y%m%d}0001"

    assert customer_ids.redis_clock is ids.nodes.clock
    assert pickup_codes.redis_clock is not redis_ids.nodes.clock


def test_generators_made_during_the_block_move_back_too(redis_ids) -> None:
    with ids.use(redis_ids):
        invoices = ids.sequence("invoices")
        assert invoices.next_ids(3) == [1, 2, 3]
        assert invoices.redis_clock is redis_ids.nodes.clock
    assert invoices.redis_clock is ids.nodes.clock
    assert ids.nodes is not redis_ids.nodes
