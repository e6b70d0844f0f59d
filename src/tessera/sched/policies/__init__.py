"""Every built-in policy; importing this package registers them all in ``POLICIES``."""

from tessera.sched.policies import (  # noqa: F401
    fifo,
    gavel_compat,
    gavel_lp,
    goodput_srpt,
    hetero_gittins,
    hetero_srpt,
    las,
    pollux,
    shortest,
    sia,
)
