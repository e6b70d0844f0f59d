"""The embedded Ray head is no back door: a job (or any local user) without the service's token
cannot drive it through any port it listens on, every socket is on 127.0.0.1, its files are
private, stopping it leaves no process behind; an external cluster anyone can drive is refused.

Opt-in (``-m ray``); slow on a small machine: run one test at a time.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tessera.errors import SpecError
from tessera.live.executors.ray.head import EmbeddedHead, cluster_pids
from tessera.live.service import LiveService, ServiceOptions
from tessera.live.spec import parse_request
from tessera.live.store import Store
from tessera.live.tenancy import Principal, load_tenancy
from tessera.model.cluster import load_cluster
from tests.live.helpers import wait_for, write_config
from tests.live.ray_nodes import RayNodes

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")

ADMIN = Principal("admin", None)
NOBODY = pwd.getpwnam("nobody")
LOOPBACK = {"127.0.0.1", "::1", "::ffff:127.0.0.1"}

# What a hostile job of a run-as queue does: for every port it is told of, submit a Ray job
# to the dashboard agent's job API, read the GCS without a token, and connect as a Ray client;
# then try the head's files. It writes what happened as JSON to its checkpoint dir.
ATTACK = r'''
import json, os, subprocess, sys, urllib.request
out = {"uid": os.getuid(), "http": {}, "gcs": {}, "client": {}, "files": {}}
ports = [int(p) for p in os.environ["HEAD_PORTS"].split(",")]
body = json.dumps({"entrypoint": "id > /tmp/tessera-pwned", "submission_id": "pwn"}).encode()
for p in ports:
    req = urllib.request.Request(f"http://127.0.0.1:{p}/api/job_agent/jobs/", data=body,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=3) as r:
            out["http"][p] = r.status
    except urllib.error.HTTPError as e:
        out["http"][p] = e.code
    except Exception as e:
        out["http"][p] = type(e).__name__
gcs = ("import sys\nfrom ray._raylet import GcsClient\n"
       "GcsClient(address=sys.argv[1]).internal_kv_keys(b'', None, timeout=5)\nprint('open')")
client = ("import sys, ray\n"
          "ray.init('ray://' + sys.argv[1], logging_level='ERROR')\n"
          "print(ray.get(ray.remote(lambda: 'open').remote()))")
env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
env["RAY_AUTH_MODE"] = "disabled"
tries = {(name, p): subprocess.Popen([sys.executable, "-c", code, f"127.0.0.1:{p}"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
         for name, code in (("gcs", gcs), ("client", client)) for p in ports}
for (name, p), proc in tries.items():  # all at once: a port that does not answer times out
    try:
        said, err = proc.communicate(timeout=30)
        out[name][p] = said.strip() or (err.strip().splitlines() or ["?"])[-1][:200]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        out[name][p] = "timeout"
for path in os.environ["HEAD_FILES"].split(","):
    try:
        open(path).read() if os.path.isfile(path) else os.listdir(path)
        out["files"][path] = "read"
    except OSError as e:
        out["files"][path] = type(e).__name__
json.dump(out, open(os.path.join(os.environ["TESSERA_CHECKPOINT_DIR"], "attack.json"), "w"))
'''


def _service(state: Path, work: Path) -> LiveService:
    from tessera.live.executors.ray.executor import RayExecutor

    write_config(state, [{"name": "team-a", "nominal_gpus": 2, "run_as": "nobody"},
                         {"name": "team-b", "nominal_gpus": 2}])
    cluster = load_cluster("v100:2,t4:2", 2)
    return LiveService(Store(state / "state.db"),
                       RayExecutor(cluster, None, work / "runs", grace_s=1.0, state_dir=state),
                       cluster, load_tenancy(state), "fifo", work,
                       ServiceOptions(period_s=0.5, poll_s=0.1, grace_s=1.0))


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory other users may pass through but not list (pytest's own temp directories
    are closed to them, and a run-as job must reach its checkpoint dir and script)."""
    d = Path(tempfile.mkdtemp(prefix="tessera-rayhard-"))
    d.chmod(0o711)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def ray_service(base: Path) -> Iterator[LiveService]:
    state, work = base / "state", base / "state-work"
    svc = _service(state, work)
    svc.start()
    yield svc
    svc.stop()
    EmbeddedHead(state).stop()


