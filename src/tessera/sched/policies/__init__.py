"""Every built-in policy; importing this package registers them all in ``POLICIES``."""

from tessera.sched.policies import (  # noqa: F401
    fifo,
    gavel_compat,
    gavel_completion,
    gavel_gandiva,
    gavel_lp,
    gavel_packed,
    goodput_srpt,
    hetero_gittins,
    hetero_pack,
    hetero_srpt,
    las,
    pollux,
    shortest,
    sia,
)
