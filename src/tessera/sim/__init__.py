"""The trace-driven simulator: a virtual clock driving the same ``decide()`` as the live
service, with preemption and restore costs, failures and retries, and metrics."""