def _head_pids(state: Path) -> list[int]:
    """The head's processes as the test finds them itself: its recorded session, else its
    temp dir in a command line (an older record), and their descendants."""
    rec = json.loads((state / "ray-head.json").read_text())
    sessions = [rec["session"]] if rec.get("session") else []
    found = cluster_pids(rec["temp_dir"], sessions) if sessions else \
        cluster_pids(rec["temp_dir"])
    return [p for p in found if _state_of(p) not in "ZX"]


def _state_of(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


def _listening(pids: list[int]) -> dict[int, str]:
    """``port -> address`` of every TCP socket that ``pids`` listen on (``/proc/net/tcp*``)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found: dict[int, str] = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A" or f[9] not in inodes:  # 0A: LISTEN
                continue
            hex_ip, hex_port = f[1].split(":")
            raw = bytes.fromhex(hex_ip)
            # /proc/net/tcp* print each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found[int(hex_port, 16)] = socket.inet_ntop(family, raw)
    return found


def _client_servers(gcs_port: int) -> list[int]:
    """Live ``ray.util.client.server`` processes of the cluster whose GCS is on ``gcs_port``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"ray.util.client.server" in argv and any(
                a.startswith(b"--address=") and a.endswith(f":{gcs_port}".encode())
                for a in argv) and _state_of(int(d.name)) not in "ZX":
            found.append(int(d.name))
    return found


def test_every_socket_of_the_head_is_on_loopback_and_no_client_server_runs(
        ray_service: LiveService, base: Path) -> None:
    svc = ray_service
    jid = svc.submit(parse_request("name: s\nqueue: team-b\ncommand: sleep 30"),
                     ADMIN).job_id  # a rank host (a Ray worker) exists and listens too
    wait_for(lambda: svc.store.get(jid).state.value == "running", 60,  # type: ignore
             "the job to run")
    # The head's processes, and this one: the service's own Ray driver listens too.
    pids = [*_head_pids(base / "state"), os.getpid()]
    ports = _listening(pids)
    gcs_port = int(svc.executor.address.rsplit(":", 1)[1])  # type: ignore[attr-defined]
    assert gcs_port in ports, ports  # the scan sees the head's sockets at all
    assert {p: a for p, a in ports.items() if a not in LOOPBACK} == {}
    assert _client_servers(gcs_port) == []
    svc.cancel(jid, ADMIN)


def test_a_run_as_job_cannot_drive_the_head_nor_read_its_files(
        ray_service: LiveService, base: Path) -> None:
    """The hostile tenant of the issue: a ``run_as: nobody`` job tries every port the head
    listens on (the job agent's HTTP job API, the GCS without a token, ``ray://``) and the
    head's files (token, temp dir, the port files of its session). All refused; and the job
    itself ran as ``nobody``."""
    svc = ray_service
    state = base / "state"
    temp_dir = Path(json.loads((state / "ray-head.json").read_text())["temp_dir"])
    ports = sorted(_listening(_head_pids(state)))
    session = next(temp_dir.glob("session_2*"))
    port_files = sorted(str(p) for p in session.glob("*port*"))
    assert port_files  # Ray names its ports in these; the job must not read them
    files = [str(state / "ray-auth-token"), str(temp_dir), *port_files]
    script = base / "attack.py"
    script.write_text(ATTACK)
    script.chmod(0o644)
    # The service's interpreter may sit where nobody can enter (/root/.pyenv): the job runs
    # the system's Python of the same version on the service's packages instead.
    python = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
    if not python.exists():
        pytest.skip(f"no {python} for the run-as job")
    jid = svc.submit(parse_request(json.dumps({
        "name": "hostile", "queue": "team-a", "command": [str(python), str(script)],
        "env": {"HEAD_PORTS": ",".join(map(str, ports)), "HEAD_FILES": ",".join(files),
                "PYTHONPATH": sysconfig.get_paths()["purelib"]}})),
        Principal("a", "team-a")).job_id
    wait_for(lambda: (rec := svc.store.get(jid)) is not None and rec.final, 300,
             "the hostile job to end")
    rec = svc.store.get(jid)
    assert rec is not None and rec.state.value == "succeeded", rec
    ckpt = base / "state-work" / "checkpoints" / jid / "attack.json"
    out = json.loads(ckpt.read_text())
    assert out["uid"] == NOBODY.pw_uid  # jobs run as their queue's run_as user under Ray
    accepted = {p: s for p, s in out["http"].items() if isinstance(s, int) and s < 300}
    assert accepted == {}, out["http"]
    assert [p for p, s in out["gcs"].items() if s == "open"] == [], out["gcs"]
    assert [p for p, s in out["client"].items() if s == "open"] == [], out["client"]
    assert {f: s for f, s in out["files"].items() if s == "read"} == {}, out["files"]
    assert not Path("/tmp/tessera-pwned").exists()


def test_the_heads_token_and_temp_dir_are_private(ray_service: LiveService,
                                                  base: Path) -> None:
    """The token is the service's alone (0600 in the 0700 state dir); Ray's temp dir, which
    Ray itself makes 0777 and where its port files and sockets are, sits in a 0700 directory
    of the service's user, with socket paths under the 108-byte limit."""
    state = base / "state"
    token = state / "ray-auth-token"
    assert token.is_file() and token.stat().st_mode & 0o777 == 0o600
    temp_dir = Path(json.loads((state / "ray-head.json").read_text())["temp_dir"])
    top = Path("/tmp") / temp_dir.relative_to("/tmp").parts[0]
    st = top.lstat()
    assert st.st_uid == os.geteuid() and st.st_mode & 0o777 == 0o700, oct(st.st_mode)
    assert top != temp_dir
    sockets = list(temp_dir.glob("session_2*/sockets/*"))
    assert sockets and max(len(str(s)) for s in sockets) < 108


def test_stopping_the_service_ends_every_process_of_the_head(tmp_path: Path) -> None:
    """Stop means stopped: after the service closes (no run left), no process of the head
    survives, the Ray client server of older heads included."""
    state, work = tmp_path / "state", tmp_path / "state-work"
    svc = _service(state, work)
    svc.start()
    jid = svc.submit(parse_request("name: brief\nqueue: team-b\ncommand: 'true'"),
                     ADMIN).job_id
    wait_for(lambda: (rec := svc.store.get(jid)) is not None and rec.final, 60, "the job")
    rec = json.loads((state / "ray-head.json").read_text())
    pids = _head_pids(state)
    gcs_port = int(rec["address"].rsplit(":", 1)[1])
    sessions = {_session(p) for p in pids}
    assert len(pids) >= 4
    svc.stop()  # the executor's close(): no rank is held, so the head stops
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit()
            and _state_of(int(p.name)) not in "ZX"
            and (_session(int(p.name)) in sessions or int(p.name) in pids)]
    EmbeddedHead(state).stop()  # whatever the assertion finds, leave nothing running
    assert left == []
    assert _client_servers(gcs_port) == []
    assert not (state / "ray-head.json").exists()


