"""What can be checked of the Dockerfile without a Docker engine: base image, Java 17, this package
installed with pip, the console script declared in pyproject.toml as entrypoint, a non-root user."""

from __future__ import annotations

import fnmatch
import importlib
import json
import tomllib
from pathlib import Path

from tests.support.cli_lines import parse_cli

ROOT = Path(__file__).parents[2]


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = (ROOT / "Dockerfile").read_text()
    logical = [
        line for line in text.replace("\\\n", " ").splitlines() if line.strip() and not line.startswith("#")
    ]
    pairs = []
    for line in logical:
        keyword, _, rest = line.strip().partition(" ")
        pairs.append((keyword.upper(), " ".join(rest.split())))
    return pairs


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_base_image_is_slim_python_311() -> None:
    bases = [args for keyword, args in _instructions() if keyword == "FROM"]
    assert len(bases) == 1
    assert bases[0].startswith("python:3.11-slim")


def test_java_17_runtime_is_installed() -> None:
    runs = " ".join(args for keyword, args in _instructions() if keyword == "RUN")
    assert "apt-get install" in runs
    assert "openjdk-17-jre-headless" in runs


def test_installs_this_package_from_the_copied_sources() -> None:
    instructions = _instructions()
    copied = {
        source.rstrip("/")
        for keyword, args in instructions
        if keyword == "COPY"
        for source in args.split()[:-1]
    }
    project = _pyproject()
    readme = project["project"]["readme"]  # type: ignore[index]
    packages = project["tool"]["setuptools"]["packages"]["find"]["include"]  # type: ignore[index]
    assert {"pyproject.toml", readme} <= copied
    for pattern in packages:
        assert any(fnmatch.fnmatch(source, pattern) for source in copied), f"package {pattern} not copied"
    installs = [args for keyword, args in instructions if keyword == "RUN" and "pip install" in args]
    assert len(installs) == 1
    assert installs[0].split("&&")[0].split()[-1] == ".", "the image must install this package: pip install ."
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    ignored = [line for line in ignored if line and not line.startswith("#")]
    for source in copied:
        assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), (
            f".dockerignore drops {source}"
        )
    assert {".git", ".venv", "kafka-backups"} <= set(ignored)


def test_entrypoint_is_the_declared_console_script() -> None:
    instructions = _instructions()
    (entrypoint,) = [json.loads(args) for keyword, args in instructions if keyword == "ENTRYPOINT"]
    scripts: dict[str, str] = _pyproject()["project"]["scripts"]  # type: ignore[index]
    assert entrypoint == ["kafka-backup"]
    assert entrypoint[0] in scripts
    module, _, function = scripts[entrypoint[0]].partition(":")
    assert callable(getattr(importlib.import_module(module), function))
    (command,) = [json.loads(args) for keyword, args in instructions if keyword == "CMD"]
    parse_cli(command)


def test_runs_as_a_non_root_user_after_installing() -> None:
    instructions = _instructions()
    keywords = [keyword for keyword, _ in instructions]
    users = [(index, args) for index, (keyword, args) in enumerate(instructions) if keyword == "USER"]
    assert users, "no USER: the container would run as root"
    last_index, last_user = users[-1]
    assert last_user not in ("root", "0", "0:0")
    install = max(index for index, (keyword, args) in enumerate(instructions) if "pip install" in args)
    assert last_index > install
    assert keywords.index("ENTRYPOINT") > last_index
    created = [args for keyword, args in instructions if keyword == "RUN" and "useradd" in args]
    assert created
    assert created[0].split()[-1] == last_user
