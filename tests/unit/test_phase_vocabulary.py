"""One vocabulary for the three-phase restore (issue 34, item 11): ``three-phase-restore --help``,
docs/runbook.md, README's transcripts and the Dockerfile name the phases the code runs, in the order
it runs them, and never by a number that can drift.

The order is taken from the code itself: ``three_phase_restore`` run with every step it calls
replaced by a stand-in, so the test follows the code, not a list kept beside it.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from kbackup.app import three_phase
from kbackup.cli.app import app

ROOT = Path(__file__).parents[2]
NAMES = ("restore", "mapping", "reset", "verify", "audit")


def phases_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, build_mapping: str) -> list[str]:
    """The phases ``three_phase_restore`` runs, in its order, for a ``three_phase.build_mapping``."""
    import kbackup.app.audit
    import kbackup.format.mapping_file
    import kbackup.restore.service

    config: Any = SimpleNamespace(
        backup_id="b",
        storage=None,
        restore=None,
        restore_metadata=SimpleNamespace(enabled=False),
        three_phase=SimpleNamespace(build_mapping=build_mapping, group_prefix="", accept_gap=False),
        offset_reset=SimpleNamespace(groups=[], strategy="header", snapshot_dir=str(tmp_path)),
    )
    files = SimpleNamespace(
        run_key="k",
        state=tmp_path / "state.json",
        mapping=tmp_path / "m.json",
        reset_plan=tmp_path / "p.json",
    )
    restored = SimpleNamespace(
        restore_id="r", records=0, topics=[], created_topics=[], compaction=[], warnings=[]
    )
    plan = SimpleNamespace(
        to_json_bytes=lambda: b"{}",
        totals=lambda: dict.fromkeys(
            ("groups", "partitions", "rereads", "unknown_rereads", "recovery_gap", "retention_gap"), 0
        ),
    )
    stand_ins: dict[str, Any] = {
        "checked_inputs": lambda cfg: (cfg, None, "b"),
        "open_admin": lambda target: SimpleNamespace(cluster_id=lambda: "c"),
        "run_files": lambda cfg, cluster_id: files,
        "source_offsets_for": lambda *args, **kwargs: None,
        "spark_engine": lambda cfg: None,
        "job_backup": lambda cfg: SimpleNamespace(coverage=dict),
        "selected_target_topics": lambda cfg, backup: [],
        "repartitioned": lambda *args: False,
        "build_mapping_phase": lambda *args: {},
        "plan_reset": lambda *args, **kwargs: plan,
        "execute_plan": lambda *args, **kwargs: SimpleNamespace(
            changes=[], already_applied=0, snapshot_path=None
        ),
        "read_plan": lambda path: plan,
        "check_positions": lambda *args, **kwargs: SimpleNamespace(
            raise_for=lambda accept_gap: None, details=dict
        ),
    }
    for name, stand_in in stand_ins.items():
        monkeypatch.setattr(three_phase, name, stand_in)
    monkeypatch.setattr(kbackup.restore.service, "prepare", lambda **kwargs: None)
    monkeypatch.setattr(kbackup.restore.service, "run", lambda *args, **kwargs: restored)
    monkeypatch.setattr(
        kbackup.app.audit,
        "audit_positions",
        lambda *args: SimpleNamespace(disagreements=[], raise_for_disagreement=lambda: None, details=dict),
    )
    monkeypatch.setattr(kbackup.format.mapping_file, "read_mapping", lambda path: None)
    summary = three_phase.three_phase_restore(config)
    return [phase.name for phase in summary.phases]


@pytest.fixture
def code_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The default order (three_phase.build_mapping: audit), which every document describes."""
    return phases_run(monkeypatch, tmp_path, "audit")


def test_the_default_order_moves_groups_before_the_mapping(code_order: list[str]) -> None:
    # The premise of the documents below: consumers can start before Spark's mapping.
    assert code_order == ["restore", "reset", "verify", "mapping", "audit"]


@pytest.mark.parametrize("mode", ["always", "when-needed"])
def test_the_other_modes_map_before_the_reset(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str
) -> None:
    # What three-phase-restore --help says of them: the mapping before the reset, no audit.
    assert phases_run(monkeypatch, tmp_path, mode) == ["restore", "mapping", "reset", "verify"]


def _named_order(text: str) -> list[str]:
    """The phase names in ``text`` (``restore, reset, verify, mapping, audit``), in order."""
    return re.findall(r"\b(" + "|".join(NAMES) + r")\b", text)


def test_help_names_the_phases_in_the_codes_order(code_order: list[str]) -> None:
    result = CliRunner().invoke(app, ["three-phase-restore", "--help"], terminal_width=100)
    text = " ".join(result.output.split())
    listed = re.search(r"The phases, in order: ([a-z, ]+)\.", text)
    assert listed is not None, text
    assert [name.strip() for name in listed.group(1).split(",")] == code_order
    assert not re.search(r"\bphase \d", text, re.IGNORECASE)


def test_runbook_lists_the_phases_in_the_codes_order(code_order: list[str]) -> None:
    text = (ROOT / "docs" / "runbook.md").read_text()
    # The numbered list of what the command does, each item opening with its phase names in bold.
    items = re.findall(r"^\d+\. ((?:\*\*[a-z]+\*\*(?: and )?)+)", text, re.MULTILINE)
    assert [name for item in items for name in re.findall(r"\*\*([a-z]+)\*\*", item)] == code_order
    assert not re.search(r"\bphase \d", text, re.IGNORECASE)
    transcript = text[text.index("Output of a real run") :]
    transcript = transcript[: transcript.index("```", transcript.index("```") + 3)]
    printed = [
        line.split()[0] for line in transcript.splitlines() if line.split()[:1] and line.split()[0] in NAMES
    ]
    assert printed == code_order


def test_readme_transcripts_show_the_codes_order(code_order: list[str]) -> None:
    text = (ROOT / "README.md").read_text()
    runs = re.findall(r"\$ kafka-backup three-phase-restore -c dr\.yaml\n(.*?)```", text, re.DOTALL)
    assert len(runs) == 2  # the first run and the re-run that skips every phase
    for output in runs:
        printed = [
            line.split()[0] for line in output.splitlines() if line.split()[:1] and line.split()[0] in NAMES
        ]
        assert printed == code_order
    drill = re.search(r"^phases: (.*)$", text, re.MULTILINE)
    assert drill is not None
    assert [part.split()[0] for part in drill.group(1).split(", ")] == ["backup", *code_order, "proof"]
    on_the_day = text[text.index("**On the day**") : text.index("```console", text.index("**On the day**"))]
    assert list(dict.fromkeys(_named_order(on_the_day))) == code_order
    assert not re.search(r"\bphase \d|\(\d\) ", text, re.IGNORECASE)


def test_dockerfile_names_the_phase_that_needs_java() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert not re.search(r"\bphase \d", text, re.IGNORECASE)
    assert "mapping" in text