def _session(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
    except OSError:
        return None


def _serve_config(address: str, token: Path | None, allow: bool = False) -> object:
    from tessera.live.server import ServeConfig

    extra = {"allow_unauthenticated": True} if allow else {}
    return ServeConfig(Path("/nonexistent"), executor="ray", executor_options={
        "address": address, "token_file": token, **extra})


def test_an_external_cluster_with_a_token_still_connects(tmp_path: Path) -> None:
    """Two nodes with Ray's token auth: the service connects with --ray-token-file and sees
    both; the same address without the token is told why it cannot connect."""
    from tessera.live.executors.ray.cluster import accepts_anyone
    from tessera.live.server import connect_executor

    nodes = RayNodes()
    try:
        address = nodes.add_head(0, {"gpu_flavor:T4": 1})
        nodes.add_node(0, {"gpu_flavor:V100": 1})
        assert accepts_anyone(address) is False
        connect_executor(_serve_config(address, nodes.token_file))  # type: ignore[arg-type]
        try:
            assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        finally:
            ray.shutdown()
    finally:
        nodes.stop()
    assert [p for p in nodes.pids() if _state_of(p) not in "ZX"] == []


def test_an_unauthenticated_external_cluster_is_refused_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.live.server import connect_executor

    nodes = RayNodes(auth=False)
    try:
        address = nodes.add_head(0, {})
        nodes.add_node(0, {})
        with pytest.raises(SpecError, match=r"accepts clients without a token.*"
                           r"--ray-allow-unauthenticated"):
            connect_executor(_serve_config(address, None))  # type: ignore[arg-type]
        assert not ray.is_initialized()
        connect_executor(_serve_config(address, None, allow=True))  # type: ignore[arg-type]
        try:
            assert len([n for n in ray.nodes() if n["Alive"]]) == 2
        finally:
            ray.shutdown()
        assert "WARNING: the Ray cluster at" in capsys.readouterr().err
    finally:
        nodes.stop()


def test_a_session_member_counts_only_with_the_heads_marker(tmp_path: Path) -> None:
    """The head's processes are found by their session even when their command line does not
    name the temp dir (the leaked client server's did not); a process of a session whose id is
    asked for but that does not carry the head's marker is never taken."""
    import subprocess

    from tessera.live.executors.ray.head import HEAD_MARK_VAR, stop_pids

    marker = str(tmp_path / "r")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleep, start_new_session=True,
                            env={**os.environ, HEAD_MARK_VAR: marker})
    other = subprocess.Popen(sleep, start_new_session=True,
                             env={**os.environ, HEAD_MARK_VAR: marker + "-other"})
    try:
        for p in (ours, other):  # Popen may return before the exec shows (vfork)
            wait_for(lambda p=p: HEAD_MARK_VAR.encode() in  # type: ignore[misc]
                     Path(f"/proc/{p.pid}/environ").read_bytes(), 10.0)
        assert cluster_pids(marker, [ours.pid, other.pid]) == [ours.pid]
        assert cluster_pids(marker) == []  # by command line alone it was invisible
        stop_pids(cluster_pids(marker, [ours.pid]), 5.0)
        assert ours.wait(timeout=10) is not None and other.poll() is None
    finally:
        for p in (ours, other):
            p.kill()
            p.wait()


