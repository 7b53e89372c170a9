"""The drill's ``--as-of`` variant without clusters: the local drill's check of each group's position
of the moment against its own record of commits, the choice of the moment and of the reading, the
report's as-of section, and the command's refusals before it touches a cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kbackup.app.drill_history import (
    COMMITTED_BY_THEN,
    GroupCommit,
    auto_moment,
    check_positions,
    latest_reading_by,
)
from kbackup.app.drill_report import AsOfFacts, render_html
from kbackup.core.times import iso_utc
from kbackup.format.group_history import GroupsReading
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.drill_reports import sample_report

KEY = ("orders", 0)
#: A group committing 10, 20, 30: sent at 100, 110, 120 and acknowledged a second later.
COMMITS = [GroupCommit("app", {KEY: offset}, 90.0 + offset, 91.0 + offset) for offset in (10, 20, 30)]


@pytest.mark.parametrize(
    ("offset", "as_of", "reading_taken_at", "verdict"),
    [
        (20, 115.0, 112.0, COMMITTED_BY_THEN),
        # The reading started before the commit of 20 was acknowledged: it may show 10 still.
        (10, 115.0, 110.5, COMMITTED_BY_THEN),
        # A commit sent after the moment: a later position than the group had then.
        (30, 115.0, 112.0, "committed after the moment"),
        # The reading started after 20 was acknowledged: showing 10 it lost a commit.
        (10, 115.0, 112.0, "older than its reading"),
        (25, 115.0, 112.0, "never committed"),
    ],
)
def test_a_position_of_the_moment_is_one_the_group_had_committed_then(
    offset: int, as_of: float, reading_taken_at: float, verdict: str
) -> None:
    [checked] = check_positions(
        COMMITS, {"app": {KEY: offset}}, as_of=as_of, reading_taken_at=reading_taken_at
    )
    assert (checked.verdict, checked.ok, checked.commits) == (verdict, verdict == COMMITTED_BY_THEN, 3)
    assert checked.to_dict()["offsets"] == {"orders/0": offset}


def test_a_group_missing_from_the_reading_was_never_committed_there() -> None:
    [checked] = check_positions(COMMITS, {}, as_of=115.0, reading_taken_at=112.0)
    assert checked.verdict == "never committed"


def reading(taken: float, finished: float | None) -> GroupsReading:
    return GroupsReading(iso_utc(taken), None if finished is None else iso_utc(finished), 1, "history", {})


def test_the_latest_reading_finished_by_the_moment_and_the_auto_moment() -> None:
    readings = [reading(100.0, 100.2), reading(101.0, 101.3), reading(102.0, None), reading(103.0, 103.4)]
    at = datetime.fromtimestamp(101.25, UTC)
    assert latest_reading_by(readings, at) == iso_utc(100.0)  # 101.0's reading finished after it
    assert latest_reading_by(readings, datetime.fromtimestamp(102.0, UTC)) == iso_utc(102.0)
    assert latest_reading_by(readings, datetime.fromtimestamp(99.0, UTC)) is None
    assert auto_moment(readings, "b") == datetime.fromtimestamp(101.8, UTC)  # halfway 100.2 .. 103.4


def facts(**changes: object) -> AsOfFacts:
    base = AsOfFacts(
        as_of="2026-11-24T02:00:00.000Z",
        chosen="given",
        precision_secs=10.0,
        reading_taken_at="2026-11-24T01:59:55.000Z",
        latest_reading_taken_at="2026-11-24T01:59:55.000Z",
    )
    for name, value in changes.items():
        setattr(base, name, value)
    return base


def test_the_report_says_the_moment_and_its_precision(tmp_path: Path) -> None:
    report = sample_report()
    report.as_of = facts()
    assert report.passed
    document = report.to_dict()["as_of"]
    assert document["as_of"] == "2026-11-24T02:00:00.000Z"
    assert (document["precision_secs"], document["passed"], document["groups_checked"]) == (10.0, True, None)
    lines = report.summary_lines()
    assert (
        "as of 2026-11-24T02:00:00.000Z (given): records stamped at or before it, groups at the "
        "backup's reading of 2026-11-24T01:59:55.000Z (groups read every 10s: a commit up to that long "
        "before the moment may not show)"
    ) in lines
    assert "as of 2026-11-24T02:00:00.000Z (given)" in render_html(report)


def test_a_wrong_reading_or_group_fails_the_drill() -> None:
    report = sample_report()
    report.as_of = facts(latest_reading_taken_at="2026-11-24T01:59:58.000Z")
    assert not report.passed
    assert report.verdict == "FAILED: the groups' positions of the moment are not theirs of then"
    failure = report.failure(Path("drill.json"))
    assert failure is not None
    assert failure.exit_code == 11
    assert "the latest reading finished by the moment is that of 2026-11-24T01:59:58.000Z" in failure.message

    report.as_of = facts(
        groups=[
            {"group": "billing", "offsets": {"orders/0": 30}, "verdict": "committed after the moment"},
            {"group": "crm", "offsets": {"customers/0": 3}, "verdict": COMMITTED_BY_THEN},
        ]
    )
    assert not report.passed
    assert "  as of: billing: committed after the moment (orders/0 30)" in report.summary_lines()
    assert (
        "history: 1 of 2 group(s) at a position they had committed by then, checked against the drill's "
        "own record of their commits"
    ) in report.summary_lines()
    assert json.loads(json.dumps(report.to_dict()))["as_of"]["passed"] is False


def test_local_takes_auto_not_a_time(cli: RunCli) -> None:
    code, out, err = cli("drill", "--local", "--as-of", "2026-11-27T13:59:00Z")
    assert code == 2, out + err
    assert "--local --as-of takes auto, not a time" in err.splitlines()[0]


def test_a_time_without_its_zone_or_a_config_without_a_backup_is_refused_before_any_cluster(
    cli: RunCli, tmp_path: Path
) -> None:
    sections = {
        "source": {"bootstrap_servers": ["127.0.0.1:1"]},
        "target": {"bootstrap_servers": ["127.0.0.1:1"]},
        "storage": {"url": str(tmp_path / "store")},
    }
    report = tmp_path / "drill.json"
    unnamed = config_file(tmp_path / "unnamed.yaml", **sections)
    named = config_file(tmp_path / "named.yaml", backup_id="nightly", **sections)

    code, out, err = cli("drill", "-c", str(named), "--as-of", "2026-11-27T13:59:00", "--report", str(report))
    assert code == 3, out + err
    assert "has no time zone: write it with Z (UTC) or an offset such as +01:00" in err.splitlines()[0]

    code, out, err = cli("drill", "-c", str(unnamed), "--as-of", "auto", "--report", str(report))
    assert code == 3, out + err
    assert "the config names no backup_id" in err.splitlines()[0]
    assert not report.exists()
