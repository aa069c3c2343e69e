"""Outcome keys of the charts: plain strings shared by ``chart_data``, ``chart_traffic`` and
the views' palette (one declaration each)."""

SWAP_IN, ALL_RESIDENT, CRASH, NOT_ROUTED, NOT_RUN, OTHER_ERROR = (
    "swap_in", "all_resident", "crash", "not_routed", "not_run", "other_error")
OVER_B = "over_b"  # more routed tokens than one step holds (n > B): no batch has them
STARTUP_CRASH, RUNTIME_CRASH, SAFE, INVALID = "startup_crash", "runtime_crash", "safe", "invalid"
# the strip's other verdicts (answers/server_verdict.py): a start-up that dies of something
# else, traffic of several requests together the only kind that crashes, undecided
NEVER_STARTS, EXPOSED, UNDECIDED = "never_starts", "exposed", "undecided"
