"""Worker processes of a command under test: those still running after a while (an orphan that
exited may stay a zombie, which nothing here reaps)."""

from __future__ import annotations

import time

import psutil


def still_running(processes: list[psutil.Process], *, within_secs: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after ``within_secs`` (polled: the call returns as soon
    as none is)."""

    def running(process: psutil.Process) -> bool:
        try:
            return process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + within_secs
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in processes if running(p)]
