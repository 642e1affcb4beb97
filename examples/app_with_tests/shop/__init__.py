"""A tiny shop whose models take their IDs from Redis (an example for the pytest plugin)."""
