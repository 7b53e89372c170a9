"""examples/prometheus-alerts.yaml judged by Prometheus' own promtool (``make promtool`` installs it):
the file is valid, and the rules a one-shot run's textfile must trigger (the audit's, the drill's)
fire on its first sample above 0, with their labels and rendered annotations, and on nothing else.
Also the helper that writes promtool's unit-test files (tests/support/promtool.py): series and
values in promtool's notation, and a wrong expectation answered with promtool's own failure.

Run outside ``make`` without promtool, these tests are skipped; under ``make test``
(``KBACKUP_REQUIRE_PROMTOOL=1``) they fail instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

from tests.support.metrics_text import PROMETHEUS_ALERTS, Samples, alert_rules, parse
from tests.support.promtool import Alert, AlertCase, alert_test, promtool_path


@pytest.fixture
def promtool() -> str:
    return promtool_path(skip_outside_make=True)


def test_promtool_checks_the_example_rules(promtool: str) -> None:
    answer = subprocess.run(
        [promtool, "check", "rules", str(PROMETHEUS_ALERTS)], capture_output=True, text=True, timeout=60
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in answer.stdout


#: A rule file of the helper's own tests, independent of the examples.
OWN_RULES = """\
groups:
  - name: own
    rules:
      - alert: Positive
        expr: kafka_backup_x > 0
        labels: {severity: info}
        annotations: {summary: "{{ $labels.backup_id }} at {{ $value }}"}
"""


def test_promtool_refuses_a_rule_file_with_an_invalid_expression(promtool: str, tmp_path: Path) -> None:
    broken = tmp_path / "alerts.yaml"
    broken.write_text(OWN_RULES.replace("expr: kafka_backup_x > 0", "expr: kafka_backup_x >"))
    answer = subprocess.run(
        [promtool, "check", "rules", str(broken)], capture_output=True, text=True, timeout=60
    )
    assert answer.returncode != 0
    assert "FAILED" in answer.stdout + answer.stderr


def exposition(audit: dict[str, float]) -> Samples:
    """A real exposition of the audit gauge with these values by backup, next to series whose values
    and labels need promtool's notation: NaN, infinities, a histogram's ``le="+Inf"``, and a label
    value with a quote, a backslash and a line break."""
    registry = CollectorRegistry()
    gauge = Gauge("kafka_backup_audit_disagreements", "h", ["backup_id"], registry=registry)
    for backup_id, value in audit.items():
        gauge.labels(backup_id).set(value)
    odd = Gauge("kafka_backup_odd", "h", ["backup_id"], registry=registry)
    odd.labels('q"uo\\te\nd').set(float("nan"))
    odd.labels("up").set(float("inf"))
    odd.labels("down").set(float("-inf"))
    Histogram("kafka_backup_commit_seconds", "h", ["backup_id"], registry=registry).labels("a").observe(0.3)
    return parse(generate_latest(registry).decode())


AUDIT = "KafkaBackupRestoreAuditDisagrees"


def audit_alert(backup_id: str, value: int) -> Alert:
    description = alert_rules()[AUDIT]["annotations"]["description"]
    assert "{{" not in description  # rendered as written
    return Alert(
        {"backup_id": backup_id, "severity": "critical"},
        {
            "summary": f"The audit of the restore of {backup_id} disagrees with {value} group position(s)",
            "description": description,
        },
    )


def test_the_audit_rule_fires_on_a_first_sample_above_zero_only(promtool: str) -> None:
    """No ``for:``: a run's textfile is written once, and the alert fires at the first evaluation."""
    failure = alert_test(
        AUDIT,
        [
            AlertCase("disagrees", exposition({"a": 3, "b": 0}), [audit_alert("a", 3)]),
            AlertCase("agrees", exposition({"a": 0})),
            AlertCase("no audit", exposition({})),
            # The label value reaches the alert and its summary unchanged.
            AlertCase("odd backup id", exposition({'x"y\\z': 1}), [audit_alert('x"y\\z', 1)]),
        ],
    )
    assert failure is None, failure


def test_the_drill_rule_fires_on_a_first_sample_above_zero_only(promtool: str) -> None:
    samples = parse(
        "# TYPE kafka_backup_drill_skipped_records gauge\n"
        'kafka_backup_drill_skipped_records{backup_id="a"} 7\n'
        'kafka_backup_drill_skipped_records{backup_id="b"} 0\n'
    )
    summary = "The drill of a found 7 record(s) groups would skip after a restore"
    failure = alert_test(
        "KafkaBackupDrillSkipsRecords",
        [
            AlertCase(
                "skips", samples, [Alert({"backup_id": "a", "severity": "critical"}, {"summary": summary})]
            )
        ],
    )
    assert failure is None, failure


def test_a_wrong_expectation_is_answered_with_promtools_own_failure(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(OWN_RULES)
    samples = parse('# TYPE kafka_backup_x gauge\nkafka_backup_x{backup_id="a"} 3\n')
    fires = Alert({"backup_id": "a", "severity": "info"}, {"summary": "a at 3"})
    assert alert_test("Positive", [AlertCase("fires", samples, [fires])], rules) is None
    failure = alert_test(
        "Positive",
        [
            AlertCase("expects nothing", samples),
            AlertCase(
                "expects other labels",
                samples,
                [Alert({"backup_id": "b", "severity": "info"}, {"summary": "a at 3"})],
            ),
            AlertCase("as expected", samples, [fires]),
        ],
        rules,
    )
    assert failure is not None
    assert "FAILED" in failure
    assert "name: expects nothing" in failure
    assert "name: expects other labels" in failure
    assert "name: as expected," not in failure
    # What it got: the alert of backup a, which neither of the first two cases expected.
    assert 'Labels:{alertname="Positive", backup_id="a", severity="info"}' in failure.split("got:[")[1]


def test_an_alert_the_rules_do_not_have_is_refused() -> None:
    with pytest.raises(AssertionError, match="has no alert KafkaBackupNoSuchAlert"):
        alert_test("KafkaBackupNoSuchAlert", [AlertCase("quiet", {})])
