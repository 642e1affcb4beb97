"""The application's one ``RedisIds``, made at import as applications usually do.

Its tests never reach this Redis: they point ``ids`` at the pytest plugin's embedded one.
"""

from __future__ import annotations

import os

from sa_redis_ids import RedisIds

ids = RedisIds.from_url(os.environ.get("SHOP_REDIS_URL", "redis://localhost:6379/0"), prefix="shop")

TZ = "Asia/Shanghai"
"""The shop's days are Shanghai days: order numbers and pickup codes change at its midnight."""
