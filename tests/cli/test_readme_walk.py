"""Walk the README's "Using it" commands on a fresh checkout, and with the public data.

The commands are read from the README itself, so the test follows the README when it changes.
Each runs in-process through ``tessera.cli.main`` (the real entry point: exit status and the
``error:`` line exactly as a user sees them) in a temporary working directory, shrunk with the
command's own flags where it has them (``--limit``, ``--no-plots``, ``--out``, ``--workers``,
``--steps``) so the walk stays short.

* Without the public data (``TESSERA_DATA_DIR`` pointed at an empty folder, which also turns off
  the lookup of ``shared/data`` beside the checkout), a command succeeds unless it names a trace
  that is not bundled; such a command must be marked "(public data)" in the README and fail
  with exit status 2 and the documented one-line message.
* With the public data, the commands that need it succeed.
* What a first-hour user reads in the output holds (issue 31, :data:`OUTPUT_CHECKS`): an
  oracle policy is marked, what ``--compat gavel`` does not record is ``null`` with a note,
  ``share plan`` never says "optimal" alone, ``lessons`` tables carry their legends.

Not run: ``serve``, ``submit``, ``jobs``, ``job``, ``explain``, ``logs``, ``admin`` and
``service`` need a live service or its state dir (covered by ``tests/live``); ``train`` starts
PyTorch workers for tens of seconds, so it runs only in the slow suite.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest
import typer

from tessera.cli import app
from tessera.workload.carbon import REGIONS
from tessera.workload.known import TRACES
from tests.cli.runner import run_tessera

REPO = Path(__file__).resolve().parents[2]
PUBLIC_DATA = REPO.parent / "shared" / "data"
LIVE = {"serve", "submit", "jobs", "job", "explain", "logs", "admin", "service"}
SLOW = {"train"}
SHRINK = {"limit": "10", "max_jobs": "10", "workers": "1", "steps": "4"}
"""Flags (by parameter name) that keep a command small, and their values."""
CARBON_REGIONS = set(REGIONS)
DATA_MESSAGE = ("from the public data, not found in", "set TESSERA_DATA_DIR to the folder that "
                "holds traces/")


def _oracle_marked(args: list[str], out: str, err: str) -> str | None:
    if "hetero_srpt" in args[args.index("-p") + 1] and "--json" not in args \
            and "hetero_srpt ◆" not in out:
        return "hetero_srpt reads true durations but is not marked ◆"
    return None


def _gavel_pending_null(args: list[str], out: str, err: str) -> str | None:
    if "--json" not in args:
        return None
    for policy, res in json.loads(out)["results"].items():
        if res["pending_h"] is not None or "pending_h" not in res.get("not_recorded", {}):
            return f"{policy}: pending_h {res['pending_h']!r} under --compat gavel, not null"
    return None


def _plan_claims_honestly(args: list[str], out: str, err: str) -> str | None:
    if "optimal" in out:
        return "calls the plan optimal"
    if "VIOLATED" in out and "missed the SLO in the replay" not in out:
        return "an SLO is VIOLATED and the claim does not say so"
    return None


def _lessons_legend(args: list[str], out: str, err: str) -> str | None:
    return None if "GPU-h saved: " in out or "split GPU-h: " in out else "no legend"


OUTPUT_CHECKS: tuple[tuple[Callable[[list[str]], bool],
                           Callable[[list[str], str, str], str | None]], ...] = (
    (lambda a: a[0] == "simulate" and "--compat" not in a and "-p" in a, _oracle_marked),
    (lambda a: a[0] == "simulate" and "gavel" in a, _gavel_pending_null),
    (lambda a: a[:2] == ["share", "plan"], _plan_claims_honestly),
    (lambda a: a[0] == "lessons", _lessons_legend),
)
"""``(which README commands, what their output must show)``: a check returns a problem or
``None``."""


def readme_commands() -> list[tuple[list[str], str]]:
    """``(argv after "tessera", comment)`` for each command of the "Using it" code block."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("## Using it", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    out: list[tuple[list[str], str]] = []
    pending = ""
    for line in block.splitlines():
        code, _, comment = line.partition("#")
        if code.rstrip().endswith("\\"):
            pending += code.rstrip()[:-1] + " "
            continue
        for part in (pending + code).split(";"):
            words = shlex.split(part)
            if words and words[0] == "export":  # an environment variable for what follows
                continue
            if words:
                assert words[0] == "tessera", line
                out.append((words[1:], comment.strip()))
        pending = ""
    return out


