"""The short-ID floor benchmark runs end to end on a few rows and produces a well-formed result.

Timing is not asserted (shared, noisy machine); ``benchmarks/short_id_floor.py`` reports it. What
is asserted: each kind of process is measured every run, the ratios and the target are there, and
the benchmark leaves no key and no table behind.
"""

from __future__ import annotations

from pathlib import Path

import redis
from sqlalchemy import create_engine, inspect

from benchmarks import short_id_floor
from tests.support.services import REDIS_URL


def test_the_benchmark_times_every_kind_of_new_process(
    real_redis: redis.Redis, tmp_path: Path
) -> None:
    db_url = f"sqlite:///{tmp_path / 'bench.sqlite3'}"
    result = short_id_floor.run(REDIS_URL, db_url, rows=2_000, runs=1)
    samples = result["samples_ms"]
    assert {name: len(values) for name, values in samples.items()} == {
        "no floor": 1,
        "marker": 2,
        "merge": 1,
    }
    assert all(ms > 0 for values in samples.values() for ms in values)
    assert result["marker_over_no_floor"] > 0 and result["merge_over_no_floor"] > 0
    assert isinstance(result["target"]["met"], bool) and result["target"]["added_ms_at_most"] == 50
    assert not list(real_redis.scan_iter(match=f"{result['prefix']}:*"))
    engine = create_engine(db_url)
    assert short_id_floor.TABLE not in inspect(engine).get_table_names()
    engine.dispose()
