"""Settings for the whole suite.

Hypothesis profiles: ``dev`` (the default) draws new random examples on every run, so a
developer's runs keep exploring; ``ci`` (``make test`` sets ``HYPOTHESIS_PROFILE=ci``) derives
each property test's examples from the test itself (``derandomize``), so a CI run's verdict
depends on the code, not on the draw -- a counterexample is found by exploring, then pinned
with ``@example``, never left to surface at random in a later submission's CI.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("dev")
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
