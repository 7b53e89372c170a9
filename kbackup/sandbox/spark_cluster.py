"""A throwaway Spark standalone cluster on loopback: a master and workers started from the pyspark
installation (its ``bin/spark-class``), for the tests and benchmarks of the Spark engine.

    with local_spark_cluster(workers=2) as cluster:
        ... SparkSession.builder.master(cluster.master_url) ...

Each worker gets one core by default, so two workers on a two-core machine are two executors;
every process is stopped (and its log kept in the cluster's folder) when the block ends.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kbackup.core.errors import PreconditionError
from kbackup.core.retry import call_with_retries
from kbackup.sandbox.kafka import free_port


def spark_home() -> Path:
    """The pyspark installation, which carries Spark's jars and launch scripts."""
    import pyspark

    return Path(pyspark.__file__).parent


@dataclass
class LocalSparkCluster:
    folder: Path
    master_port: int
    master_ui_port: int
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    worker_ui_ports: list[int] = field(default_factory=list)

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://127.0.0.1:{self.master_ui_port}"

    def alive_workers(self) -> int:
        """Workers the master lists as ALIVE (its JSON status page)."""
        import json

        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as answer:  # noqa: S310 - http on loopback
            status = json.loads(answer.read())
        return sum(1 for worker in status.get("workers", []) if worker.get("state") == "ALIVE")

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _spark_class(home: Path, folder: Path, name: str, *args: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(folder / "logs"),
        "SPARK_WORKER_DIR": str(folder / "work"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_DIRS": str(folder / "local"),
        "SPARK_NO_DAEMONIZE": "1",
    }
    log = (folder / f"{name}.log").open("wb")
    return subprocess.Popen(
        [str(home / "bin" / "spark-class"), *args], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder
    )


@contextlib.contextmanager
def local_spark_cluster(
    workers: int = 2,
    *,
    cores_per_worker: int = 1,
    memory_per_worker: str = "2g",
    folder: Path | None = None,
    timeout_secs: float = 120,
) -> Iterator[LocalSparkCluster]:
    """Start a master and ``workers`` workers on loopback; stop them all on exit."""
    if shutil.which("java") is None:
        raise PreconditionError("no java on PATH: a Spark standalone cluster needs a JDK (17 or later)")
    home = spark_home()
    made = folder is None
    root = Path(tempfile.mkdtemp(prefix="kbackup-spark-")) if folder is None else folder
    for sub in ("logs", "work", "local"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    cluster = LocalSparkCluster(root, free_port(), free_port())
    try:
        cluster.processes.append(
            _spark_class(
                home,
                root,
                "master",
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(cluster.master_port),
                "--webui-port",
                str(cluster.master_ui_port),
            )
        )
        for index in range(workers):
            ui_port = free_port()
            cluster.worker_ui_ports.append(ui_port)
            cluster.processes.append(
                _spark_class(
                    home,
                    root,
                    f"worker-{index}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    str(cores_per_worker),
                    "--memory",
                    memory_per_worker,
                    "--webui-port",
                    str(ui_port),
                    "--work-dir",
                    str(root / "work" / f"worker-{index}"),
                    cluster.master_url,
                )
            )

        def workers_or_a_death() -> str:
            with contextlib.suppress(OSError, ValueError):
                if cluster.alive_workers() >= workers:
                    return "started"
            return "died" if any(p.poll() is not None for p in cluster.processes) else "starting"

        state = call_with_retries(
            workers_or_a_death, within_secs=timeout_secs, delay_secs=0.5, until=lambda now: now != "starting"
        )
        if state != "started":
            logs = "\n".join(
                f"--- {path.name}\n{path.read_text(errors='replace')[-1500:]}" for path in root.glob("*.log")
            )
            wanted = f"{workers} worker(s) wanted"
            raise PreconditionError(f"the Spark standalone cluster did not start ({wanted}):\n{logs}")
        yield cluster
    finally:
        cluster.stop()
        if made:
            shutil.rmtree(root, ignore_errors=True)
