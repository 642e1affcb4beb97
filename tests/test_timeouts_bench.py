"""The timeouts benchmark runs its FastAPI application under load and reports every request.

Latency is not asserted (shared, noisy machine); ``benchmarks/timeouts.py`` reports it. What is
asserted: every request of a short run with the Redis server stopped once for longer than the
socket timeout is answered (no 500: the calls that timed out were tried again), and no ID twice.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from benchmarks import timeouts


def test_a_stalled_server_fails_no_request_of_the_fastapi_application() -> None:
    row = timeouts.run_once(
        "stalls", requests=200, concurrency=16, timeout=0.5, stalls=1, spinners=0, every=0.0
    )
    assert row["requests"] == 200
    assert row["statuses"] == {"200": 200}, row
    assert row["duplicates"] == 0
    assert row["timed_out_tries"] >= 1, row  # the stall made calls in flight time out
    text = timeouts.render([row])
    assert "stalls" in text and "tries timed out" in text
