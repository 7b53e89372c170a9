"""One way to say a range (issue 34, item 11), through the CLI: ``describe`` and ``status`` print a
partition's offsets as the first and the last offset held, both included (``offsets 0 to 29``),
times as ``A to B``, and ``list`` prints every time of a row in one format (docs/status.md,
"Offsets and times")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.storage import LocalStorage
from tests.support.backup_builder import write_increment

ISO_MS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    storage = LocalStorage(tmp_path / "store")
    # Partition 0 holds offsets 0-29 (records at 0..19, then 20..29), partition 1 offsets 0-4 and
    # nothing more in the second increment.
    write_increment(storage, tmp_path, 0, {0: (0, 20), 1: (0, 5)}, groups={"g": {0: 12}})
    write_increment(storage, tmp_path, 1, {0: (20, 30), 1: (5, 5)}, groups={"g": {0: 30, 1: 5}})
    return tmp_path / "store"


def _partition_lines(out: str) -> dict[str, str]:
    return {line.split(":")[0].strip(): line for line in out.splitlines() if re.match(r"\s+t/\d:", line)}


def test_describe_and_status_say_the_same_offsets_the_same_way(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["describe", "-p", str(store), "--backup-id", "b"]) == 0
    described = _partition_lines(capsys.readouterr().out)
    assert run(["status", "-p", str(store), "--backup-id", "b"]) == 0
    status = _partition_lines(capsys.readouterr().out)
    for lines in (described, status):
        assert "offsets 0 to 29" in lines["t/0"]
        assert "30 records" in lines["t/0"]
        assert "offsets 0 to 4" in lines["t/1"]
        assert "5 records" in lines["t/1"]
        for line in lines.values():
            assert ".." not in line
            assert re.search(f"time {ISO_MS} to {ISO_MS}", line), line


def test_describe_says_when_a_partition_holds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = LocalStorage(tmp_path / "store")
    write_increment(storage, tmp_path, 0, {0: (7, 7)})
    assert run(["describe", "-p", str(tmp_path / "store"), "--backup-id", "b"]) == 0
    assert "t/0: no offsets (next 7)" in capsys.readouterr().out


def test_list_prints_one_time_format_in_a_row(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["list", "-p", str(store)]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert "last run" in header
    assert "restorable from" in header
    times = re.findall(r"\d{4}-\d\d-\d\dT\S+", row)
    assert len(times) == 2
    for moment in times:
        assert re.fullmatch(ISO_MS, moment), row
