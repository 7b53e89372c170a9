"""docs/runbook.md cannot drift: its commands parse against the real CLI, its config files load."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from kbackup.app import config as config_module
from tests.support.cli_lines import CliLine, command_lines, config_paths, parse_cli

RUNBOOK = Path(__file__).parents[2] / "docs" / "runbook.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`(kafka-backup\s[^`]+)`")
#: A config file is introduced by its name in backticks at the start of the paragraph before it.
_NAMED_YAML = re.compile(
    r"^`([\w.-]+\.yaml)`[^\n]*(?:\n[^\n`][^\n]*)*\n\n```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL
)
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _text() -> str:
    return RUNBOOK.read_text()


def runbook_commands() -> list[CliLine]:
    text = _text()
    found: list[CliLine] = []
    for match in _FENCE.finditer(text):
        language, body = match.groups()
        if language in ("bash", "sh", "shell"):
            line = text[: match.start()].count("\n") + 1
            found += command_lines(body, f"docs/runbook.md:{line}+")
    prose = _FENCE.sub("", text)
    for span in _INLINE.finditer(prose):
        found += command_lines(" ".join(span.group(1).split()), "docs/runbook.md (inline)")
    return found


def runbook_configs() -> dict[str, str]:
    return {name: body for name, body in _NAMED_YAML.findall(_text())}


def test_the_runbook_has_the_whole_procedure() -> None:
    paths = {" ".join(parse_cli(line.args)) for line in runbook_commands()}
    expected = ["backup", "list", "describe", "validate", "check", "drill", "restore", "three-phase-restore"]
    expected += ["show-offset-mapping", "offset-reset plan", "offset-reset execute", "offset-rollback"]
    for command in expected:
        assert command in paths, f"the runbook never runs kafka-backup {command}"


@pytest.mark.parametrize("line", runbook_commands(), ids=lambda line: " ".join(line.args)[:60])
def test_runbook_command_parses(line: CliLine) -> None:
    parse_cli(line.args)


def test_every_config_file_used_is_shown_and_valid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configs = runbook_configs()
    assert set(configs) >= {"backup.yaml", "recover.yaml", "drill.yaml"}
    for name, body in configs.items():
        for variable in _ENV_REFERENCE.findall(body):
            monkeypatch.setenv(variable, "placeholder-secret")
        path = tmp_path / name
        path.write_text(body)
        config_module.load(path)  # raises ConfigError naming the key
    used = {path for line in runbook_commands() for path in config_paths(line.args)}
    assert used
    assert used <= set(configs), f"config files used but not shown: {used - set(configs)}"


def test_recovery_does_not_need_the_lost_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DR_KAFKA_PASSWORD", "placeholder-secret")
    path = tmp_path / "recover.yaml"
    path.write_text(runbook_configs()["recover.yaml"])
    recover = config_module.load(path)
    assert recover.source is None
    assert recover.target is not None
    assert recover.restore.include_original_offset_header


def plans_executed(lines: list[CliLine]) -> list[tuple[str, str, bool]]:
    """(where, plan file, written before) of every ``--plan`` the commands pass, in order."""
    written: set[str] = set()
    executed: list[tuple[str, str, bool]] = []
    for line in lines:
        args = line.args
        for flag, value in itertools.pairwise(args):
            if flag == "--plan":
                executed.append((line.where, value, value in written))
            if flag in ("--output", "-o") and args[:2] == ["offset-reset", "plan"]:
                written.add(value)
    return executed


def test_every_plan_executed_was_written_before() -> None:
    executed = plans_executed(runbook_commands())
    # The review-then-execute step is the runbook's point: a runbook without it must fail here.
    assert executed, "the runbook never runs offset-reset execute --plan"
    for where, plan, written in executed:
        assert written, f"{where}: --plan {plan} was never written by offset-reset plan"


def test_the_plan_check_fails_without_the_plan_lines() -> None:
    """The check above can fail: the runbook's commands without their --plan lines have no plan
    executed, and a plan executed before it is written is caught."""
    lines = runbook_commands()
    without_plans = [line for line in lines if "--plan" not in line.args]
    assert plans_executed(lines)
    assert not plans_executed(without_plans)
    executes = [line for line in lines if "--plan" in line.args]
    assert not all(written for _, _, written in plans_executed(executes))
