"""Every command's ``--help``, walked from the click tree: one flag vocabulary, help that teaches.

The checks run on the click objects that typer builds (``typer.main.get_command``), so a new
command or option is covered the moment it is registered. Where a shared flag's default or
help is allowed to depend on the command, the exemption says why, and ``docs/cli.md`` gives
each command's value.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from rich.text import Text

from tessera.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"

# Flags that mean the same thing everywhere but whose default is the command's own.
PER_COMMAND_DEFAULT = {
    "--speeds": "train: emulated relative speeds; simulate: table or learned",
    "--cluster": "each command's natural cluster; serve and export take the remembered one",
    "--policy": "simulate compares several, a study or the service runs one",
    "--trace": "lessons replay Philly by default; simulate and cosim need one",
    "--failure-rate": "the failure study runs at Philly's rate; simulate has no failures",
    "--validation-s": "the failure study uses its published setting; simulate the library's",
    "--global-batch": "plan needs one; train has a small example default",
    "--out": "a run folder under runs/, or the Kueue manifests' folder",
    "--split": "train splits a batch (planned); traces generate splits job classes (20,70,10)",
}

# (flag, command) pairs whose help says something only that command does.
PER_COMMAND_HELP = {
    ("--speeds", "simulate"): "simulate: where policies read speeds from (table, learned)",
    ("--policy", "simulate"): "simulate takes a comma-separated list to compare",
    ("--json", "train"): "train streams its progress and ends with one JSON line",
    ("--out", "export kueue"): "a folder of manifests, not a run folder",
    ("--plots", "analyze"): "analyze writes figures only; its HTML report is always written",
    ("--format", "analyze"): "analyze reads more trace formats than the simulator",
    ("--out", "traces generate"): "one trace file, not a run folder",
    ("--split", "traces generate"): "a Synergy workload's class split (the issue's flag), "
                                    "not a batch split",
    ("--gpu", "zeus"): "a GPU of Zeus's traces (any of its four), not a MIG-capable model",
    ("--trace", "share simulate"): "a request trace (genai, dlrm, arrival_s CSV), not jobs",
    ("--trace", "share reconfig"): "a request trace (genai, dlrm, arrival_s CSV), not jobs",
}

# Time flags whose values carry their own units (0,5m,2h,never), so the name needs none.
UNITS_IN_VALUES = {"--thresholds"}

TIME_WORDS = re.compile(r"(time|seconds|secs|wait|grace|period|interval|window|duration|"
                        r"timeout|horizon|delay|traffic)")
TIME_HELP = re.compile(r"\((s|seconds|ms)\)|\b(in|of) seconds\b|^Seconds\b")
UNIT_SUFFIX = re.compile(r"-(s|ms|h|min)$")


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    if hasattr(cmd, "commands"):  # a group (typer vendors click, so no isinstance)
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, (*path, name))
    else:
        yield " ".join(path), cmd


COMMANDS = list(_walk(typer.main.get_command(app)))
IDS = [path for path, _ in COMMANDS]


def _long(param: Any) -> str:
    return next(o for o in param.opts if o.startswith("--"))


def _options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if p.param_type_name == "option" and not p.hidden]


def test_the_walk_sees_every_command() -> None:
    assert {"simulate", "serve", "plan", "share plan", "share cosim", "lessons locality",
            "export kueue", "token-add", "job", "jobs"} <= set(IDS)


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_option_and_argument_has_help(path: str, cmd: Any) -> None:
    missing = [p.name for p in cmd.params if not getattr(p, "hidden", False)
               and not (getattr(p, "help", None) or "").strip()]
    assert not missing, f"{path}: no help for {missing}"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_help_survives_rich_markup(path: str, cmd: Any) -> None:
    """Square brackets in a help text are read as rich markup and silently eaten."""
    for p in cmd.params:
        text = getattr(p, "help", None) or ""
        assert Text.from_markup(text).plain == text, f"{path} {p.name}: {text!r}"


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_every_command_shows_an_example(path: str, cmd: Any) -> None:
    assert (cmd.epilog or "").startswith(f"Example: tessera {path}"), path


@pytest.mark.parametrize(("path", "cmd"), COMMANDS, ids=IDS)
def test_time_flags_carry_a_unit(path: str, cmd: Any) -> None:
    for p in _options(cmd):
        name = _long(p)
        is_time = TIME_WORDS.search(name) or TIME_HELP.search(p.help or "")
        if is_time and name not in UNITS_IN_VALUES:
            assert UNIT_SUFFIX.search(name), f"{path} {name}: a time flag without a unit suffix"


def _shared() -> dict[str, list[tuple[str, Any]]]:
    by_name: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    for path, cmd in COMMANDS:
        for p in _options(cmd):
            by_name[_long(p)].append((path, p))
    return {k: v for k, v in by_name.items() if len(v) > 1}


SHARED = _shared()


@pytest.mark.parametrize("flag", sorted(SHARED))
def test_shared_flags_agree_across_commands(flag: str) -> None:
    uses = SHARED[flag]
    helps = {p.help for path, p in uses if (flag, path) not in PER_COMMAND_HELP}
    assert len(helps) <= 1, f"{flag}: help differs between commands: {helps}"
    if flag not in PER_COMMAND_DEFAULT:
        defaults = {repr(p.default) for _, p in uses}
        assert len(defaults) == 1, f"{flag}: default differs between commands: {defaults}"
    shorts = {tuple(o for o in p.opts if not o.startswith("--")) for _, p in uses}
    assert len(shorts) == 1, f"{flag}: short forms differ between commands: {shorts}"


def test_the_same_short_form_means_the_same_flag() -> None:
    meaning: dict[str, set[str]] = defaultdict(set)
    for _, cmd in COMMANDS:
        for p in _options(cmd):
            for o in p.opts:
                if not o.startswith("--"):
                    meaning[o].add(_long(p))
    assert {k: v for k, v in meaning.items() if len(v) > 1} == {}


def test_state_always_means_the_state_directory() -> None:
    for path, cmd in COMMANDS:
        for p in _options(cmd):
            if _long(p) == "--state":
                assert "State directory" in (p.help or ""), path


def test_gpus_per_server_everywhere_gpus_are_laid_out() -> None:
    takes = {path for path, cmd in COMMANDS if any(_long(p) == "--gpus-per-server"
                                                   for p in _options(cmd))}
    assert takes == {"simulate", "plan", "share cosim", "serve", "export kueue",
                     "lessons locality", "lessons failures"}


def test_docs_table_every_flag() -> None:
    """docs/cli.md is the vocabulary: every visible long flag appears in it."""
    text = DOCS.read_text()
    names = {_long(p) for _, cmd in COMMANDS for p in _options(cmd)} - {"--help"}
    missing = sorted(n for n in names if f"`{n}" not in text)
    assert not missing, f"docs/cli.md does not list {missing}"
