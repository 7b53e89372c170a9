"""The secured drill's access judgement: one check whose outcome on the target is not the source's
fails the drill (exit 11), as a skipped record does; and the drill's ACLs and checks keep the
comparison meaningful after its topic rename."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.app.drill_access import ACCESS_CHECKS, DRILL_ACLS, WRITE_TOPICS, target_check
from kbackup.app.drill_report import AccessOutcome, render_html
from kbackup.core.errors import VerificationError
from kbackup.core.kafka.access import AccessCheck
from tests.support.cli_run import RunCli
from tests.support.drill_reports import sample_report

#: The drill's topics (kbackup.app.drill_data) and the names the drill restores them as.
DRILLED = {name: f"drill.{name}" for name in ("orders", "clicks", "customers", "payments")}


def outcome(principal: str, check: str, source: str, target: str) -> AccessOutcome:
    """``check`` of ``drill_<principal>``, its topic renamed on the target as the drill renames it."""
    topic = check.split()[-1]
    target_check = check.replace(topic, DRILLED.get(topic, topic))
    return AccessOutcome(f"User:drill_{principal}", check, target_check, source, target)


def outcomes(*, writer_target: str = "allowed") -> list[AccessOutcome]:
    return [
        outcome("reader", "read-topic orders", "allowed", "allowed"),
        outcome("reader", "write-topic access.events", "denied", "denied"),
        outcome("writer", "write-topic access.events", "allowed", writer_target),
        outcome("writer", "read-topic orders", "denied", "denied"),
    ]


def test_every_check_the_same_on_both_clusters_passes() -> None:
    report = sample_report()
    report.access = outcomes()
    assert report.passed
    assert report.failure(Path("r.json")) is None
    document = json.loads(json.dumps(report.to_dict()))
    assert document["access"]["passed"] is True
    reader = document["access"]["principals"]["User:drill_reader"]
    assert reader[0] == {
        "check": "read-topic orders",
        "target_check": "read-topic drill.orders",
        "source": "allowed",
        "target": "allowed",
        "verdict": "agrees",
    }
    lines = [line for line in report.summary_lines() if line.startswith("access ")]
    assert lines == [
        "access User:drill_reader: 2 of 2 check(s) the same on the target as on the source "
        "(on the source: 1 allowed, 1 denied)",
        "access User:drill_writer: 2 of 2 check(s) the same on the target as on the source "
        "(on the source: 1 allowed, 1 denied)",
    ]


@pytest.mark.parametrize("writer_target", ["denied", "UNKNOWN_TOPIC_OR_PART"])
def test_one_check_that_differs_or_cannot_tell_fails_the_drill(writer_target: str) -> None:
    """A write the writer could make on the source and not on the target (or a check that could not
    tell on the target, which proves nothing) fails the drill with no record skipped."""
    report = sample_report()
    report.access = outcomes(writer_target=writer_target)
    assert report.skipped == 0
    assert not report.passed
    assert report.verdict == "FAILED: a principal may not do on the target what it could on the source"
    error = report.failure(Path("reports/drill.json"))
    assert isinstance(error, VerificationError)
    assert error.exit_code == 11
    assert "1 access check(s)" in str(error)
    assert (
        f"User:drill_writer write-topic access.events: allowed on the source, {writer_target} on the"
        in str(error)
    )
    assert "reports/drill.json" in (error.hint or "")
    document = report.to_dict()
    assert document["passed"] is False
    assert document["access"]["passed"] is False
    verdicts = [row["verdict"] for row in document["access"]["principals"]["User:drill_writer"]]
    assert verdicts[0] == ("differs" if writer_target == "denied" else "unknown")
    writer_line = next(line for line in report.summary_lines() if line.startswith("access User:drill_writer"))
    assert writer_line.startswith("access User:drill_writer: 1 of 2 check(s) the same")
    assert "write-topic access.events" in writer_line
    page = render_html(report)
    assert "FAILED" in page
    assert "Access of the restored principals" in page


def test_a_skipped_record_is_named_before_an_access_difference() -> None:
    report = sample_report(skipped=3)
    report.access = outcomes(writer_target="denied")
    error = report.failure(Path("r.json"))
    assert error is not None
    assert "3 record(s) that groups would skip" in str(error)


def test_a_drill_without_the_access_proof_has_no_access_section() -> None:
    report = sample_report()
    assert report.access is None
    assert report.to_dict()["access"] is None
    assert not [line for line in report.summary_lines() if line.startswith("access ")]
    assert "Access of the restored principals" not in render_html(report)


def test_topic_checks_follow_the_rename_and_group_and_transaction_checks_do_not() -> None:
    assert target_check(AccessCheck("read-topic", "orders"), DRILLED) == AccessCheck(
        "read-topic", "drill.orders"
    )
    assert target_check(AccessCheck("write-topic", "access.events"), DRILLED).resource == "access.events"
    assert target_check(AccessCheck("describe-group", "orders"), DRILLED).resource == "orders"
    assert target_check(AccessCheck("transactional-id", "orders"), DRILLED).resource == "orders"


def test_the_drill_acls_and_checks_keep_the_comparison_meaningful() -> None:
    """What drill_access's docstring says: a prefixed topic ACL covers no drilled topic (its prefix
    would not follow the rename), and every write goes to a topic made for the checks."""
    for acl in DRILL_ACLS:
        if acl.resource_type == "TOPIC" and acl.pattern_type == "PREFIXED":
            assert not [topic for topic in DRILLED if topic.startswith(acl.resource_name)], acl
            assert not [topic for topic in DRILLED.values() if topic.startswith(acl.resource_name)], acl
    writes = [check for check in ACCESS_CHECKS if check.operation == "write-topic"]
    assert writes
    assert {check.resource for check in writes} <= set(WRITE_TOPICS)
    assert not set(WRITE_TOPICS) & set(DRILLED)
    # An explicit DENY is among them, and the checks name a read, a write and a denied operation.
    assert any(acl.permission == "DENY" for acl in DRILL_ACLS)
    assert {"read-topic", "write-topic"} <= {check.operation for check in ACCESS_CHECKS}


def test_secured_without_local_is_refused_in_one_line(cli: RunCli, tmp_path: Path) -> None:
    config = tmp_path / "drill.yaml"
    config.write_text("storage:\n  url: /tmp/nowhere\n")
    code, out, err = cli("drill", "-c", str(config), "--secured")
    assert code == 2, err
    assert "--secured goes with --local" in err
    assert not out
