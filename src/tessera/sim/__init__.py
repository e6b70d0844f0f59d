"""The trace-driven simulator: drivers (events, rounds, Gavel's loop) moving a simulated world
on a virtual clock and asking the same ``decide()`` as the live service, with preemption and
restore costs, failures and retries, and metrics."""
