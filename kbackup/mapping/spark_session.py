"""Building the SparkSession the mapping job runs in, with Spark's Kafka source on the classpath.

Local mode (``local[2]``) by default; any master URL (``spark://``, ``yarn``,
``k8s://``) when the topics outgrow one machine. The Kafka source package is
resolved by Spark's Ivy from ``~/.m2`` and Maven Central into kafka-backup's
cache folder; offline, ``jars`` takes local jar files instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from kbackup.core.cache import cache_root
from kbackup.core.spark import absolute_local_path, start_spark_session
from kbackup.core.spark import spark_conf as core_spark_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def spark_kafka_package() -> str:
    """The Kafka source's Maven coordinate for the installed PySpark (versions must match exactly)."""
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


#: Where Spark's Ivy fetches the Kafka source from; override for an in-house mirror.
MAVEN_REPOSITORY = os.environ.get("KBACKUP_MAVEN_REPOSITORY", "https://repo1.maven.org/maven2/")

SPARK_PROVIDED_ARTIFACTS = (
    "org.apache.hadoop:hadoop-client-runtime",
    "org.apache.hadoop:hadoop-client-api",
    "org.slf4j:slf4j-api",
    "com.google.code.findbugs:jsr305",
)

_IVY_SETTINGS = """<ivysettings>
  <settings defaultResolver="maven-central"/>
  <caches defaultCacheDir="{cache}"/>
  <resolvers>
    <ibiblio name="maven-central" m2compatible="true" root="{repository}"/>
  </resolvers>
</ivysettings>
"""


def ivy_settings_file() -> str:
    """An Ivy settings file that resolves from Maven Central only, into kafka-backup's cache.

    Spark's default chain looks in ~/.m2 first, and a pom there without its jar
    (Maven leaves those behind) makes the whole resolution fail.
    """
    root = cache_root() / "ivy"
    root.mkdir(parents=True, exist_ok=True)
    path = root / "ivysettings.xml"
    text = _IVY_SETTINGS.format(cache=root / "cache", repository=MAVEN_REPOSITORY)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return str(path)


def spark_conf(
    master: str = "local[2]",
    *,
    jars: Sequence[str] = (),
    extra_conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The mapping's Spark settings: kafka-backup's own (kbackup.core.spark), the Kafka source's
    jars or package, then the user's ``extra_conf`` over them."""
    source: dict[str, str] = {}
    if jars:
        # The driver's working folder is the cache's: a relative jar means the current folder.
        source["spark.jars"] = ",".join(absolute_local_path(jar) for jar in jars)
    else:
        source["spark.jars.packages"] = spark_kafka_package()
        source["spark.jars.ivySettings"] = ivy_settings_file()
        source["spark.jars.ivy"] = str(cache_root() / "ivy")
        # Spark ships these already; fetching them again only slows the first start.
        source["spark.jars.excludes"] = ",".join(SPARK_PROVIDED_ARTIFACTS)
    return core_spark_conf(master, extra_conf={**source, **(extra_conf or {})})


def build_spark_session(
    master: str = "local[2]",
    *,
    app_name: str = "kafka-backup-mapping",
    jars: Sequence[str] = (),
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka source; reuses the running one if there is one."""
    return start_spark_session(
        app_name,
        spark_conf(master, jars=jars, extra_conf=extra_conf),
        offline_hint="offline, set mapping.spark_jars to local jars of the Kafka source",
    )
