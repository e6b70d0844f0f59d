"""Every built-in policy; importing this package registers them all in ``POLICIES``."""

from tessera.sched.gavel import (  # noqa: F401
    compat,
    completion,
    gandiva,
    lp_policy,
    packed_policy,
)
from tessera.sched.policies import (  # noqa: F401
    fifo,
    goodput_srpt,
    hetero_gittins,
    hetero_pack,
    hetero_srpt,
    las,
    pollux,
    shortest,
    sia,
)
