"""Help and docs that lead somewhere (issue 34, item 9), through the CLI: the global options work
after the command too (where the "run again with --debug" hint sends a reader), every document a
help text cites prints with ``kafka-backup docs TOPIC``, examples read "e.g.", defaults are shown
as click shows them, bounds are in words, and no command's summary is cut in the listing.
README opens with its title, the two make commands, then how to install, and says how to report
a bug. The installed wheel's copy of the docs: tests/unit/test_docs_installed.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from kbackup.cli.app import app
from kbackup.cli.main import run
from tests.support.cli_help import all_help, cited_topics

ROOT = Path(__file__).parents[2]


# --- global options after the command -------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [["--debug"], ["-vv"], ["--verbose"], ["--no-progress"], ["--log-format", "json"], ["--log-format=json"]],
)
def test_global_options_work_after_the_command(
    tmp_path: Path, options: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["list", "-p", str(tmp_path), *options]) == 0
    assert capsys.readouterr().out.startswith("no backups in ")


def test_the_debug_hint_works_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(storage: object) -> list[object]:
        raise RuntimeError("a bug")

    monkeypatch.setattr("kbackup.backup.inspect.list_backups", broken)
    assert run(["list", "-p", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "run the same command again with --debug" in err
    # Followed as a reader does, with --debug added at the end of the same command line.
    assert run(["list", "-p", str(tmp_path), "--debug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "RuntimeError: a bug" in err
    assert "No such option" not in err


def test_hoisting_keeps_command_options_and_what_follows_the_double_dash() -> None:
    from kbackup.cli.app import hoist_global_options

    assert hoist_global_options(["list", "-p", "kb", "--debug", "-v", "--log-format", "json"]) == [
        "--debug", "-v", "--log-format", "json", "list", "-p", "kb",
    ]  # fmt: skip
    assert hoist_global_options(["x", "--", "--debug"]) == ["x", "--", "--debug"]


def test_the_root_help_says_where_the_global_options_go() -> None:
    assert "before the command or after it" in " ".join(all_help()["kafka-backup"].split())


# --- documents ------------------------------------------------------------------------------


def test_help_cites_documents_as_a_command_that_prints_them() -> None:
    for path, text in all_help(200).items():
        if path == "kafka-backup docs":
            continue  # its own help explains docs/TOPIC.md
        assert not re.search(r"docs/[a-z-]+\.md", text), f"{path} --help cites a file a package may not have"
    assert {"configuration", "exit-codes", "scaling", "status"} <= cited_topics()


def test_every_cited_document_prints(capsys: pytest.CaptureFixture[str]) -> None:
    for topic in sorted(cited_topics()):
        assert run(["docs", topic]) == 0, topic
        assert capsys.readouterr().out == (ROOT / "docs" / f"{topic}.md").read_text()


def test_docs_lists_every_document_and_takes_a_path_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["docs"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()[:-1]]
    assert listed == sorted(path.stem for path in (ROOT / "docs").glob("*.md"))
    assert run(["docs", "docs/security.md#client-side-encryption"]) == 0
    assert capsys.readouterr().out.startswith("# Security")


def test_an_unknown_document_is_named_with_the_topics(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["docs", "nope"]) == 9
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "kafka-backup: error: no document 'nope'"
    assert "runbook" in err[1]


# --- how help texts say things --------------------------------------------------------------


def test_bounds_are_words_and_a_count_has_no_default_shown() -> None:
    helps = all_help()
    for path, text in helps.items():
        assert not re.search(r"x\s*[<>]=|[<>]=\s*x", text), f"{path}: click's range notation"
    assert "-vv debug).  [default: 0]" not in helps["kafka-backup"]
    flat = " ".join(helps["kafka-backup drill"].split())
    assert "[default: 2000; at least 10]" in flat
    assert "[default: 8; 1 to 256]" in " ".join(helps["kafka-backup offset-reset execute"].split())


def test_examples_say_e_g_and_defaults_are_shown_as_click_shows_them() -> None:
    helps = {path: " ".join(text.split()) for path, text in all_help(200).items()}
    assert "older than this, e.g. 15m, 2h, 1d or 1h30m." in helps["kafka-backup status"]
    assert "(15m, 2h" not in helps["kafka-backup status"]
    bind = "Address the metrics server listens on. [default: (metrics.bind, else 0.0.0.0)]"
    assert bind in helps["kafka-backup backup"]
    assert "(0.0.0.0)" not in helps["kafka-backup backup"].replace("(metrics.bind, else 0.0.0.0)", "")
    assert (
        "Spark master for --engine spark and the mapping. [default: (mapping.spark_master)]"
        in helps["kafka-backup restore"]
    )
    # A default written by hand in the help, beside click's own: one of the two is enough.
    assert "(default: parquet-hadoop" not in helps["kafka-backup parquet-key"]
    # In no command: a default written by hand, or an example in parentheses that reads like one.
    by_hand = re.compile(r"\(default[:\s]|\((\d+(\.\d+)?[a-zA-Z]+)\)\.")
    written = {path: found.group(0) for path, text in helps.items() if (found := by_hand.search(text))}
    assert written == {}, written


@pytest.mark.parametrize("width", [60, 80, 120])
def test_no_command_summary_is_cut(width: int) -> None:
    root: Any = typer.main.get_command(app)
    helps = all_help(width)
    for group_path, group in (
        ("kafka-backup", root),
        ("kafka-backup offset-reset", root.commands["offset-reset"]),
    ):
        listing = helps[group_path].split("Commands:")[1]
        assert "..." not in listing, listing
        flat = re.sub(r"-\s+", "-", " ".join(listing.split()))  # a line broken after a hyphen
        for name, command in group.commands.items():
            first_sentence = re.split(r"(?<=\.)\s", " ".join((command.help or "").split()), maxsplit=1)[0]
            assert f"{name} {first_sentence}" in flat, (name, first_sentence)


# --- README ---------------------------------------------------------------------------------


def test_readme_opens_with_its_title_then_make_then_install() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "# kafka-backup"
    commands = [
        line.split("#")[0].strip() for line in lines if line.startswith(("make ", "pip ", "kafka-backup "))
    ]
    assert commands[:2] == ["make demo", "make test"]
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[0] == "## Install"
    install = "\n".join(lines[lines.index("## Install") :])
    assert "pip install ." in install.split("## ", 2)[1]


def test_readme_says_how_to_report_a_bug() -> None:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Reporting a problem") :]
    for needed in ("--debug", "kafka-backup --version", "internal error"):
        assert needed in section
