"""``tessera.progress`` (the job's side of progress reports) and ``tessera train`` reporting by
itself when the service named an endpoint (issue 35 part 4)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import tessera
from tessera import progress_report
from tessera.train.config import TrainConfig


class _Recorder(BaseHTTPRequestHandler):
    got: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []
    status = 200

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Recorder.got.append((self.path, self.headers["Authorization"], body))
        self.send_response(_Recorder.status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(json.dumps({"detail": "at most one report per 1 s per run"}).encode())

    def log_message(self, *_a: object) -> None:
        pass


@pytest.fixture
def endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, str, dict[str, Any]]]]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Recorder.got, _Recorder.status = [], 200
    monkeypatch.setenv(progress_report.URL_VAR,
                       f"http://127.0.0.1:{srv.server_address[1]}/api/progress/j-1/1")
    monkeypatch.setenv(progress_report.TOKEN_VAR, "run-secret")
    monkeypatch.setattr(progress_report, "_last_sent_s", float("-inf"))
    monkeypatch.setattr(progress_report, "_warned", False)
    yield _Recorder.got
    srv.shutdown()


def test_progress_posts_with_the_runs_token_at_most_once_a_second(
        endpoint: list[tuple[str, str, dict[str, Any]]]) -> None:
    assert tessera.progress(steps=10, samples=320, gns=1.5)
    assert not tessera.progress(steps=11)  # within the second: dropped here
    assert endpoint == [("/api/progress/j-1/1", "Bearer run-secret",
                         {"steps": 10, "samples": 320, "gns": 1.5})]
    assert tessera.progress(steps=12, min_interval_s=0.0)
    assert endpoint[-1][2] == {"steps": 12}
    assert tessera.progress(steps=13, local_batch=64, min_interval_s=0.0)
    assert endpoint[-1][2] == {"steps": 13, "local_batch": 64}


def test_progress_never_raises_and_says_why_once(
        endpoint: list[tuple[str, str, dict[str, Any]]],
        capsys: pytest.CaptureFixture[str]) -> None:
    _Recorder.status = 429
    assert not tessera.progress(steps=1, min_interval_s=0.0)
    assert not tessera.progress(steps=float("nan"), min_interval_s=0.0)
    assert endpoint[-1][2] == {"steps": "nan"}   # JSON has no NaN: the service refuses it
    assert capsys.readouterr().err == ("tessera.progress: report not accepted: 429: at most "
                                       "one report per 1 s per run\n")


def test_progress_is_a_no_op_outside_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress_report.URL_VAR, raising=False)
    assert not tessera.progress(steps=1)


@pytest.mark.torch
def test_tessera_train_reports_by_itself_on_rank_0(
        endpoint: list[tuple[str, str, dict[str, Any]]], tmp_path: Path) -> None:
    from tessera.train.emulation import EmulationConfig
    from tessera.train.worker import train_loop

    cfg = TrainConfig(example="mlp", devices="A100:1", global_batch=12, steps=3,
                      split="equal", dtype="float64", checkpoint_every=0,
                      emulation=EmulationConfig(overhead_s=0.0, per_sample_s=0.0001),
                      checkpoint_dir=str(tmp_path / "ckpt"))
    train_loop(cfg, 0, 1, tmp_path)
    # then <= 1 a second; the local batch: the global batch over the ranks (issue 35 part 5)
    assert endpoint[0][2] == {"steps": 1, "samples": 12, "local_batch": 12.0}
