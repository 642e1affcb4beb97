"""The key-type benchmark runs end to end on a few rows and reports well-formed results.

Timing is not asserted (shared, noisy machine); ``benchmarks/key_types.py`` reports it. What is
asserted: every key type this Python and server offer is measured on PostgreSQL, the sizes are
read from the server, a UUID primary key index is larger than a ``BIGINT`` one (16 bytes a key
against 8: a property of the format, not of timing), and the tables are dropped.
"""

from __future__ import annotations

import psycopg

from benchmarks import key_types


def test_the_benchmark_measures_bigint_against_uuid_keys_on_postgresql(postgres_url: str) -> None:
    result = key_types.run(rows=3000, repeat=1, batch=500, db_url=postgres_url)
    measured = {row["key"]: row for row in result["results"]}
    assert {"bigint", "bigint identity", "uuid4"} <= set(measured)
    assert ("uuid7" in measured) != ("uuid7" in result["missing"])
    server = result["machine"]["postgresql_server"]
    assert ("uuidv7() default" in measured) == (int(server.split(".")[0]) >= 18)
    for row in measured.values():
        assert row["rows"] == 3000 and row["seconds"] > 0 and row["rows_per_s"] > 0
        assert row["index_bytes"] > 0 and row["table_bytes"] > 0
    assert measured["bigint"]["time_ratio"] is None and measured["bigint"]["index_ratio"] is None
    base = measured["bigint"]["index_bytes"]
    assert measured["bigint identity"]["index_bytes"] == base
    for name in ("uuid7", "uuid4"):
        if name in measured:
            assert measured[name]["index_bytes"] > base
            assert measured[name]["index_ratio"] == measured[name]["index_bytes"] / base
    text = key_types.render(result, markdown=True)
    assert "| key | rows/s |" in text and "bigint identity" in text
    url = postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        left = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'bench_keys_%'"
        ).fetchone()
    assert left == (0,), "its tables are dropped"
