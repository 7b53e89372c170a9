"""Run a CLI command as a subprocess and SIGKILL it at a chosen moment, for the crash tests.

A kill point is either a named crash point inside the process
(``KBACKUP_CRASH_AT``, see ``kbackup.core.faults``), a number of seconds after
the start, or a condition polled from outside (records landed on a target).
Every choice comes from one seeded ``random.Random``, so a failing run is
replayed with ``KBACKUP_FAULT_SEED``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kbackup.core.faults import ENVIRONMENT_VARIABLE as CRASH_AT

SEED_VARIABLE = "KBACKUP_FAULT_SEED"


def fault_seed() -> tuple[int, random.Random]:
    """The seed of this run (printed, so pytest shows it when the test fails) and its generator."""
    seed = int(os.environ.get(SEED_VARIABLE, random.randrange(2**32)))
    print(f"fault seed {seed} (set {SEED_VARIABLE}={seed} to replay this run)")
    return seed, random.Random(seed)


@dataclass(frozen=True)
class KillPoint:
    """Where to kill one run: at most one of the three is set.

    ``after_seconds`` counts from the moment ``progress()`` first holds (the run wrote a segment,
    records landed), so that a timed kill never lands in the interpreter's start-up, where it
    would test nothing and still count as a kill.
    """

    crash_at: str | None = None
    after_seconds: float | None = None
    condition: Callable[[], bool] | None = None
    progress: Callable[[], bool] | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if self.after_seconds is not None and self.progress is None:
            raise ValueError("a timed kill needs progress(): when the run has started its work")

    def __str__(self) -> str:
        return self.label or self.crash_at or f"{self.after_seconds}s after progress"


@dataclass(frozen=True)
class RunOutcome:
    killed: bool
    returncode: int
    stderr: str


def run_and_kill(
    command: Sequence[str], point: KillPoint, *, cwd: Path | None = None, timeout: float = 300
) -> RunOutcome:
    """Run ``command``; kill it at ``point``. ``killed`` is True if it died by SIGKILL before finishing."""
    env = {key: value for key, value in os.environ.items() if key != CRASH_AT}
    env["KBACKUP_NO_PROGRESS"] = "1"
    if point.crash_at is not None:
        env[CRASH_AT] = point.crash_at
    process = subprocess.Popen(
        list(command), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env
    )
    started = time.monotonic()
    progressed: float | None = None  # when point.progress() first held
    try:
        while process.poll() is None:
            now = time.monotonic()
            if now - started > timeout:
                raise AssertionError(f"{' '.join(command)} ran longer than {timeout}s")
            if progressed is None and point.progress is not None and point.progress():
                progressed = now
            due = (
                point.after_seconds is not None
                and progressed is not None
                and now - progressed >= point.after_seconds
            )
            if due or (point.condition is not None and point.condition()):
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
        _out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(30)
    return RunOutcome(process.returncode == -signal.SIGKILL, process.returncode, err)
