"""Numeric limits every generator is checked against."""

from __future__ import annotations

BIGINT_MAX = 2**63 - 1
"""The largest value of a signed 64-bit integer column (9223372036854775807, 19 digits)."""

JS_SAFE_MAX = 2**53 - 1
"""The largest integer a JavaScript number (an IEEE double) holds exactly."""


def limit_for(js_safe: bool) -> int:
    """The ceiling a generator must stay under: BIGINT, or 2^53−1 when ``js_safe`` is asked for."""
    return JS_SAFE_MAX if js_safe else BIGINT_MAX
