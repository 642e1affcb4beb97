"""Placing orders."""

from __future__ import annotations

from sqlalchemy.orm import Session

from shop.models import Customer, Order, OrderEvent


def create_order(session: Session, customer: Customer) -> Order:
    """A new order of ``customer`` with its ``placed`` event; its number and pickup code come from
    Redis at the flush (the number starts with the local date, the code restarts every day)."""
    order = Order(customer=customer)
    session.add_all([order, OrderEvent(order=order, kind="placed")])
    session.flush()
    return order
