"""The capture of a source's cluster metadata when some of its brokers do not answer.

A broker that died and is not yet fenced is still listed, and only it can describe its own
configs: its silence must not cost the ACLs and SCRAM users, which any broker answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from kbackup.backup.cluster_capture import capture_cluster_metadata
from kbackup.core.errors import KafkaUnreachableError
from kbackup.core.kafka import Admin
from kbackup.core.kafka.admin import ClusterMetadata, DynamicBrokerConfigs, DynamicConfig

SERVERS = "a:9092,b:9092,c:9092"


@dataclass
class SourceWithSilentBrokers:
    """Three listed brokers; those in ``silent`` time out when asked for their configs."""

    silent: set[int]
    asked: list[str] = field(default_factory=list)
    servers: str = SERVERS

    def metadata(self, *, action: str) -> ClusterMetadata:
        return ClusterMetadata(cluster_id="c", brokers=(1, 2, 3))

    def dynamic_broker_configs(self, broker_id: int) -> DynamicBrokerConfigs:
        self.asked.append(f"configs of {broker_id}")
        if broker_id in self.silent:
            raise KafkaUnreachableError(
                f"no broker of {SERVERS} answered within 15s while trying to describe the configs "
                f"of broker {broker_id}"
            )
        return DynamicBrokerConfigs(
            broker={"log.cleaner.threads": DynamicConfig(str(broker_id), False)},
            cluster_default={"message.max.bytes": DynamicConfig("2000000", False)},
            authorizer="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        )

    def cluster_operations(self) -> frozenset[str]:
        self.asked.append("operations")
        return frozenset({"DESCRIBE"})

    def describe_acls(self) -> list[Any]:
        self.asked.append("acls")
        return []

    def scram_users(self) -> dict[str, list[Any]]:
        self.asked.append("scram users")
        return {}


def capture(source: SourceWithSilentBrokers) -> Any:
    return capture_cluster_metadata(cast(Admin, source), backup_id="b", increment=0, run_id="r")


def test_one_silent_broker_costs_only_its_own_configs() -> None:
    metadata = capture(SourceWithSilentBrokers(silent={1}))
    assert (metadata.acls.status, metadata.scram_users.status) == ("captured", "captured")
    configs = metadata.broker_configs
    assert configs.status == "failed"
    assert configs.error == (
        f"broker(s) 1 of {SERVERS} did not answer: their dynamic configs are not in this increment "
        "(those of 2, 3 are); the next increment reads them again"
    )
    assert [(b.broker_id, b.configs[0].value) for b in configs.brokers] == [(2, "2"), (3, "3")]
    assert [c.name for c in configs.cluster_default] == ["message.max.bytes"]


def test_a_cluster_where_no_broker_answers_is_asked_nothing_more() -> None:
    source = SourceWithSilentBrokers(silent={1, 2, 3})
    metadata = capture(source)
    assert source.asked == ["configs of 1", "configs of 2", "configs of 3"]
    for section in (metadata.acls, metadata.scram_users, metadata.broker_configs):
        assert section.status == "failed"
        assert "answered within 15s" in (section.error or "")
