"""Slow replies under load: does a FastAPI application answer every request?

``python -m benchmarks.timeouts [--requests 2000] [--concurrency 32] [--socket-timeout 1.0]``
starts a ``redis-server`` and the application of `benchmarks.timeouts_app` under uvicorn (a
process of its own, one worker), then sends ``--requests`` requests, ``--concurrency`` at a time,
half to its asyncio endpoint and half to its sync one, with every core kept busy by spinning
processes (``tests/support/cpu_load.py``). Two runs:

* ``saturated``: the CPU load alone (where one reply in a few thousand came after the socket
  timeout and failed its request);
* ``stalls``: besides, the Redis server is stopped (SIGSTOP) ``--stalls`` times during the run,
  each time for 1.3 socket timeouts, so every call in flight then times out once.

Reported per run: the status codes, the tries whose reply timed out (counted by the
application; a request whose first try timed out got its ID from a second), the IDs handed out twice (none may be), and the
latency median, 99th percentile and maximum. A 500 from a reply that came late is what a call's
deadline (two socket timeouts, see ``NodeSet.call_deadline``) prevents.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.report import table, write_json
from tests.support.cpu_load import cpu_load
from tests.support.servers import RedisServer, free_port, stop_process

ROOT = Path(__file__).resolve().parent.parent


def _start_app(url: str, port: int, timeout: float, prefix: str, log: Path) -> Any:
    env = {
        **os.environ,
        "SA_REDIS_IDS_URL": url,
        "SA_REDIS_IDS_SOCKET_TIMEOUT": str(timeout),
        "SA_REDIS_IDS_PREFIX": prefix,
    }
    args = [sys.executable, "-m", "uvicorn", "benchmarks.timeouts_app:app"]
    args += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w")
    )
    return process


async def _wait_ready(client: Any, base: str, process: Any) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            await client.post(f"{base}/orders/async")
            return
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the application did not start") from None
            await asyncio.sleep(0.1)


async def _load(
    base: str, process: Any, requests: int, concurrency: int, ready: Callable[[], None]
) -> list[Any]:
    """``(status, seconds, id or None)`` of each request, then the application's count of
    failed tries; ``ready()`` is called once the application answers."""
    import httpx  # the bench extra

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    found: list[Any] = []
    async with httpx.AsyncClient(limits=limits, timeout=60.0) as client:
        await _wait_ready(client, base, process)
        ready()
        gate = asyncio.Semaphore(concurrency)

        async def one(n: int) -> None:
            path = "/orders/async" if n % 2 else "/orders/sync"
            async with gate:
                started = time.perf_counter()
                try:
                    response = await client.post(base + path)
                    status = response.status_code
                    value = response.json()["id"] if status == 200 else None
                except httpx.HTTPError as exc:
                    status, value = type(exc).__name__, None
                found.append((status, time.perf_counter() - started, value))

        await asyncio.gather(*(one(n) for n in range(requests)))
        kinds = (await client.get(f"{base}/node-errors")).json()
    found.append(kinds)
    return found


def _stall(server: RedisServer, times: int, seconds: float, every: float, stop: Any) -> None:
    """Stop the server ``times`` times for ``seconds``, ``every`` seconds apart."""
    for _ in range(times):
        if stop.wait(every):
            return
        server.pause()
        try:
            time.sleep(seconds)
        finally:
            server.resume()


def run_once(
    name: str,
    *,
    requests: int,
    concurrency: int,
    timeout: float,
    stalls: int,
    spinners: int,
    every: float = 1.5,
) -> dict[str, Any]:
    """One run: ``stalls`` stops of the server, ``every`` seconds apart (the first that long
    after the application answers), with ``spinners`` busy processes."""
    server = RedisServer().start()
    log = Path(server.dir) / f"app-{name}.log"
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    app = _start_app(server.url, free_port(), timeout, prefix, log)
    base = f"http://127.0.0.1:{app.args[app.args.index('--port') + 1]}"
    stop = threading.Event()
    staller = threading.Thread(
        target=_stall, args=(server, stalls, 1.3 * timeout, every, stop), daemon=True
    )
    try:
        with cpu_load(spinners):
            started = time.perf_counter()
            ready = staller.start if stalls else lambda: None
            found = asyncio.run(_load(base, app, requests, concurrency, ready))
            seconds = time.perf_counter() - started
            kinds = found.pop()
    finally:
        stop.set()
        if staller.is_alive():
            staller.join()
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(10)
        except subprocess.TimeoutExpired:
            stop_process(app)
        server.stop()
    text = log.read_text(errors="replace")
    statuses = Counter(str(status) for status, _, _ in found)
    values = [value for _, _, value in found if value is not None]
    latencies = sorted(seconds for _, seconds, _ in found)
    return {
        "run": name,
        "requests": len(found),
        "seconds": round(seconds, 1),
        "statuses": dict(statuses),
        "errors_500": statuses.get("500", 0),
        "timed_out_tries": kinds.get("TimeoutError", 0),
        "node_errors": kinds,
        "unavailable_logged": text.count("RedisUnavailable"),
        "duplicates": len(values) - len(set(values)),
        "median_ms": round(statistics.median(latencies) * 1000, 1),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 1),
        "max_ms": round(latencies[-1] * 1000, 1),
    }


def run(
    *, requests: int, concurrency: int, timeout: float, stalls: int, spinners: int | None = None
) -> list[dict[str, Any]]:
    busy = spinners if spinners is not None else os.cpu_count() or 1
    return [
        run_once(
            name,
            requests=requests,
            concurrency=concurrency,
            timeout=timeout,
            stalls=count,
            spinners=busy,
        )
        for name, count in (("saturated", 0), ("stalls", stalls))
    ]


def render(rows: Sequence[dict[str, Any]]) -> str:
    headers = ["run", "requests", "200", "500", "tries timed out", "duplicates", "median ms"]
    headers += ["p99 ms", "max ms"]
    return table(
        headers,
        [
            [
                row["run"],
                row["requests"],
                row["statuses"].get("200", 0),
                row["errors_500"],
                row["timed_out_tries"],
                row["duplicates"],
                row["median_ms"],
                row["p99_ms"],
                row["max_ms"],
            ]
            for row in rows
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.timeouts", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--socket-timeout", type=float, default=1.0)
    parser.add_argument("--stalls", type=int, default=3)
    args = parser.parse_args(argv)
    rows = run(
        requests=args.requests,
        concurrency=args.concurrency,
        timeout=args.socket_timeout,
        stalls=args.stalls,
    )
    print(render(rows))
    write_json("timeouts", {"results": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
