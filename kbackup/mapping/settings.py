"""The ``mapping`` section of a config file."""

from __future__ import annotations

from pydantic import Field

from kbackup.core.config import StrictModel


class MappingSettings(StrictModel):
    """Where and how the Spark job that builds the offset mapping runs."""

    spark_master: str = "local[2]"
    #: Local jar files to use instead of resolving Spark's Kafka source from Maven (offline clusters).
    spark_jars: list[str] = Field(default_factory=list)
    #: Extra Spark settings, e.g. ``{"spark.executor.memory": "4g"}``.
    spark_conf: dict[str, str] = Field(default_factory=dict)
    #: Java Kafka client properties for Spark's Kafka source (``kafka.`` prefix optional), for what
    #: the connection's librdkafka settings cannot say, e.g. ``ssl.truststore.location`` or a
    #: ``sasl.jaas.config`` for OAUTHBEARER / GSSAPI.
    kafka_options: dict[str, str] = Field(default_factory=dict)
    #: Ask Spark for at least this many tasks: large Kafka partitions are split into offset
    #: ranges read in parallel (Spark's ``minPartitions``). Default: one task per partition.
    min_partitions: int | None = Field(default=None, ge=1)
    #: Split a Kafka partition into tasks of at most this many offsets (``maxRecordsPerPartition``).
    max_records_per_partition: int | None = Field(default=None, ge=1)
