"""What a new user needs from the README before the first command works.

The "first hour" review (issue 31) found the README silent on how to reach ``tessera`` from a
shell, on pointing the client at a service elsewhere, on how long ``make test`` takes and what
its browser tests need, and pointing at a design document the repository does not hold. These
tests read the README as text and check each of those against the code it describes.
"""

from __future__ import annotations

import re
from pathlib import Path

import typer

from tessera.cli import app

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")


def test_readme_keeps_its_two_setup_commands() -> None:
    assert "make demo    #" in README and "make test    #" in README


def test_readme_says_how_to_put_tessera_on_path() -> None:
    assert "source .venv/bin/activate" in README
    assert ".venv/bin/tessera" in README


def test_readme_names_the_server_variable_the_cli_reads() -> None:
    jobs = typer.main.get_command(app).commands["jobs"]  # type: ignore[attr-defined]
    server = next(p for p in jobs.params if "--server" in p.opts)
    assert server.envvar == "TESSERA_SERVER"
    assert "TESSERA_SERVER=" in README and "--server http" in README


def test_readme_says_what_make_test_costs_and_needs() -> None:
    assert re.search(r"`make test` takes about \d+-\d+ minutes", README)
    assert "chromium" in README and "skip" in README
    assert "chromium" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_every_file_the_readme_points_at_exists() -> None:
    named = set(re.findall(r"`((?:docs|examples|\.ci|benchmarks)/[\w./-]+)`", README))
    named |= {f"docs/{n}" for n in re.findall(r"`([\w-]+\.md)`", README)}
    assert named, "the README names no files"
    missing = sorted(n for n in named if "<" not in n and not (REPO / n).exists())
    assert not missing, f"README points at files not in the repository: {missing}"


def test_readme_explains_the_oracle_mark_the_results_use() -> None:
    from tessera.report.policies import ORACLE_MARK, policy_info

    assert f"marked {ORACLE_MARK} is an *oracle*" in README
    named = re.search(r"trace\n?\s*\(([^)]*)\)", README.split("*oracle*", 1)[1])
    assert named is not None
    for policy in re.findall(r"`(\w+)`", named.group(1)):
        assert policy_info(policy).oracle, f"README calls {policy} an oracle; it is not marked"
    assert "--json" in README.split("*oracle*", 1)[1].split("\n\n", 1)[0]  # progress: not there
