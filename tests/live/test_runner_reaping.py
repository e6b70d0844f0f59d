"""The runner alone reaps its ranks' guardians: a rank that ends before the next one starts
keeps its exit status (a ``Popen`` dropped while its process ran used to reap it when
collected, and the gang was recorded as failed with ``-1`` though every rank exited 0)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tessera.live.executors import runner

# Runs the runner in a process of its own (it becomes a subreaper and sets signal handlers),
# with each guardian start made to return only after the guardian has exited (``waitid`` with
# ``WNOWAIT`` leaves it unreaped): what a loaded machine does to a rank whose command is short.
DRIVER = textwrap.dedent("""
    import os, sys
    from tessera.live.executors import contain, runner

    real = contain.start_guardian

    def start_and_let_it_end(spec, log):
        proc = real(spec, log)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
        return proc

    contain.start_guardian = start_and_let_it_end
    sys.exit(runner.main(sys.argv[1]))
""")


@pytest.mark.skipif(not hasattr(runner.os, "waitid"), reason="needs os.waitid")
def test_ranks_that_end_before_the_next_starts_keep_their_exit_status(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin"}
    launch = {"argv": ["/bin/sh", "-c", "exit 0"], "grace_s": 1.0, "user": None,
              "max_runtime_s": None, "log_cap_bytes": 1 << 20,
              "ranks": [dict(env, RANK=str(i)) for i in range(4)]}
    (tmp_path / "launch.json").write_text(json.dumps(launch))
    done = subprocess.run([sys.executable, "-c", DRIVER, str(tmp_path)], timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    exit_record = json.loads((tmp_path / "exit.json").read_text())
    assert exit_record["ranks"] == [0, 0, 0, 0], exit_record
    assert exit_record["rc"] == 0
