"""The throwaway Spark standalone cluster (kbackup.sandbox.spark_cluster) the Spark engine's tests
run against (issue 23): a master and two one-core workers started from the pyspark installation
on loopback, and a job whose tasks run on both workers' executors.

The job's driver runs in its own process: a SparkSession built in this one would be the suite's
shared local[2] session (``getOrCreate`` returns it), and stopping it would stop that one too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kbackup.sandbox.spark_cluster import local_spark_cluster

DRIVER = """
import json, os, socket, sys
from pyspark.sql import SparkSession
session = (
    SparkSession.builder.master(sys.argv[1]).appName("kafka-backup-cluster-test")
    .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1").config("spark.executor.memory", "1g")
    .config("spark.cores.max", "2").getOrCreate()
)
context = session.sparkContext
pids = context.parallelize(range(40), 8).map(lambda _: (socket.gethostname(), os.getpid())).collect()
total = sum(context.parallelize(range(1000), 4).collect())
session.stop()
print(json.dumps({"pids": sorted({pid for _, pid in pids}), "total": total, "driver": os.getpid()}))
"""


@pytest.mark.slow
def test_a_standalone_cluster_runs_tasks_on_both_workers(tmp_path: Path) -> None:
    with local_spark_cluster(workers=2, folder=tmp_path / "cluster") as cluster:
        assert cluster.alive_workers() == 2
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, cluster.master_url],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "PYSPARK_PYTHON": sys.executable},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["total"] == 499500
        # Two executors, one per worker, and the tasks ran in Python workers outside the driver.
        executors = list((tmp_path / "cluster" / "work").glob("worker-*/app-*/*"))
        assert len(executors) == 2, executors
        assert len(result["pids"]) >= 2
        assert result["driver"] not in result["pids"]
    assert all(process.poll() is not None for process in cluster.processes)
