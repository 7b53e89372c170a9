"""A restore whose target does not acknowledge says so while it waits, and why when the target can
tell: partitions with fewer in-sync replicas than min.insync.replicas refuse every acks=all write
(NOT_ENOUGH_REPLICAS), which the producer retries without a word (TargetWriter)."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from kbackup.core.errors import KafkaOperationError
from kbackup.core.kafka.admin import ConfigValue, PartitionReplicas
from kbackup.restore import writer as writer_module
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.writer import TargetWriter, _short_of_replicas


class ShortAdmin:
    """Stands in for the Admin: topic t has min.insync.replicas 3 and partition 1 two in sync."""

    def topic_configs(self, names: list[str]) -> dict[str, dict[str, ConfigValue]]:
        return {
            name: {"min.insync.replicas": ConfigValue("3", set_on_topic=True, sensitive=False)}
            for name in names
        }

    def partition_replicas(self, topic: str) -> dict[int, PartitionReplicas]:
        return {
            0: PartitionReplicas(leader=1, replicas=(1, 2, 3), in_sync=(1, 2, 3)),
            1: PartitionReplicas(leader=1, replicas=(1, 2, 3), in_sync=(1, 3)),
        }


class UnacknowledgingProducer:
    def flush(self, _timeout: float) -> int:
        return 7


def test_partitions_short_of_min_insync_replicas_are_named() -> None:
    admin: Any = ShortAdmin()
    assert _short_of_replicas(admin, ["t"]) == [
        "t/1 has in-sync replicas [1, 3], fewer than its min.insync.replicas 3"
    ]
    assert _short_of_replicas(admin, []) == []


def test_a_flush_the_target_does_not_acknowledge_is_reported_while_waiting_then_stops_retryably(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(writer_module, "STALL_REPORT_SECS", 0.01)
    monkeypatch.setattr(writer_module, "Admin", lambda _clients, **_kw: ShortAdmin())
    plan: Any = SimpleNamespace(mode="idempotent", target="the target", restore_id="r", backup_id="b")
    writer = TargetWriter(plan, clients=None, settings=RestoreSettings(timeout_secs=0.05), warnings=[])  # type: ignore[arg-type]
    writer.producer = UnacknowledgingProducer()  # type: ignore[assignment]
    writer._written["t"] = {0, 1}
    with (
        caplog.at_level(logging.WARNING, logger="kbackup.restore"),
        pytest.raises(KafkaOperationError) as raised,
    ):
        writer._flush_all()
    said = [record.getMessage() for record in caplog.records]
    assert said, "the wait said nothing"
    assert "7 record(s) not acknowledged yet (NOT_ENOUGH_REPLICAS: t/1 has in-sync replicas [1, 3]" in said[0]
    assert "restore.timeout_secs" in said[0]
    assert "NOT_ENOUGH_REPLICAS: t/1" in raised.value.message
    assert raised.value.retryable
