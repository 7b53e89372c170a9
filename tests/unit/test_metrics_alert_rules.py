"""The helpers that judge the monitoring examples against real runs (tests/support/metrics_text.py),
tested themselves: a metric counts as exported only with a sample, and the small evaluator of alert
expressions answers as Prometheus would for the forms it knows and refuses every other form.

The expected answers of the evaluator's cases are Prometheus' own: they were checked once with
``promtool test rules`` (Prometheus 2.42, Debian's ``prometheus`` package) on the same series.
"""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from tests.support.metrics_text import (
    Samples,
    UnsupportedExpression,
    alert_rules,
    evaluate,
    example_metric_names,
    parse,
    sampled_names,
)

B1 = (("backup_id", "nightly"),)
B2 = (("backup_id", "hourly"),)


def exposition(declare_only: bool) -> str:
    """A real exposition: metrics declared (HELP and TYPE), set unless ``declare_only``."""
    registry = CollectorRegistry()
    errors = Counter("kafka_backup_storage_errors", "h", ["backup_id", "kind"], registry=registry)
    audit = Gauge("kafka_backup_audit_disagreements", "h", ["backup_id"], registry=registry)
    commit = Histogram(
        "kafka_backup_increment_commit_duration_seconds", "h", ["backup_id"], registry=registry
    )
    info = Info("kafka_backup", "h", ["backup_id"], registry=registry)
    if not declare_only:
        errors.labels("nightly", "transient").inc()
        audit.labels("nightly").set(2)
        commit.labels("nightly").observe(0.3)
        info.labels("nightly").info({"mode": "snapshot"})
    return generate_latest(registry).decode()


def test_a_metric_declared_without_a_sample_is_not_exported() -> None:
    text = exposition(declare_only=True)
    assert "# TYPE kafka_backup_audit_disagreements gauge" in text  # declared ...
    assert sampled_names(text) == set()  # ... but Prometheus would have no series of it


def test_every_sampled_series_names_its_metric() -> None:
    names = sampled_names(exposition(declare_only=False))
    assert {
        "kafka_backup_storage_errors",
        "kafka_backup_storage_errors_total",
        "kafka_backup_audit_disagreements",
        "kafka_backup_increment_commit_duration_seconds",
        "kafka_backup_increment_commit_duration_seconds_bucket",
        "kafka_backup_increment_commit_duration_seconds_count",
        "kafka_backup_info",
    } <= names


SAMPLES: Samples = {
    ("kafka_backup_audit_disagreements", B1): 2,
    ("kafka_backup_audit_disagreements", B2): 0,
    ("kafka_backup_lag_seconds", (*B1, ("partition", "0"), ("topic", "t"))): 1000,
    ("kafka_backup_lag_seconds", (*B1, ("partition", "1"), ("topic", "t"))): 10,
    ("kafka_backup_lag_seconds", (*B2, ("partition", "0"), ("topic", "t"))): 800,
    ("kafka_backup_last_increment_timestamp_seconds", B1): 10_000,
    ("kafka_backup_last_increment_timestamp_seconds", B2): 13_000,
    ("kafka_backup_source_reachable", B1): 0,
    ("kafka_backup_source_reachable", B2): 1,
}


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("kafka_backup_audit_disagreements > 0", {B1: 2}),
        ("kafka_backup_audit_disagreements >= 0", {B1: 2, B2: 0}),
        ("kafka_backup_audit_disagreements == 0", {B2: 0}),
        ("kafka_backup_audit_disagreements != 0", {B1: 2}),
        ("kafka_backup_audit_disagreements < 2", {B2: 0}),
        ("kafka_backup_audit_disagreements <= 2", {B1: 2, B2: 0}),
        ("kafka_backup_audit_disagreements > 2", {}),
        ("kafka_backup_drill_skipped_records > 0", {}),  # no series: nothing fires
        ('kafka_backup_audit_disagreements{backup_id="hourly"}', {B2: 0}),
        ('kafka_backup_audit_disagreements{backup_id!="hourly"}', {B1: 2}),
        # Regular expressions are anchored at both ends.
        ('kafka_backup_audit_disagreements{backup_id=~"night"}', {}),
        ('kafka_backup_audit_disagreements{backup_id=~"night.*"}', {B1: 2}),
        ('kafka_backup_audit_disagreements{backup_id!~"night.*|x"}', {B2: 0}),
        # A label the series lacks matches the empty string.
        ('kafka_backup_audit_disagreements{topic=""}', {B1: 2, B2: 0}),
        ("max by (backup_id) (kafka_backup_lag_seconds) > 900", {B1: 1000}),
        ("sum by (backup_id) (kafka_backup_lag_seconds)", {B1: 1010, B2: 800}),
        (
            "min by (backup_id, topic) (kafka_backup_lag_seconds)",
            {(*B1, ("topic", "t")): 10, (*B2, ("topic", "t")): 800},
        ),
        ("time() - kafka_backup_last_increment_timestamp_seconds > 3600", {B1: 5000}),
        ("kafka_backup_source_reachable == 0", {B1: 0}),
    ],
)
def test_the_evaluator_answers_as_prometheus_does(
    expression: str, expected: dict[tuple[tuple[str, str], ...], float]
) -> None:
    assert evaluate(expression, SAMPLES, now=15_000) == expected


