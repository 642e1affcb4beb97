"""``redis_id_column(generator)``: the declarative one-liner for a column filled from Redis."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import MappedColumn, mapped_column
from sqlalchemy.types import TypeEngine

from sa_redis_ids.orm.batches import AnyGenerator, core_of
from sa_redis_ids.orm.default import redis_id


def column_type_for(generator: AnyGenerator) -> TypeEngine[Any]:
    """``BigInteger`` for numbers, ``String(max_length)`` for codes."""
    core = core_of(generator)
    if core.python_type is str:
        return String(core.max_length)
    return BigInteger()


def redis_id_column(
    generator: AnyGenerator,
    type_: TypeEngine[Any] | None = None,
    *,
    primary_key: bool = True,
    column_floor: bool = True,
    **kwargs: Any,
) -> MappedColumn[Any]:
    """A ``mapped_column`` filled from ``generator``: the right type, ``insert_default=redis_id(...)``,
    ``autoincrement=False``; a primary key unless ``primary_key=False`` (then ``unique=True``
    unless given). The column is the generator's floor unless ``column_floor=False`` (see
    [`redis_id`][sa_redis_ids.redis_id]). Other keyword arguments go to ``mapped_column``.

    The generator is given as ``insert_default`` (the column default of an INSERT, nothing else),
    so the column reads the same in a ``MappedAsDataclass`` model, where ``default=`` would also be
    the dataclass field's default and SQLAlchemy deprecates a callable there. In such a model pass
    ``init=False`` too: the ID is assigned at the flush, not by the constructor.

    ```python
    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = redis_id_column(ids.snowflake("orders"))
        code: Mapped[str] = redis_id_column(ids.daily_code("codes"), primary_key=False)
    ```
    """
    if not primary_key:
        kwargs.setdefault("unique", True)
        kwargs.setdefault("nullable", False)
    return mapped_column(
        type_ if type_ is not None else column_type_for(generator),
        primary_key=primary_key,
        autoincrement=False,
        insert_default=redis_id(generator, column_floor=column_floor),
        **kwargs,
    )
