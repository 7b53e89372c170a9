"""Every file a user names is checked before the long work and written through kbackup.core.files
(issue 34, item 3's leftovers): ``show-offset-mapping --output`` (a Spark job's result), ``drill
--report`` (with ``--local`` and with a config) and three-phase-restore's state folder (its plan
and mapping files). A file that cannot be written is exit 3 and one line naming it and the reason,
and the long work never starts; a write that fails at the end (a full disk) is the same line, not
an internal error.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kbackup.cli import mapping_cmds
from kbackup.cli.main import run
from kbackup.core.errors import ConfigError, PreconditionError
from kbackup.format.mapping_file import OffsetMapping, ScanStats, read_mapping
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage

NEXT_STEP = "kafka-backup: next step: name a file in an existing folder this user can write"
STATE_NEXT_STEP = (
    "kafka-backup: next step: set three_phase.state_dir (or --state-dir) to a folder this user can write"
)
NO_BROKER = "127.0.0.1:1"
REPORT = "drill report (--report, drill.report_path)"
STATE_FILE = "three-phase-restore state file (three_phase.state_dir, --state-dir)"
DEV_FULL = Path("/dev/full")


def bad_files(tmp_path: Path) -> list[tuple[Path, str]]:
    """(a file that cannot be written, the reason its line gives)."""
    regular = tmp_path / "file.txt"
    regular.write_text("not a folder\n")
    cases = [
        (regular / "out.json", f"{regular} is a file, not a folder"),
        (tmp_path / "a-folder", "it is a folder"),
    ]
    (tmp_path / "a-folder").mkdir()
    if os.geteuid() != 0:  # root writes into a read-only folder
        read_only = tmp_path / "read-only"
        read_only.mkdir()
        read_only.chmod(0o555)
        cases.append((read_only / "out.json", "Permission denied"))
    return cases


def refused(
    capsys: pytest.CaptureFixture[str], code: int, first_line: str, next_step: str = NEXT_STEP
) -> None:
    out, err = capsys.readouterr()
    assert code == ConfigError.exit_code, (out, err)
    assert err.splitlines() == [f"kafka-backup: error: {first_line}", next_step], err


# show-offset-mapping --output


def a_mapping() -> OffsetMapping:
    return OffsetMapping(
        source_cluster="prod",
        ranges=[],
        scanned=[],
        created_at=datetime(2026, 11, 20, tzinfo=UTC),
        stats=ScanStats(topics=1, partitions=1, offsets_scanned=0, pieces=0, seconds=0.1, spark_seconds=0.1),
    )


@pytest.fixture
def scans(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The Spark scan, stubbed: what it was asked, and an empty mapping."""
    asked: list[object] = []

    def build_offset_mapping(*args: object, **kwargs: object) -> OffsetMapping:
        asked.append((args, kwargs))
        return a_mapping()

    monkeypatch.setattr(mapping_cmds, "build_offset_mapping", build_offset_mapping)
    return asked


MAPPING_ARGS = ["show-offset-mapping", "-b", NO_BROKER, "--source-cluster-id", "prod", "-t", "orders"]


