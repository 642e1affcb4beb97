"""The timeouts benchmark runs its FastAPI application under load and reports every request.

Latency is not asserted (shared, noisy machine); ``benchmarks/timeouts.py`` reports it. What is
asserted: every request of a short run with the Redis server stopped once for longer than the
socket timeout is answered (no 500: a call that timed out is tried again), and no ID twice. That
a try timed out at all depends on the calls in flight at the stall, so it is reported, not
asserted: ``tests/test_timeout_retry.py`` makes a try time out for certain.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from benchmarks import timeouts


def test_a_stalled_server_fails_no_request_of_the_fastapi_application() -> None:
    row = timeouts.run_once(
        "stalls", requests=200, concurrency=16, timeout=0.5, stalls=1, spinners=0, every=0.3
    )
    assert row["requests"] == 200
    assert row["statuses"] == {"200": 200}, row
    assert row["duplicates"] == 0
    text = timeouts.render([row])
    assert "stalls" in text and "tries timed out" in text