@pytest.mark.parametrize(
    "expression",
    [
        "sum by (backup_id) (increase(kafka_backup_storage_errors_total[10m])) > 0",
        "kafka_backup_lag_records[15m]",
        "deriv(kafka_backup_lag_records[15m]) > 0",
        "kafka_backup_audit_disagreements > bool 0",
        "kafka_backup_audit_disagreements > 0 and kafka_backup_lag_records > 1",
        "kafka_backup_restore_landed_records / kafka_backup_restore_planned_records",
        "histogram_quantile(0.9, rate(kafka_backup_increment_commit_duration_seconds_bucket[30m]))",
        "count by (backup_id) (kafka_backup_lag_records)",
        'kafka_backup_audit_disagreements{backup_id=~"a,b"}',
        "time() - time() - kafka_backup_last_increment_timestamp_seconds",
    ],
)
def test_the_evaluator_refuses_what_it_does_not_know(expression: str) -> None:
    with pytest.raises(UnsupportedExpression):
        evaluate(expression, SAMPLES, now=15_000)


#: The example rules that need no samples over time: the evaluator judges them on one exposition.
INSTANT_RULES = {
    "KafkaBackupStale",
    "KafkaBackupRecoveryPointOld",
    "KafkaBackupSourceUnreachable",
    "KafkaBackupRestoreAuditDisagrees",
    "KafkaBackupDrillSkipsRecords",
    "KafkaBackupRestoreTargetUnreachable",
}


def test_each_example_rule_is_evaluated_or_refused_never_guessed() -> None:
    rules = alert_rules()
    assert set(rules) >= INSTANT_RULES
    for name, rule in rules.items():
        if name in INSTANT_RULES:
            evaluate(rule["expr"], SAMPLES, now=15_000)
        else:
            with pytest.raises(UnsupportedExpression):
                evaluate(rule["expr"], SAMPLES, now=15_000)


def test_the_audit_and_drill_rules_fire_on_a_first_sample_above_zero_only() -> None:
    """No ``for:``: a run's textfile is written once; a rule that waited would never fire on it."""
    rules = alert_rules()
    for name, metric in (
        ("KafkaBackupRestoreAuditDisagrees", "kafka_backup_audit_disagreements"),
        ("KafkaBackupDrillSkipsRecords", "kafka_backup_drill_skipped_records"),
    ):
        rule = rules[name]
        assert "for" not in rule, name
        assert metric in example_metric_names()["prometheus-alerts.yaml"]
        found = parse(f'# TYPE {metric} gauge\n{metric}{{backup_id="a"}} 3\n{metric}{{backup_id="b"}} 0\n')
        assert evaluate(rule["expr"], found) == {(("backup_id", "a"),): 3}, name
        assert evaluate(rule["expr"], {}) == {}, name
