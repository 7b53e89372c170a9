"""confluent-kafka, wrapped in one place: the only package that imports it (ruff's banned-api rule).

- :mod:`~kbackup.core.kafka.clients`: client factories with the connection's settings, librdkafka's
  logs through our logging, and Kafka errors turned into project errors that keep Kafka's code;
- :mod:`~kbackup.core.kafka.admin`: every admin request (metadata, offsets, configs, topics,
  consumer groups, ACLs, SCRAM users, dynamic broker configs), returning plain values;
- :mod:`~kbackup.core.kafka.reader`: the one loop that reads a partition from an offset to an end.

The client classes below are re-exported for the two hot paths that drive a client record by
record themselves (the backup's consume loop, the restore's produce loop) and for type hints.
"""

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from kbackup.core.kafka.admin import (
    AclEntry,
    Admin,
    ClusterMetadata,
    CommittedOffset,
    ConfigValue,
    DynamicBrokerConfigs,
    DynamicConfig,
    GroupDescription,
    PartitionRange,
    ScramCredential,
    TopicMetadata,
    TopicRefused,
    TopicSpec,
    describe_acl,
    kafka_state_name,
    open_admin,
    wait_until_answering,
)
from kbackup.core.kafka.clients import (
    KafkaClients,
    check_client_properties,
    kafka_error_of,
    translate_kafka_error,
)
from kbackup.core.kafka.reader import PartitionReader

__all__ = [
    "AclEntry",
    "Admin",
    "ClusterMetadata",
    "CommittedOffset",
    "ConfigValue",
    "Consumer",
    "DynamicBrokerConfigs",
    "DynamicConfig",
    "GroupDescription",
    "KafkaClients",
    "KafkaError",
    "KafkaException",
    "Message",
    "PartitionRange",
    "PartitionReader",
    "Producer",
    "ScramCredential",
    "TopicMetadata",
    "TopicPartition",
    "TopicRefused",
    "TopicSpec",
    "check_client_properties",
    "describe_acl",
    "kafka_error_of",
    "kafka_state_name",
    "open_admin",
    "translate_kafka_error",
    "wait_until_answering",
]
