"""A randomized, seeded model of the whole system (see `tests.support.model.run`).

Several processes (sync and asyncio front ends) share one Redis the model starts itself and one
SQLite file; they draw from every strategy with default options, directly, from threads that share
calls, through ORM flushes with column floors, from forked children, and reserve, release and
maintain, while faults hit Redis between the steps. `Ledger` checks the invariants after each.
"""
