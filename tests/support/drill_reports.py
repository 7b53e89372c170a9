"""A drill report with everything a real one holds, long names included, for the report's tests."""

from __future__ import annotations

from kbackup.app.drill_report import ClusterInfo, DrillReport

LONG_GROUP = "drill.payments-settlement-reconciliation-eu-west-1-consumer-group"


def sample_report(*, skipped: int = 0) -> DrillReport:
    report = DrillReport(
        started_at="2026-11-24T03:00:00.000Z",
        finished_at="2026-11-24T03:01:02.500Z",
        backup_id="nightly-2026-11-24",
        source_cluster="prod-us-east-1",
        storage="s3://backups/kafka",
        topic_copies={"orders": "drill.orders", "payments": "drill.payments"},
        source=ClusterInfo("prod-us-east-1", "SRC-kafka-id-4f2a", "kafka-1:9093 (SASL_SSL)"),
        target=ClusterInfo(None, "TGT-kafka-id-9c1b", "dr-kafka-1:9093 (SASL_SSL)"),
        phase_seconds={"backup": 4.2, "restore": 6.75, "mapping": 21.0, "reset": 0.8, "verify": 0.2},
        backup={"records": 123_456, "topics": ["orders", "payments"], "storage": "s3://backups/kafka"},
        three_phase={
            "phases": {
                "restore": {
                    "records_per_topic": {"drill.orders": 100_000, "drill.payments": 23_456},
                    "compaction": [
                        {
                            "topic": "drill.payments",
                            "records": 23_456,
                            "may_remove": 17_000,
                            "why": "cleanup.policy compact copied from the source",
                        }
                    ],
                }
            }
        },
        groups={
            "drill.billing": {"skipped": skipped, "reprocessed": 0, "partitions": 3},
            LONG_GROUP: {"skipped": 0, "reprocessed": 1_234_567, "partitions": 12},
        },
        partitions=[{"group_id": "drill.billing"}] * 15,
        skipped=skipped,
    )
    return report
