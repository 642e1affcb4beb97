"""The database: an engine from ``$SHOP_DATABASE_URL`` (in-memory SQLite by default)."""

from __future__ import annotations

import os

from sqlalchemy import create_engine
from sqlalchemy.orm import DeclarativeBase, sessionmaker

engine = create_engine(os.environ.get("SHOP_DATABASE_URL", "sqlite+pysqlite:///:memory:"))
Session = sessionmaker(engine)


class Base(DeclarativeBase):
    pass
