"""The CLI run as a subprocess from tests, and waiting for what it does meanwhile."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any


def start_cli(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "KBACKUP_NO_PROGRESS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "kbackup", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for(
    condition: Any, what: str, timeout: float = 60, process: subprocess.Popen[str] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            assert process.stderr is not None
            raise AssertionError(
                f"the backup exited ({process.returncode}) before {what}: {process.stderr.read()}"
            )
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
