"""``kafka-backup drill --local --secured`` on its two authorizer-enabled local clusters (issue 37).

The command starts both clusters with StandardAuthorizer, grants the source's app principals their
ACLs, backs up and restores as the super user with the metadata phase first, then has each app
principal run the same access checks on both clusters. The report is read back: every check agrees,
and among them are an allowed read, an allowed write and denied ones (an explicit DENY among them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kbackup.app.drill_access import DrillUsers
from tests.support.cli_run import RunCli

pytestmark = pytest.mark.integration


def test_each_restored_principal_may_do_on_the_target_exactly_what_it_could_on_the_source(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    # ``spark``: the suite's session, which the drill's audit mapping reuses instead of starting one.
    made: list[DrillUsers] = []
    generate = DrillUsers.generate

    def remembered(cls: type[DrillUsers]) -> DrillUsers:
        made.append(generate())
        return made[-1]

    monkeypatch.setattr(DrillUsers, "generate", classmethod(remembered))
    report = tmp_path / "reports" / "drill.json"

    code, out, err = cli("drill", "--local", "--secured", "--records", "20", "--report", str(report))

    assert code == 0, out + err
    document = json.loads(report.read_text())
    assert document["passed"] is True
    assert document["clusters"]["source"]["servers"].endswith("(SASL_PLAINTEXT)")
    # The metadata phase ran first and created the app users' ACLs and credentials on the target.
    assert list(document["phase_seconds"])[:3] == ["backup", "metadata", "restore"]
    assert list(document["phase_seconds"])[-2:] == ["proof", "access"]
    assert document["three_phase"]["phases"]["metadata"]["applied"] >= 5 + 2 * 2

    access = document["access"]
    assert access["passed"] is True
    assert set(access["principals"]) == {"User:drill_reader", "User:drill_writer"}
    checks = {
        (principal, row["check"]): row for principal, rows in access["principals"].items() for row in rows
    }
    assert all(row["verdict"] == "agrees" for row in checks.values()), checks
    told = {key: (row["source"], row["target"]) for key, row in checks.items()}
    # An allowed read, on the topic's drill copy on the target (a literal ACL follows the rename).
    assert told["User:drill_reader", "read-topic orders"] == ("allowed", "allowed")
    assert checks["User:drill_reader", "read-topic orders"]["target_check"] == "read-topic drill.orders"
    # An allowed write, by a prefixed ACL, to a topic made for the checks.
    assert told["User:drill_writer", "write-topic access.events"] == ("allowed", "allowed")
    # Denied: a write the reader has no ACL for, a read the writer has none for, and the writer's
    # write that an explicit DENY forbids under its prefix's ALLOW.
    assert told["User:drill_reader", "write-topic access.events"] == ("denied", "denied")
    assert told["User:drill_writer", "read-topic orders"] == ("denied", "denied")
    assert told["User:drill_writer", "write-topic access.audit"] == ("denied", "denied")
    assert told["User:drill_writer", "transactional-id drill-writer-1"] == ("allowed", "allowed")

    lines = [line for line in out.splitlines() if line.startswith("access ")]
    assert len(lines) == 2
    assert all(" 6 of 6 check(s) the same on the target as on the source " in line for line in lines)

    # The passwords made for the run are in no report and no output.
    (users,) = made
    written = [report.read_text(), report.with_suffix(".html").read_text(), out, err]
    for password in users.passwords.values():
        assert not [text for text in written if password in text]
