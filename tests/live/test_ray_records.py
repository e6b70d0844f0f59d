"""Exit records kept by the service once pruned from Ray's KV, and logs read from them.

No Ray cluster needed: these are the file and tail parts of ``ray.records``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ray")

from tessera.live.executors.ray.records import (
    exit_record,
    log_from_record,
    save_exit,
    saved_exit,
    saved_path,
)


def test_a_saved_exit_record_reads_back_and_serves_the_tail(tmp_path: Path) -> None:
    log = tmp_path / "rank-0.log"
    log.write_bytes(b"x" * 20000 + b"the end\n")
    rec = exit_record(3, True, str(log), "exec failed: nope", False)
    save_exit(tmp_path / "runs", "j-1", 2, 0, rec)
    assert saved_path(tmp_path / "runs", "j-1", 2, 0).name == "rank-0.exit.json"
    back = saved_exit(tmp_path / "runs", "j-1", 2, 0)
    assert back == rec and back["rc"] == 3 and back["stopped"] is True
    # The record keeps the last 16 KiB: a read from the start says what was skipped.
    chunk = log_from_record(back, 0, 1 << 20)
    assert chunk is not None and chunk.text.endswith("the end\n")
    assert chunk.skipped_bytes == 20008 - 16384 and chunk.size_bytes == 20008
    assert chunk.next_offset == 20008
    tail = log_from_record(back, 20000, 100)
    assert tail is not None and tail.text == "the end\n" and tail.skipped_bytes == 0


def test_no_saved_record_and_no_record_mean_no_log(tmp_path: Path) -> None:
    assert saved_exit(tmp_path, "j-none", 1, 0) is None
    assert log_from_record(None, 0, 100) is None
    (tmp_path / "j-bad" / "1").mkdir(parents=True)
    saved_path(tmp_path, "j-bad", 1, 0).write_text("{not json")
    assert saved_exit(tmp_path, "j-bad", 1, 0) is None
