"""Processes inserting rows through the ORM while Redis loses its data (a fault-suite load).

Each worker process defines the model with every column filled by a generator that has a floor
read from its own column (``floor_from_column``), and commits batches of rows until told to stop.
A batch that fails (an ``IntegrityError`` would mean an ID was issued twice) is counted, never
retried, so a test can require zero.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, String, create_engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import RedisIds, SaRedisIdsError, floor_from_column, redis_id
from tests.support.faults import run_beside_fault

TABLE = "fault_rows"


@dataclass(frozen=True)
class OrmLoad:
    redis_url: str
    db_url: str
    prefix: str
    batch: int = 20
    block: int = 200
    seconds: float = 30.0
    headroom: int | None = None
    """``headroom=`` of the buffered generators (None: their default)."""


def model(load: OrmLoad, engine: Any) -> Any:
    """The mapped class of :data:`TABLE`, every column from a generator with a column floor."""
    ids = RedisIds.from_url(load.redis_url, prefix=load.prefix)

    class Base(DeclarativeBase):
        pass

    def floor(attr: str) -> Any:
        return floor_from_column(engine, lambda: getattr(Row, attr))

    room = load.headroom
    seq = ids.sequence("rows", block=load.block, floor=floor("id"), headroom=room)
    dp = ids.date_prefixed("invoices", block=load.block, floor=floor("invoice"), headroom=room)
    dc = ids.daily_code("codes", digits=8, tz="UTC", floor=floor("code"))
    sf = ids.snowflake("events", floor=floor("event"))
    sid = ids.short_id("shorts", pool_size=1_000_000, offset=10_000_000, floor=floor("short"))

    class Row(Base):
        __tablename__ = TABLE
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(seq)
        )
        invoice: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(dp))
        code: Mapped[str] = mapped_column(String(dc.max_length), unique=True, default=redis_id(dc))
        event: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(sf))
        short: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(sid))
        worker: Mapped[str] = mapped_column(String(20))

    return Row


def _insert(load: OrmLoad, ready: Any, done: Any, stop: Any, out: Any) -> None:
    name = f"w{os.getpid()}"
    engine = create_engine(load.db_url)
    row = model(load, engine)
    ready.wait()
    failed: Counter[str] = Counter()
    batches = 0
    deadline = time.monotonic() + load.seconds
    while time.monotonic() < deadline and not stop.is_set():
        with Session(engine) as session:
            session.add_all([row(worker=name) for _ in range(load.batch)])
            try:
                session.commit()
                batches += 1
            except IntegrityError as exc:
                failed["IntegrityError"] += 1  # which column: in the failure's printed counts
                diag = getattr(exc.orig, "diag", None)
                failed[f"IntegrityError on {getattr(diag, 'constraint_name', None)}"] += 1
                if os.environ.get("SA_REDIS_IDS_SHOW_DUPLICATES"):
                    print(f"{name} {time.monotonic():.3f} {getattr(diag, 'message_detail', None)}")
            except SaRedisIdsError as exc:
                failed[type(exc).__name__] += 1
                time.sleep(0.01)
    engine.dispose()
    out.put(("ok", (batches, failed)))


def insert_with_fault(
    load: OrmLoad, fault: Any, *, processes: int = 3, at: float = 1.0, after: float = 1.5
) -> tuple[int, Counter[str]]:
    """Insert from ``processes`` workers, call ``fault()`` ``at`` s in, stop ``after`` s later;
    returns the batches committed and the failures by type."""
    batches, failed = 0, Counter[str]()
    for done, errors in run_beside_fault(
        _insert, load, fault, processes=processes, at=at, after=after
    ):
        batches += done
        failed.update(errors)
    return batches, failed
