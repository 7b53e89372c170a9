"""A file a user names with --output that cannot be written is the user's to fix, not a bug (issue 34):
one error line naming the file and the reason, a next step, the config exit code 3, and nothing left
behind; a plan file is checked before the planning starts, so minutes of work are not lost at the
last step (``keygen``, ``parquet-key``, ``offset-reset plan``, ``offset-reset-bulk``).

Every case works as root, which writes into a 0o555 folder: a folder that does not exist, a path
through a regular file, and /dev/full (a write that fails with ENOSPC after the open succeeded). A
folder without write permission is tried only when the tests do not run as root.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kbackup.cli import reset_cmds
from kbackup.core.errors import ConfigError, NotFoundError, PreconditionError
from kbackup.format.reset_plan import (
    GroupReset,
    PartitionOffsets,
    PartitionReset,
    ResetPlan,
    SourceOffsetsInfo,
    TargetInfo,
)
from tests.support.cli_run import RunCli

NEXT_STEP = "kafka-backup: next step: name a file in an existing folder this user can write"


def bad_outputs(tmp_path: Path) -> list[tuple[Path, str]]:
    """(an --output that cannot be written, the reason the error line gives)."""
    regular = tmp_path / "file.txt"
    regular.write_text("not a folder\n")
    cases = [
        (tmp_path / "missing" / "deeper" / "out", f"the folder {tmp_path / 'missing'} does not exist"),
        (regular / "out", f"{regular} is a file, not a folder"),
        (tmp_path, "it is a folder"),
    ]
    if os.geteuid() != 0:  # root writes into a read-only folder
        read_only = tmp_path / "read-only"
        read_only.mkdir()
        read_only.chmod(0o555)
        cases.append((read_only / "out", "Permission denied"))
    return cases


def assert_refused(code: int, out: str, err: str, as_json: bool, first_line: str) -> None:
    lines = err.strip().splitlines()
    assert code == ConfigError.exit_code, (code, out, err)
    assert lines == [first_line, NEXT_STEP], err
    assert "internal error" not in err
    if as_json:
        error = json.loads(out)["error"]
        assert (error["kind"], error["exit_code"]) == ("config", ConfigError.exit_code), error
    else:
        assert out == "", out


def files_below(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


@pytest.mark.parametrize("as_json", [False, True])
def test_keygen_to_a_file_that_cannot_be_written(tmp_path: Path, cli: RunCli, as_json: bool) -> None:
    json_flag = ["--json"] if as_json else []
    # The control: a writable path is written.
    code, _out, err = cli("keygen", "--output", str(tmp_path / "good.key"), *json_flag)
    assert code == 0, err
    for output, reason in bad_outputs(tmp_path):
        before = files_below(tmp_path)
        code, out, err = cli("keygen", "--output", str(output), *json_flag)
        if output == tmp_path:  # an existing folder is an existing name: refused as before
            assert code == PreconditionError.exit_code, err
            continue
        assert_refused(
            code,
            out,
            err,
            as_json,
            f"kafka-backup: error: keygen --output {output}: cannot write it: {reason}",
        )
        assert files_below(tmp_path) == before  # nothing created


def test_parquet_key_refuses_its_output_before_it_opens_the_backup(tmp_path: Path, cli: RunCli) -> None:
    """The store holds no backup nightly: reaching it is refused otherwise (exit 9), so exit 3
    proves that the output was checked first."""
    store = tmp_path / "store"
    store.mkdir()
    args = ["parquet-key", "-p", str(store), "--backup-id", "nightly"]
    code, _out, err = cli(*args, "--output", str(tmp_path / "spark.properties"))
    assert code == NotFoundError.exit_code, err  # the control: the store is what fails
    for output, reason in bad_outputs(tmp_path):
        if output == tmp_path:
            continue
        code, out, err = cli(*args, "--output", str(output))
        assert_refused(
            code,
            out,
            err,
            False,
            f"kafka-backup: error: parquet-key --output {output}: cannot write it: {reason}",
        )


def a_plan() -> ResetPlan:
    row = PartitionReset(
        target_topic="orders",
        target_partition=0,
        source_topic="orders",
        source_committed={0: 60},
        target_committed=None,
        new_offset=60,
        method="binary-search",
    )
    return ResetPlan(
        created_at="2026-11-24T03:00:00Z",
        tool_version="0.1.0",
        strategy="header-based",
        source=SourceOffsetsInfo(kind="backup", taken_at="2026-11-24T02:00:00Z", source_cluster="prod"),
        target=TargetInfo(cluster_id="target-id", bootstrap_servers=["127.0.0.1:9093"]),
        target_partitions=[PartitionOffsets(topic="orders", partition=0, log_start=0, log_end=120)],
        groups=[GroupReset(group_id="g", partitions=[row])],
    )


@pytest.fixture
def planning(monkeypatch: pytest.MonkeyPatch) -> list[list[str] | None]:
    """The planning replaced by a plan made up here; the list records each planning started."""
    started: list[list[str] | None] = []

    def make_plan(_config: object, groups: list[str] | None) -> ResetPlan:
        started.append(groups)
        return a_plan()

    monkeypatch.setattr(reset_cmds, "_make_plan", make_plan)
    return started


@pytest.mark.parametrize("as_json", [False, True])
def test_offset_reset_plan_checks_its_output_before_planning(
    tmp_path: Path, cli: RunCli, planning: list[list[str] | None], as_json: bool
) -> None:
    config = tmp_path / "dr.yaml"
    config.write_text(f"backup_id: nightly\nstorage:\n  url: {tmp_path}\n")  # a folder that exists
    json_flag = ["--json"] if as_json else []
    good = tmp_path / "plan.json"
    code, _out, err = cli(
        "offset-reset",
        "plan",
        "-c",
        str(config),
        "-b",
        "kafka:9092",
        "--output",
        str(good),
        *json_flag,
    )
    assert (code, len(planning)) == (0, 1), err  # the control: planned and written
    assert json.loads(good.read_text())["groups"][0]["group_id"] == "g"
    for output, reason in bad_outputs(tmp_path):
        code, out, err = cli(
            "offset-reset",
            "plan",
            "-c",
            str(config),
            "-b",
            "kafka:9092",
            "--output",
            str(output),
            *json_flag,
        )
        assert_refused(
            code,
            out,
            err,
            as_json,
            f"kafka-backup: error: offset-reset plan --output {output}: cannot write it: {reason}",
        )
        assert len(planning) == 1, output  # no planning started
    # An existing plan file is replaced, and the check before the planning leaves it as it was.
    assert good.exists()


def test_a_plan_whose_write_fails_after_the_planning_is_an_error_not_a_bug(
    tmp_path: Path, cli: RunCli, planning: list[list[str] | None]
) -> None:
    """/dev/full opens (so the check passes) and fails each write with ENOSPC: a disk that filled
    up while the plan was made."""
    full = Path("/dev/full")
    if not full.exists():
        pytest.skip("no /dev/full here")
    config = tmp_path / "dr.yaml"
    config.write_text(f"backup_id: nightly\nstorage:\n  url: {tmp_path}\n")  # a folder that exists
    code, out, err = cli("offset-reset", "plan", "-c", str(config), "-b", "kafka:9092", "--output", str(full))
    assert len(planning) == 1
    assert_refused(
        code,
        out,
        err,
        False,
        f"kafka-backup: error: offset-reset plan --output {full}: cannot write it: No space left on device",
    )


def test_offset_reset_bulk_checks_its_output_before_planning(
    tmp_path: Path, cli: RunCli, planning: list[list[str] | None]
) -> None:
    config = tmp_path / "dr.yaml"
    config.write_text("backup_id: nightly\n")
    groups = tmp_path / "groups.txt"
    groups.write_text("g\n")
    for output, reason in bad_outputs(tmp_path):
        code, out, err = cli(
            "offset-reset-bulk",
            "-c",
            str(config),
            "--groups-file",
            str(groups),
            "--output",
            str(output),
        )
        assert_refused(
            code,
            out,
            err,
            False,
            f"kafka-backup: error: offset-reset-bulk --output {output}: cannot write it: {reason}",
        )
    assert planning == []
