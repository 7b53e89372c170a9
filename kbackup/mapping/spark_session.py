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
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kbackup.core.cache import cache_root
from kbackup.core.errors import PreconditionError
from kbackup.core.logs import get_logger

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = get_logger("mapping.spark")


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
        # The driver's working folder is the cache's (below): a relative jar means the current folder.
        conf["spark.jars"] = ",".join(_absolute_local_path(jar) for jar in jars)
    else:
        conf["spark.jars.packages"] = spark_kafka_package()
        conf["spark.jars.ivySettings"] = ivy_settings_file()
        conf["spark.jars.ivy"] = str(cache_root() / "ivy")
        # Spark ships these already; fetching them again only slows the first start.
        conf["spark.jars.excludes"] = ",".join(SPARK_PROVIDED_ARTIFACTS)
    user = dict(extra_conf or {})
    conf.update(user)
    # Spark 4.0 creates its artifact folder as the relative path 'artifacts' (ArtifactManager, fixed
    # upstream by SPARK-52396), which left an empty artifacts/ in the folder a command ran in. The
    # driver's user.dir, which the JVM resolves relative paths against, moves it to the cache.
    java_options = user.get(DRIVER_JAVA_OPTIONS, "")
    if "-Duser.dir=" not in java_options:
        conf[DRIVER_JAVA_OPTIONS] = f"{java_options} -Duser.dir={spark_work_dir()}".strip()
    return conf


DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def spark_work_dir() -> Path:
    """The Spark driver's working folder (``user.dir``): where Spark's relative scratch folders go."""
    folder = cache_root() / "spark-driver"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _absolute_local_path(path: str) -> str:
    """``path`` made absolute against the current folder, unless it is a URL (hdfs://, https://)."""
    if "://" in path or path.startswith("file:"):
        return path
    return str(Path(path).expanduser().absolute())


def spark_log_file() -> Path:
    """A new file for one Spark JVM's own output, in the cache folder (kept for the operator)."""
    folder = cache_root() / "spark-logs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"spark-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"


@contextlib.contextmanager
def jvm_output_to(log_path: Path) -> Iterator[None]:
    """Start the JVM with its standard output and error in ``log_path``.

    Spark's JVM inherits file descriptors 1 and 2 and prints Ivy's resolution
    report, banners and its own warnings there for as long as it runs: pages an
    operator does not need beside kafka-backup's lines (and commands run with
    --json promise nothing but JSON on stdout). Our own descriptors are put back
    once the JVM has started.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, log_fd):
            os.close(fd)


def _log_tail(log_path: Path, lines: int = 8) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(line for line in text.splitlines()[-lines:] if line.strip())


def started_by_spark_submit() -> bool:
    """Whether this Python process is a driver that ``spark-submit`` started: PySpark then connects
    to that JVM through the gateway port it was handed, instead of launching its own."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_spark_session(
    master: str = "local[2]",
    *,
    app_name: str = "kafka-backup-mapping",
    jars: Sequence[str] = (),
    extra_conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """A SparkSession with the Kafka source; reuses the running one if there is one.

    Inside ``spark-submit`` (the driver's JVM is already up), that JVM's settings stand: its
    master, packages and resources are what the operator submitted with.
    """
    from pyspark.sql import SparkSession

    if started_by_spark_submit():
        log.info("running inside spark-submit: its master and packages apply")
        return SparkSession.builder.appName(app_name).getOrCreate()
    # Executors must run the same interpreter (and so the same installed packages) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for key, value in spark_conf(master, jars=jars, extra_conf=extra_conf).items():
        builder = builder.config(key, value)
    log_path = spark_log_file()
    log.info("starting Spark (%s); its own output goes to %s", master, log_path)
    try:
        with jvm_output_to(log_path):
            session = builder.getOrCreate()
    except Exception as exc:
        tail = _log_tail(log_path)
        raise PreconditionError(
            f"Spark did not start ({type(exc).__name__}: {str(exc).strip()[:200]})"
            + (f"; the end of its output:\n{tail}" if tail else ""),
            hint=f"Spark's whole output is in {log_path}. Java 17+ must be on PATH; offline, set "
            "mapping.spark_jars to local jars of the Kafka source",
        ) from None
    session.sparkContext.setLogLevel("WARN")
    return session