def test_a_head_an_older_tessera_started_without_auth_is_replaced_not_adopted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A remembered head that answers but whose record says nothing of token auth (started
    before the lockdown) is stopped and started anew, its runs counted as lost."""
    import subprocess

    listener = socket.create_server(("127.0.0.1", 0))  # the old head's GCS port answers
    head = EmbeddedHead(tmp_path)
    old_temp = Path("/tmp") / head.root.name  # the old layout: Ray's temp dir itself
    head.record.write_text(json.dumps({
        "address": f"127.0.0.1:{listener.getsockname()[1]}", "temp_dir": str(old_temp)}))
    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)",
                            str(old_temp)])
    # Popen may return before the child's exec shows its command line (vfork): wait for it.
    wait_for(lambda: str(old_temp).encode() in Path(f"/proc/{old.pid}/cmdline").read_bytes(),
             10.0)
    started: list[int] = []
    monkeypatch.setattr(EmbeddedHead, "_start",
                        lambda self, *a: (started.append(1), ("127.0.0.1:1", 0, ""))[1])
    try:
        assert head.ensure(1, 0, {}) == "127.0.0.1:1"
        assert started == [1] and head.restarted
        assert old.wait(timeout=60) is not None  # SIGTERM, then SIGKILL after the grace
    finally:
        listener.close()
        old.kill()
        old.wait()
