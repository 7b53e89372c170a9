"""The helper that judges the monitoring examples against real runs (tests/support/metrics_text.py),
tested itself: a metric counts as exported only with a sample. The alert rules themselves are
evaluated by promtool (tests/unit/test_promtool_rules.py)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest

from tests.support.metrics_text import sampled_names


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
