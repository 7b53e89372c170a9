"""The throwaway Spark standalone cluster (kbackup.sandbox.spark_cluster) the Spark engine's tests
run against (issue 23): a master and two one-core workers started from the pyspark installation
on loopback, and a job whose tasks run on both workers' executors."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest

from kbackup.sandbox.spark_cluster import local_spark_cluster


@pytest.mark.slow
def test_a_standalone_cluster_runs_tasks_on_both_workers(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    with local_spark_cluster(workers=2, folder=tmp_path / "cluster") as cluster:
        assert cluster.alive_workers() == 2
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        session = (
            SparkSession.builder.master(cluster.master_url)
            .appName("kafka-backup-cluster-test")
            .config("spark.ui.enabled", "false")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.executor.memory", "1g")
            .config("spark.cores.max", "2")
            .getOrCreate()
        )
        try:
            context = session.sparkContext
            # A lambda travels by value (a function of this module would be imported by name on the
            # executors, where the tests are not on the path).
            pids = set(
                context.parallelize(range(40), 8).map(lambda _: (socket.gethostname(), os.getpid())).collect()
            )
            assert sum(context.parallelize(range(1000), 4).collect()) == 499500
        finally:
            session.stop()
        # Two executors, one per worker: the tasks ran in (at least) two Python worker processes
        # whose parents are different executor JVMs.
        executors = list((tmp_path / "cluster" / "work").glob("worker-*/app-*/*"))
        assert len(executors) == 2, executors
        assert len({pid for _, pid in pids}) >= 2
    assert all(process.poll() is not None for process in cluster.processes)