def _params(args: list[str]) -> list[object]:
    """The parameters of the (sub)command ``args`` starts with (typer's click objects)."""
    cmd: object = typer.main.get_command(app)
    for word in args:
        commands = getattr(cmd, "commands", {})
        if word not in commands:
            break
        cmd = commands[word]
    return list(getattr(cmd, "params", []))


def _shrunk(args: list[str], out: Path) -> list[str]:
    """``args`` plus the command's own size-limiting flags."""
    extra: list[str] = []
    for p in _params(args):
        name, opts = getattr(p, "name", None), list(getattr(p, "opts", []))
        if not opts or not opts[0].startswith("--"):
            continue
        if name in SHRINK:
            extra += [opts[0], SHRINK[name]]
        elif name == "plots" and getattr(p, "secondary_opts", None):
            extra.append(p.secondary_opts[0])  # type: ignore[attr-defined]
        elif name == "out" and opts[0] == "--out" and "--out" not in args:
            extra += ["--out", str(out)]
    return args + extra


def _trace(args: list[str]) -> str | None:
    """The trace a command names (``-t``/``--trace`` value, or ``analyze``'s argument)."""
    for flag in ("-t", "--trace"):
        if flag in args:
            return args[args.index(flag) + 1]
    if args and args[0] == "analyze":
        return next((a for a in args[1:] if not a.startswith("-")), None)
    return None


def needs_public_data(args: list[str]) -> bool:
    """A trace that is not bundled, or a carbon region (carbon traces are never bundled)."""
    if "--carbon" in args and args[args.index("--carbon") + 1] in CARBON_REGIONS:
        return True
    trace = TRACES.get(_trace(args) or "")
    return trace is not None and not trace.bundled


def _walk(names: set[str] | None, data_dir: Path, tmp_path: Path,
          capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
          with_data: bool) -> list[str]:
    """Run the README commands whose first word is in ``names`` (all when ``None``)."""
    monkeypatch.setenv("TESSERA_DATA_DIR", str(data_dir))
    monkeypatch.chdir(tmp_path)
    problems: list[str] = []
    for i, (args, comment) in enumerate(readme_commands()):
        if args and (args[0] in LIVE or (names is not None and args[0] not in names)):
            continue
        if names is None and args and args[0] in SLOW:
            continue
        code, out, err = run_tessera(_shrunk(args, tmp_path / f"out{i}"), capsys, monkeypatch)
        shown = " ".join(args)
        if needs_public_data(args) and not with_data:
            if "(public data)" not in comment:
                problems.append(f"{shown}: needs the public data, README does not say so")
            if code != 2 or not all(m in err for m in DATA_MESSAGE) or "Traceback" in err:
                problems.append(f"{shown}: exit {code}, not the documented error: {err[-500:]}")
        elif code != 0:
            problems.append(f"{shown}: exit {code}\n{out[-800:]}\n{err[-800:]}")
        else:
            problems += [f"{shown}: {p}" for applies, check in OUTPUT_CHECKS
                         if applies(args) and (p := check(args, out, err)) is not None]
    return problems


def test_readme_block_parses_into_known_commands() -> None:
    commands = readme_commands()
    assert len(commands) >= 15
    top = set(getattr(typer.main.get_command(app), "commands", {})) | {"--help"}
    for args, _ in commands:
        assert args and args[0] in top, args
        trace = _trace(args)
        if trace is not None:
            generated = any(a[:2] == ["traces", "generate"] and trace in a for a, _ in commands)
            assert trace in TRACES or generated, f"{args}: {trace!r} is neither a trace name "
            "nor made by an earlier command"


def test_readme_walk_without_public_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "no-data"
    empty.mkdir()
    problems = _walk(None, empty, tmp_path, capsys, monkeypatch, with_data=False)
    assert not problems, "\n".join(problems)


def test_readme_walk_with_public_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the commands whose outcome depends on the data, plus the listing."""
    if not (PUBLIC_DATA / "traces").is_dir():
        pytest.skip(f"public data not found at {PUBLIC_DATA}")
    names = {a[0] for a, _ in readme_commands() if needs_public_data(a)} | {"traces"}
    problems = _walk(names, PUBLIC_DATA, tmp_path, capsys, monkeypatch, with_data=True)
    assert not problems, "\n".join(problems)


@pytest.mark.slow
@pytest.mark.torch
def test_readme_train_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    problems = _walk(SLOW, tmp_path, tmp_path, capsys, monkeypatch, with_data=False)
    assert not problems, "\n".join(problems)
