"""How a script's text is built: its includes resolved, and only the ``common.lua`` helpers it
calls (directly or through another helper) prepended, since a script runs its whole text at every
call. That every built script runs is what the strategies' tests on the backend table show."""

from __future__ import annotations

import re

from sa_redis_ids.redis.scripts import script_source


def defined(source: str) -> set[str]:
    return set(re.findall(r"^local (?:function )?(\w+)", source, flags=re.MULTILINE))


def test_a_script_gets_the_helpers_it_calls_and_theirs_and_no_others() -> None:
    sequence = defined(script_source("sequence"))
    assert {"dec_gt", "node_identity_since", "ok_reply"} <= sequence
    assert {"IDENTITY_TTL_MS", "NO_REPLID"} <= sequence, "what node_identity_since uses"
    assert not {"redis_now_ms", "claim_node", "node_identity"} & sequence
    assert "redis_now_ms" in defined(script_source("snowflake"))


def test_a_shifted_clock_applies_only_to_scripts_that_read_the_clock() -> None:
    assert "unshifted_now_ms" in script_source("snowflake", 5000)
    assert script_source("sequence", 5000) == script_source("sequence")
