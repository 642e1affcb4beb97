"""The staged failover to a lagging replica, as a user whose ACL denies ``INFO``.

With ``INFO`` the node's identity catches this failover even for a process that saw none of the
lost writes (``tests/test_faults.py::test_a_failover_to_a_lagging_replica_is_caught_by_a_process_that_saw_none_of_the_lost_writes``).
Without it nothing can tell the promoted replica from its old master, so the library says so: a
warning at the first use names ``INFO replication``, what the warning says it costs is what
happens, and ``strict=True`` refuses the node before it hands out a single value.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import pytest

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable
from tests.support.cpu_load import cpu_load
from tests.support.topologies import SentinelTopology

APP_USER = ("ids", "secret")
WITHOUT_INFO = "on >secret ~* +@all -info"
"""The application's ACL user: everything but ``INFO`` (ACLs are not replicated: set on each)."""


@pytest.mark.slow
def test_a_failover_without_info_is_warned_about_and_refused_under_strict(
    own_sentinels: SentinelTopology, caplog: pytest.LogCaptureFixture
) -> None:
    for server in own_sentinels.servers:
        server.client().execute_command("ACL", "SETUSER", APP_USER[0], *WITHOUT_INFO.split())
    own_sentinels.wait_replicas_in_sync()
    prefix = f"f{uuid.uuid4().hex[:10]}"

    def ids(strict: bool) -> Any:
        return RedisIds.from_sentinel(
            own_sentinels.addresses,
            own_sentinels.service,
            prefix=prefix,
            retry_after=0.1,
            replicas=0,  # the lost writes are handed out before the failover
            strict=strict,
            username=APP_USER[0],
            password=APP_USER[1],
        )

    refused = ids(strict=True).sequence("ns")
    with pytest.raises(ConfigError, match=r"INFO replication.*\+info"):
        refused.next_id()
    assert not list(own_sentinels.master().client().scan_iter(match=f"{prefix}:*"))
    idle, busy = ids(strict=False).sequence("ns"), ids(strict=False).sequence("ns")
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        before = [idle.next_id(), *busy.next_ids(20)]
    warnings = [r.getMessage() for r in caplog.records if r.name == "sa_redis_ids"]
    assert len(warnings) == 2 and all("INFO replication" in w for w in warnings)  # per node

    with cpu_load():  # the replica, the master and this process compete for the cores
        own_sentinels.wait_replicas_in_sync()
        (replica,) = own_sentinels.replicas()
        old = own_sentinels.master()
        replica.pause()  # SIGSTOP: the replica receives nothing more …
        old.client().client_kill_filter(_type="replica")  # … not even from its socket's buffer
        lost = busy.next_ids(30)  # only the master has these
        old.kill()  # the master dies with them; the replica wakes up and is promoted
        replica.resume()
        own_sentinels.wait_master_other_than(old)
        after: list[int] = []
        deadline = time.monotonic() + 10
        while len(after) < 30 and time.monotonic() < deadline:
            try:
                after.append(idle.next_id())
            except RedisUnavailable:
                time.sleep(0.05)
    assert len(after) == 30
    assert not set(after) & set(before)
    assert set(after) & set(lost), "what the warning said: the promotion went unnoticed"
    assert idle.rewinds == 0
    with pytest.raises(ConfigError, match="INFO replication"):
        refused.next_id()  # still refused on the new master: it never handed out a value
