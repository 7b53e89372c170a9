"""Spark's JVM output goes to a log file, not between kafka-backup's own lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbackup.core.spark import jvm_output_to, spark_log_file


def test_a_process_started_inside_writes_to_the_log_and_ours_comes_back(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log_path = tmp_path / "spark.log"
    print("before", flush=True)
    with jvm_output_to(log_path):
        # Like the JVM: a child that keeps the inherited descriptors and writes on both.
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time; print('ivy report'); "
                "sys.stdout.flush(); time.sleep(0.3); print('WARN later', file=sys.stderr)",
            ]
        )
    print("after", flush=True)
    print("our error line", file=sys.stderr, flush=True)
    assert child.wait(10) == 0
    captured = capfd.readouterr()
    assert captured.out == "before\nafter\n"
    assert captured.err == "our error line\n"
    # Written after our descriptors were restored, still into the log: the JVM keeps it all run long.
    assert log_path.read_text().splitlines() == ["ivy report", "WARN later"]


def test_each_spark_start_gets_its_own_log_in_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KBACKUP_CACHE_DIR", str(tmp_path))
    path = spark_log_file()
    assert path.parent == tmp_path / "spark-logs"
    assert path.parent.is_dir()
    assert path.name.startswith("spark-")
    assert path.suffix == ".log"
