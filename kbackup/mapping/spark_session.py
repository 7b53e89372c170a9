"""Building the SparkSession the mapping job runs in, with Spark's Kafka source on the classpath.

Local mode (``local[2]``) by default; any master URL (``spark://``, ``yarn``,
``k8s://``) when the topics outgrow one machine. The Kafka source package is
resolved by Spark's Ivy from ``~/.m2`` and Maven Central into kafka-backup's
cache folder; offline, ``jars`` takes local jar files instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from kbackup.sandbox.jars import cache_root

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
    """The settings kafka-backup gives Spark, before any user overrides in ``extra_conf``."""
    conf = {
        "spark.master": master,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # Few, small tasks: the mapping collects only ranges, never records.
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "4",
    }
    if master.startswith("local"):
        conf.update(
            {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.memory": "2g",
            }
        )
    if jars:
        conf["spark.jars"] = ",".join(jars)
    else:
        conf["spark.jars.packages"] = spark_kafka_package()
        conf["spark.jars.ivySettings"] = ivy_settings_file()
        conf["spark.jars.ivy"] = str(cache_root() / "ivy")
        # Spark ships these already; fetching them again only slows the first start.
        conf["spark.jars.excludes"] = ",".join(SPARK_PROVIDED_ARTIFACTS)
    conf.update(extra_conf or {})
    return conf


@contextlib.contextmanager
def jvm_stdout_to_stderr() -> Iterator[None]:
    """Start the JVM with its standard output on our stderr.

    Spark's JVM inherits file descriptor 1 and prints Ivy's resolution report
    and banners there; commands run with --json promise nothing but JSON on stdout.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def build_spark_session(
    master: str = "local[2]",
    *,
    app_name: str = "kafka-backup-mapping",
    jars: Sequence[str] = (),
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka source; reuses the running one if there is one."""
    # Executors must run the same interpreter (and so the same installed packages) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(master, jars=jars, extra_conf=extra_conf).items():
        builder = builder.config(key, value)
    with jvm_stdout_to_stderr():
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
