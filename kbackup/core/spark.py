"""Starting Spark for kafka-backup: the settings every Spark job of ours gets, and the driver's JVM.

The mapping stage (its Kafka source package on top, kbackup.mapping.spark_session) and the Spark
engine of backup and restore (kbackup.backup.spark_engine, kbackup.restore.spark_engine) start
their session here. Local mode (``local[2]``) by default; any master URL (``spark://``, ``yarn``,
``k8s://``) when the data outgrows one machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from kbackup.core.cache import cache_root
from kbackup.core.errors import InterruptedByUser, KBackupError, PreconditionError, SparkJobError
from kbackup.core.logs import get_logger
from kbackup.core.progress import Progress

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

T = TypeVar("T")
R = TypeVar("R")

log = get_logger("spark")

DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: Task attempts before Spark gives a job up; local masters get it too (see engine_master).
TASK_ATTEMPTS = 4
_LOCAL_WITHOUT_RETRIES = re.compile(r"^local(\[(\d+|\*)\])?$")


def engine_master(master: str) -> str:
    """``master`` for the backup and restore engine: a local master retries a failed task too.

    Spark runs a task once in local mode (``local[N]`` means N threads and one attempt) and up to
    ``spark.task.maxFailures`` times on a cluster; ``local[N,F]`` is local mode with F attempts.
    A backup or restore task whose Python worker dies is safe to run again (docs/scaling.md), so
    the local engine retries as a cluster would.
    """
    found = _LOCAL_WITHOUT_RETRIES.match(master)
    if found is None:
        return master
    threads = found.group(2) or "1"
    return f"local[{threads},{TASK_ATTEMPTS}]"


def spark_conf(master: str = "local[2]", *, extra_conf: Mapping[str, str] | None = None) -> dict[str, str]:
    """The settings kafka-backup gives Spark, with ``extra_conf`` (the user's) over them."""
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
    user = dict(extra_conf or {})
    conf.update(user)
    # Spark 4.0 creates its artifact folder as the relative path 'artifacts' (ArtifactManager, fixed
    # upstream by SPARK-52396), which left an empty artifacts/ in the folder a command ran in. The
    # driver's user.dir, which the JVM resolves relative paths against, moves it to the cache.
    java_options = user.get(DRIVER_JAVA_OPTIONS, "")
    if "-Duser.dir=" not in java_options:
        conf[DRIVER_JAVA_OPTIONS] = f"{java_options} -Duser.dir={spark_work_dir()}".strip()
    return conf


def spark_work_dir() -> Path:
    """The Spark driver's working folder (``user.dir``): where Spark's relative scratch folders go."""
    folder = cache_root() / "spark-driver"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def absolute_local_path(path: str) -> str:
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


def start_spark_session(app_name: str, conf: Mapping[str, str], *, offline_hint: str) -> SparkSession:
    """A SparkSession with ``conf`` (see :func:`spark_conf`); reuses the running one if there is one.

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
    for key, value in conf.items():
        builder = builder.config(key, value)
    log_path = spark_log_file()
    log.info("starting Spark (%s); its own output goes to %s", conf.get("spark.master"), log_path)
    try:
        with jvm_output_to(log_path):
            session = builder.getOrCreate()
    except Exception as exc:
        tail = _log_tail(log_path)
        raise PreconditionError(
            f"Spark did not start ({type(exc).__name__}: {str(exc).strip()[:200]})"
            + (f"; the end of its output:\n{tail}" if tail else ""),
            hint=f"Spark's whole output is in {log_path}. Java 17+ must be on PATH; {offline_hint}",
        ) from None
    session.sparkContext.setLogLevel("WARN")
    return session


@dataclass(frozen=True)
class SparkEngine:
    """Where the Spark engine of backup and restore runs (``engine: spark``; docs/scaling.md)."""

    #: The master URL (``local[N]``, ``spark://host:7077``, ``yarn``, ``k8s://...``).
    master: str = "local[2]"
    #: All the settings a session starts with; None: kafka-backup's own for ``master``. The
    #: application layer gives the mapping's (its Kafka source included): a three-phase restore
    #: or a drill runs its mapping in the session the engine started.
    conf: Mapping[str, str] | None = None

    def session(self, app_name: str) -> SparkSession:
        """The running session, or a new one on ``master`` with task retries (see engine_master)."""
        conf = self.conf if self.conf is not None else spark_conf(engine_master(self.master))
        return start_spark_session(
            app_name, conf, offline_hint="check the master URL (mapping.spark_master or --spark-master)"
        )


def run_spark_tasks(
    session: SparkSession,
    work: Sequence[T],
    task: Callable[[T], R],
    *,
    description: str,
    progress: Progress | None,
    stop: threading.Event | None = None,
) -> list[R]:
    """``task`` over each item of ``work`` on Spark's executors, one Spark task per item; the
    results in ``work``'s order.

    ``task`` must be a module-level function of kbackup (executors import it by name) and
    ``work`` what it needs; both travel pickled inside the task, never in Spark's settings,
    so no secret they carry shows in Spark's UI, event log or task descriptions. A task
    attempt that dies (its Python worker killed, its executor lost) is run again by Spark.
    ``stop`` set (SIGINT/SIGTERM) cancels the job: InterruptedByUser.
    """
    from kbackup.core.spark_progress import SparkTaskProgress

    if not work:
        return []
    context = session.sparkContext
    # The description names the job in Spark's UI and event log: the command, never a setting.
    context.setJobDescription(description)
    # One slice per item; collect() returns the slices' results in order.
    rdd = context.parallelize(list(work), len(work))
    finished = threading.Event()

    def cancel_on_stop() -> None:
        while stop is not None and not finished.wait(0.5):
            if stop.is_set():
                context.cancelAllJobs()
                return

    watcher = threading.Thread(target=cancel_on_stop, name="kafka-backup-spark-stop", daemon=True)
    watcher.start()
    try:
        with SparkTaskProgress(session, progress, description):
            results: list[R] = rdd.map(task).collect()
    except Exception:
        if stop is not None and stop.is_set():
            raise InterruptedByUser(
                f"{description} stopped by a signal: Spark cancelled its tasks",
                hint="run the same command again: it continues from what was committed",
            ) from None
        raise
    finally:
        finished.set()
        context.setJobDescription(None)  # type: ignore[arg-type]
    return results


#: A Java exception's class before its message ("org.apache.spark.SparkException: "): not a reason.
_JAVA_CLASS = re.compile(r"\b(?:[a-z_][\w$]*\.)+[A-Z][\w$]*: ")
#: The last line of a Python traceback that PySpark relays ("ValueError: boom").
_PYTHON_ERROR = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::.*)?$")
_TRACEBACK = "Traceback (most recent call last):"
#: PySpark's advice after "Python worker exited unexpectedly (crashed).", longer than the reason.
_PYSPARK_ADVICE = " Consider setting"


def spark_failure_line(failure: BaseException) -> str:
    """The one line that says why a Spark job failed (its Java and Python traces are pages long).

    Py4J's text of a failed job is "An error occurred while calling ...", then Spark's exception
    (for a job it gave up on: "Job aborted due to stage failure: Task 0 in stage 3.0 failed 4
    times, most recent failure: ..."), its stack frames, and its causes, each narrower than the one
    before (down to an EOF on the socket of a Python worker that died). The first exception says
    why; when a Python exception ended the task, its traceback's last line says which.
    """
    lines = [line.strip() for line in str(failure).splitlines() if line.strip()]
    reasons = [
        index
        for index, line in enumerate(lines)
        if not line.startswith(("at ", "..."))  # stack frames
        and ("Error" in line or "Exception" in line or "aborted" in line)
    ]
    if not reasons:
        return (lines[-1] if lines else type(failure).__name__)[:300]
    chosen = lines[reasons[0]]
    if chosen.endswith(_TRACEBACK):
        python_error = next((line for line in lines[reasons[0] + 1 :] if _PYTHON_ERROR.match(line)), "")
        chosen = chosen.removesuffix(_TRACEBACK) + python_error
    chosen = _JAVA_CLASS.sub("", chosen.split(_PYSPARK_ADVICE)[0]).lstrip(": ")
    return chosen[:300]


@dataclass(frozen=True)
class TaskFailure:
    """A kafka-backup error a Spark task met, sent back as its result: an answer, not a crash, so
    Spark does not run the task again (the error was retried where that helps, or is final), and
    the driver raises the same error class (so the command's exit code is the local engine's)."""

    kind: str
    message: str
    hint: str | None
    retryable: bool

    @classmethod
    def of(cls, error: KBackupError) -> TaskFailure:
        return cls(type(error).__name__, error.message, error.hint, error.retryable)

    def error(self) -> KBackupError:
        from kbackup.core import errors

        kind = getattr(errors, self.kind, None)
        if not (isinstance(kind, type) and issubclass(kind, KBackupError)):
            kind = KBackupError
        return kind(self.message, hint=self.hint, retryable=self.retryable)


def job_failed(failure: BaseException, *, what: str, hint: str) -> KBackupError:
    """A job Spark gave up on (a task failed on every attempt, the master went away) as one line."""
    if isinstance(failure, KBackupError):
        return failure
    return SparkJobError(f"the Spark job of {what} failed: {spark_failure_line(failure)}", hint=hint)
