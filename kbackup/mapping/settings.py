"""The ``mapping`` section of a config file."""

from __future__ import annotations

from pydantic import Field

from kbackup.core.config import StrictModel


class MappingSettings(StrictModel):
    """Where and how the Spark job that builds the offset mapping runs."""

    spark_master: str = Field(
        default="local[2]",
        description=(
            "Spark master URL: `local[N]`, `spark://host:7077`, "
            "`yarn`, `k8s://...`; `--spark-master` overrides it."
        ),
    )
    spark_jars: list[str] = Field(
        default_factory=list,
        description=(
            "Local jar files to use instead of resolving Spark's Kafka source from Maven (offline clusters)."
        ),
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict, description='Extra Spark settings, e.g. `{"spark.executor.memory": "4g"}`.'
    )
    kafka_options: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Java Kafka client properties for Spark's Kafka source (`kafka.` prefix optional), for what "
            "the connection's librdkafka settings cannot say, e.g. `ssl.truststore.location` or a "
            "`sasl.jaas.config` for OAUTHBEARER / GSSAPI."
        ),
    )
    min_partitions: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Ask Spark for at least this many tasks: large Kafka partitions are split into offset ranges "
            "read in parallel (Spark's `minPartitions`). Unset: one task per partition."
        ),
    )
    max_records_per_partition: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Split a Kafka partition into tasks of at most this many offsets (`maxRecordsPerPartition`)."
        ),
    )
