"""Benchmarks of sa_redis_ids, runnable from a source checkout.

- ``python -m benchmarks.ids`` (also ``sa-redis-ids bench ids``): every strategy's IDs/s and per-ID
  latency against a redis-py ``PING`` and peers (``INCR``, PostgreSQL ``nextval``, pottery's
  ``NextID``, UUIDv7), asyncio at 64 tasks, batches, and buffered throughput in threads and
  processes.
- ``benchmarks/orm_insert.py`` (``sa-redis-ids bench orm``): rows/s of ORM inserts per strategy,
  against autoincrement and UUIDv7 tables, with PostgreSQL table and index sizes.

``benchmarks/README.md`` describes each benchmark and holds measured results.

Results are printed as a table and written as JSON (and a PNG chart when matplotlib is installed)
to ``benchmarks/results/``, which git ignores. Timing targets live here, never in the test suite.
"""
