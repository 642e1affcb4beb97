"""The FastAPI application `benchmarks.timeouts` loads: one order ID per request.

``POST /orders/async`` draws from an `AsyncRedisIds` on the event loop, ``POST /orders/sync``
from a `RedisIds` in FastAPI's thread pool, both on ``$SA_REDIS_IDS_URL`` with the socket
timeout ``$SA_REDIS_IDS_SOCKET_TIMEOUT`` (default 1 s) and the default options otherwise. An
error is left to FastAPI: the request gets a 500, and uvicorn logs the exception.
``GET /node-errors`` counts the tries that failed, by kind (an observer, as metrics use).
"""

from __future__ import annotations

import os
from collections import Counter

from fastapi import FastAPI

from sa_redis_ids import RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.observe import Observer

URL = os.environ.get("SA_REDIS_IDS_URL", "redis://127.0.0.1:6379/0")
TIMEOUT = float(os.environ.get("SA_REDIS_IDS_SOCKET_TIMEOUT", "1.0"))
PREFIX = os.environ.get("SA_REDIS_IDS_PREFIX", "bench_timeouts")

async_ids = AsyncRedisIds.from_url(URL, socket_timeout=TIMEOUT, prefix=PREFIX)
sync_ids = RedisIds.from_url(URL, socket_timeout=TIMEOUT, prefix=PREFIX)
async_orders = async_ids.sequence("orders")
sync_orders = sync_ids.sequence("orders")


class NodeErrors(Observer):
    """Counts the errors that marked the node down, by kind (``TimeoutError`` …)."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()

    def node_error(self, node: str, kind: str) -> None:
        self.kinds[kind] += 1


node_errors = NodeErrors()
async_ids.nodes.observer = node_errors
sync_ids.nodes.observer = node_errors

app = FastAPI()


@app.post("/orders/async")
async def create_order_async() -> dict[str, int]:
    return {"id": await async_orders.next_id()}


@app.post("/orders/sync")
def create_order_sync() -> dict[str, int]:
    return {"id": sync_orders.next_id()}


@app.get("/node-errors")
async def errors_of_nodes() -> dict[str, int]:
    """The tries that failed, by kind: a ``TimeoutError`` that did not fail its request was
    answered by a second try."""
    return dict(node_errors.kinds)