@pytest.mark.parametrize("output_format", ["json", "parquet", "csv"])
def test_a_mapping_output_that_cannot_be_written_is_refused_before_the_scan(
    output_format: str, tmp_path: Path, scans: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    for path, reason in bad_files(tmp_path):
        code = run([*MAPPING_ARGS, "--format", output_format, "-o", str(path)])
        refused(capsys, code, f"show-offset-mapping --output {path}: cannot write it: {reason}")
    assert scans == []


@pytest.mark.skipif(not DEV_FULL.is_char_device(), reason="no /dev/full")
def test_a_mapping_the_disk_cannot_hold_is_one_line_not_an_internal_error(
    scans: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    # JSON only: pyarrow's write_table removes its target when a write fails, and as root that
    # target would be /dev/full itself (the parquet bytes now go through the same write_file).
    code = run([*MAPPING_ARGS, "--format", "json", "-o", str(DEV_FULL)])
    refused(
        capsys, code, f"show-offset-mapping --output {DEV_FULL}: cannot write it: No space left on device"
    )
    assert len(scans) == 1  # the open succeeded: only the write could tell


@pytest.mark.parametrize("output_format", ["json", "parquet"])
def test_a_writable_mapping_output_is_written(
    output_format: str, tmp_path: Path, scans: list[object], capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"mapping.{output_format}"
    assert run([*MAPPING_ARGS, "-o", str(path)]) == 0, capsys.readouterr().err
    assert read_mapping(path).source_cluster == "prod"
    assert f"wrote {path} ({path.stat().st_size} bytes, {output_format})" in capsys.readouterr().out


# drill --report


@pytest.fixture
def drills(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What of a drill's long work started: the local clusters, the backup."""
    import kbackup.backup as backup_stage
    from kbackup.sandbox import kafka

    started: list[str] = []

    def local_clusters(*_args: object, **_kwargs: object) -> Any:
        started.append("local clusters")
        raise PreconditionError("stubbed: no clusters here")

    def run_backup(*_args: object, **_kwargs: object) -> Any:
        started.append("backup")
        raise PreconditionError("stubbed: no backup here")

    monkeypatch.setattr(kafka, "local_clusters", local_clusters)
    monkeypatch.setattr(backup_stage, "run_backup", run_backup)
    return started


def drill_config(tmp_path: Path) -> Path:
    config = tmp_path / "dr.yaml"
    config.write_text(
        f"source:\n  bootstrap_servers: {NO_BROKER}\ntarget:\n  bootstrap_servers: {NO_BROKER}\n"
        f"storage:\n  url: {tmp_path / 'store'}\nbackup:\n  include_offset_headers: true\n"
    )
    return config


def test_a_drill_report_that_cannot_be_written_is_refused_before_the_drill(
    tmp_path: Path, drills: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    config = drill_config(tmp_path)
    for path, reason in bad_files(tmp_path):
        for how in (["--local"], ["-c", str(config)]):
            code = run(["drill", *how, "--report", str(path)])
            refused(
                capsys, code, f"drill report (--report, drill.report_path) {path}: cannot write it: {reason}"
            )
    assert drills == []


def test_the_html_beside_the_drill_report_is_checked_too(
    tmp_path: Path, drills: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "report.html").mkdir()
    code = run(["drill", "--local", "--report", str(tmp_path / "report.json")])
    refused(
        capsys,
        code,
        f"{REPORT} {tmp_path / 'report.html'}: cannot write it: it is a folder",
    )
    assert drills == []


def test_a_writable_drill_report_in_a_new_folder_lets_the_drill_start(
    tmp_path: Path, drills: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The report's folder is made, as it always was (``reports/drill.json``); nothing is left in it."""
    code = run(["drill", "--local", "--report", str(tmp_path / "reports" / "drill.json")])
    assert code == PreconditionError.exit_code, capsys.readouterr().err
    assert drills == ["local clusters"]
    assert list((tmp_path / "reports").iterdir()) == []


# three-phase-restore's state folder


@pytest.fixture
def restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A backup to restore, a target that answers with its cluster id, and a restore that records
    whether it started."""
    from kbackup.app import three_phase
    from kbackup.restore import service

    builder = BackupBuilder(LocalStorage(tmp_path / "store"), "nightly", scratch_dir=tmp_path)
    builder.topic("orders", 1)
    builder.partition(
        "orders", 0, [BackupRecord(offset=o, value=b"v", timestamp=1_700_000_000_000 + o) for o in range(3)]
    )
    builder.commit()
    started: list[str] = []

    def prepare(**_kwargs: object) -> Any:
        started.append("restore")
        raise PreconditionError("stubbed: no restore here")

    monkeypatch.setattr(
        three_phase, "open_admin", lambda _target: SimpleNamespace(cluster_id=lambda: "target-1")
    )
    monkeypatch.setattr(three_phase, "source_offsets_for", lambda *_args: None)
    monkeypatch.setattr(service, "prepare", prepare)
    return started


def three_phase_args(tmp_path: Path) -> list[str]:
    config = tmp_path / "dr.yaml"
    config.write_text("restore:\n  include_original_offset_header: true\n")
    return ["three-phase-restore", "-c", str(config), "-b", NO_BROKER, "-p", str(tmp_path / "store")]


def test_a_state_folder_that_cannot_be_written_is_refused_before_the_restore(
    tmp_path: Path, restores: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    regular = tmp_path / "file.txt"
    regular.write_text("not a folder\n")
    cases = [
        (regular, f"{regular} is a file, not a folder"),
        (regular / "deeper", f"{regular} is a file, not a folder"),
    ]
    if os.geteuid() != 0:
        read_only = tmp_path / "read-only"
        read_only.mkdir()
        read_only.chmod(0o555)
        cases.append((read_only, "Permission denied"))
    for state_dir, reason in cases:
        code = run([*three_phase_args(tmp_path), "--backup-id", "nightly", "--state-dir", str(state_dir)])
        out, err = capsys.readouterr()
        assert code == ConfigError.exit_code, (out, err)
        lines = err.splitlines()
        assert lines[0].startswith(f"kafka-backup: error: {STATE_FILE} {state_dir}/"), err
        assert lines[0].endswith(f": cannot write it: {reason}"), err
        assert lines[1:] == [STATE_NEXT_STEP], err
    assert restores == []


def test_a_reset_plan_in_the_way_is_refused_before_the_restore(
    tmp_path: Path, restores: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The run's own files are checked, not only its folder: a folder where the plan goes. A
    writable folder lets the restore start, and the check leaves nothing in it."""
    from kbackup.app import three_phase, three_phase_run
    from kbackup.app.three_phase_run import RunFiles

    seen: list[RunFiles] = []

    def run_files(*args: Any) -> RunFiles:
        seen.append(three_phase_run.run_files(*args))
        return seen[-1]

    monkeypatch.setattr(three_phase, "run_files", run_files)
    args = [*three_phase_args(tmp_path), "--backup-id", "nightly", "--state-dir", str(tmp_path / "state")]
    code = run(args)
    assert code == PreconditionError.exit_code, capsys.readouterr().err
    capsys.readouterr()
    assert restores == ["restore"]
    assert list((tmp_path / "state").iterdir()) == []
    plan = seen[0].reset_plan
    plan.mkdir()
    code = run(args)
    refused(
        capsys,
        code,
        f"{STATE_FILE} {plan}: cannot write it: it is a folder",
        STATE_NEXT_STEP,
    )
    assert restores == ["restore"]
