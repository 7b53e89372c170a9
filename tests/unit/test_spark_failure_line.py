"""The one line a failed Spark job is reported with: Spark's own reason, not a stack frame or a cause."""

from __future__ import annotations

from kbackup.core.spark import spark_failure_line

WORKER_KILLED = """An error occurred while calling o123.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 2.0 failed 4 times, \
most recent failure: Lost task 0.3 in stage 2.0 (TID 7) (127.0.0.1 executor driver): \
org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting \
'spark.sql.execution.pyspark.udf.faulthandler.enabled' for better Python tracebacks.
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.applyOrElse(PythonRunner.scala:612)
\tat org.apache.spark.util.SparkErrorUtils.tryWithSafeFinally$(SparkErrorUtils.scala:64)
Caused by: java.io.EOFException
\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:398)
"""

PYTHON_RAISED = """An error occurred while calling o77.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 times, \
most recent failure: Lost task 1.0 in stage 0.0 (TID 1) (127.0.0.1 executor driver): \
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/kbackup/core/spark.py", line 200, in run
    raise ValueError("boom from the task")
ValueError: boom from the task
\tat org.apache.spark.util.SparkErrorUtils.tryWithSafeFinally$(SparkErrorUtils.scala:64)
Caused by: org.apache.spark.api.python.PythonException: Traceback (most recent call last):
"""


def test_a_killed_worker_is_reported_by_sparks_reason_without_classes_or_advice() -> None:
    line = spark_failure_line(RuntimeError(WORKER_KILLED))
    assert line.startswith("Job aborted due to stage failure: Task 0 in stage 2.0 failed 4 times"), line
    assert line.endswith("Python worker exited unexpectedly (crashed)."), line
    for noise in ("org.apache", "Consider setting", "EOFException"):
        assert noise not in line


def test_a_python_exception_in_a_task_ends_the_line() -> None:
    line = spark_failure_line(RuntimeError(PYTHON_RAISED))
    assert line.startswith("Job aborted due to stage failure: Task 1 in stage 0.0 failed 1 times"), line
    assert line.endswith("ValueError: boom from the task"), line
    for noise in (" at ", "SparkErrorUtils"):
        assert noise not in line


def test_text_without_a_reason_gives_its_last_line_and_nothing_gives_the_type() -> None:
    assert spark_failure_line(RuntimeError("first\nlast words")) == "last words"
    assert spark_failure_line(RuntimeError("")) == "RuntimeError"
