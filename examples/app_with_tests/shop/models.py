"""Customers (sequence IDs), orders (date-prefixed numbers and daily pickup codes) and order
events (snowflakes)."""

from __future__ import annotations

from sa_redis_ids import floor_from_column, redis_id
from sqlalchemy import BigInteger, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from shop.db import Base, engine
from shop.ids import TZ, ids

customer_ids = ids.sequence("customers")
order_ids = ids.date_prefixed("orders", tz=TZ, floor=floor_from_column(engine, lambda: Order.id))
pickup_codes = ids.daily_code(
    "pickup", code_prefix="PK", tz=TZ, floor=floor_from_column(engine, lambda: Order.pickup_code)
)
event_ids = ids.snowflake("order_events", tolerance_ms=50)


class Customer(Base):
    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(customer_ids)
    )
    name: Mapped[str] = mapped_column(String(100))


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(order_ids)
    )
    pickup_code: Mapped[str] = mapped_column(
        String(pickup_codes.max_length), unique=True, default=redis_id(pickup_codes)
    )
    customer_id: Mapped[int] = mapped_column(ForeignKey("customers.id"))
    customer: Mapped[Customer] = relationship()
    events: Mapped[list[OrderEvent]] = relationship(back_populates="order")


class OrderEvent(Base):
    __tablename__ = "order_events"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(event_ids)
    )
    order_id: Mapped[int] = mapped_column(ForeignKey("orders.id"))
    order: Mapped[Order] = relationship(back_populates="events")
    kind: Mapped[str] = mapped_column(String(20))
