"""The shop's test fixtures: its own ``ids`` on the test's embedded Redis, and a database.

Only the sa_redis_ids plugin's public fixtures are used (``redis_ids_for``, ``redis_ids``,
``redis_clock``); the plugin is active because the package is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy.orm import Session as OrmSession

import shop.models  # noqa: F401 - the tables
from shop.db import Base, Session, engine
from shop.ids import ids


@pytest.fixture
def shop_redis(redis_ids_for: Any) -> Any:
    """The shop's ``ids`` and every generator of its models, on this test's embedded Redis."""
    return redis_ids_for(ids)


@pytest.fixture
def tables() -> Iterator[None]:
    Base.metadata.create_all(engine)
    yield
    Base.metadata.drop_all(engine)


@pytest.fixture
def session(shop_redis: Any, tables: None) -> Iterator[OrmSession]:
    with Session() as session:
        yield session
