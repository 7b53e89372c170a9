"""The ``mapping`` section of a config file."""

from __future__ import annotations

from pydantic import Field

from kbackup.core.config import StrictModel


class MappingSettings(StrictModel):
    """Where the Spark job that builds the offset mapping runs."""

    spark_master: str = "local[2]"
    #: Local jar files to use instead of resolving Spark's Kafka source from Maven (offline clusters).
    spark_jars: list[str] = Field(default_factory=list)
    #: Extra Spark settings, e.g. ``{"spark.executor.memory": "4g"}``.
    spark_conf: dict[str, str] = Field(default_factory=dict)
