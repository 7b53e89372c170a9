"""The README and the user guides cannot drift from the CLI and the config loader: every
``kafka-backup`` command in their shell blocks and inline code parses against the real CLI,
and every YAML block is a config file the real loader accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbackup.app import config as config_module
from tests.support.cli_lines import CliLine, command_lines, parse_cli

ROOT = Path(__file__).parents[2]
DOCS = [
    ROOT / "README.md",
    *(
        ROOT / "docs" / name
        for name in ("mapping.md", "security.md", "status.md", "translation.md", "observability.md")
    ),
]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_INLINE = re.compile(r"`(kafka-backup\s[^`]+)`")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def doc_commands(path: Path) -> list[CliLine]:
    text = path.read_text()
    found: list[CliLine] = []
    for match in _FENCE.finditer(text):
        language, body = match.groups()
        line = text[: match.start()].count("\n") + 1
        if language in ("bash", "sh", "shell"):
            found += command_lines(body, f"{_name(path)}:{line}+")
        elif language == "console":  # captured sessions: only the typed lines, after the prompt
            typed = "\n".join(row[2:] for row in body.splitlines() if row.startswith("$ "))
            found += command_lines(typed, f"{_name(path)}:{line}+")
    for span in _INLINE.finditer(_FENCE.sub("", text)):
        found += command_lines(" ".join(span.group(1).split()), f"{_name(path)} (inline)")
    return found


def doc_yaml_blocks(path: Path) -> list[tuple[str, str]]:
    text = path.read_text()
    return [
        (f"{_name(path)}:{text[: match.start()].count(chr(10)) + 1}", match.group(2))
        for match in _FENCE.finditer(text)
        if match.group(1) == "yaml"
    ]


COMMANDS = [line for path in DOCS for line in doc_commands(path)]
YAML_BLOCKS = [block for path in DOCS for block in doc_yaml_blocks(path)]


def test_the_guides_have_commands_and_configs() -> None:
    assert {line.where.split(":")[0].split(" ")[0] for line in COMMANDS} >= {"README.md", "docs/mapping.md"}
    assert len(YAML_BLOCKS) >= 6


@pytest.mark.parametrize("line", COMMANDS, ids=lambda line: f"{line.where} {' '.join(line.args)}"[:80])
def test_doc_command_parses(line: CliLine) -> None:
    parse_cli(line.args)


@pytest.mark.parametrize("block", YAML_BLOCKS, ids=lambda block: block[0])
def test_doc_yaml_is_a_valid_config(
    block: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, body = block
    for variable in _ENV_REFERENCE.findall(body):
        monkeypatch.setenv(variable, "placeholder-secret")
    path = tmp_path / "doc.yaml"
    path.write_text(body)
    config_module.load(path)  # a ConfigError names the key that drifted
