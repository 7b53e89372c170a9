"""Run a CLI command as a subprocess that SIGKILLs itself at a named crash point, for the crash tests.

A kill point is a crash point the product fires (``KBACKUP_CRASH_AT``, see
``kbackup.core.faults``) at a chosen occurrence: the n-th uploaded segment,
the n-th transaction, the batch that takes the run to its n-th record. The
test picks an occurrence the run is sure to reach (it knows how many records
the run has left to copy), so every run it means to kill is killed: a delay
in seconds, or a condition polled from outside, can lose the race with a run
that finishes first (a loaded machine, a fast run), and the test then kills
less than it says. Every choice comes from one seeded ``random.Random``, so
a failing run is replayed with ``KBACKUP_FAULT_SEED``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
from collections.abc import Sequence
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
class RunOutcome:
    killed: bool
    returncode: int
    stderr: str


def run_and_kill(
    command: Sequence[str],
    crash_at: str,
    *,
    cwd: Path | None = None,
    timeout: float = 300,
    killed_exit: int = -signal.SIGKILL,
) -> RunOutcome:
    """Run ``command`` with ``KBACKUP_CRASH_AT=crash_at``. ``killed``: it died by the SIGKILL of that
    crash point (a run that ends any other way did not reach it). ``killed_exit``: how the run
    ends when the point fires; on worker processes the point kills a worker, and the run ends
    with the exit of a dead worker (WorkerDiedError's 19)."""
    env = {key: value for key, value in os.environ.items() if key != CRASH_AT}
    env["KBACKUP_NO_PROGRESS"] = "1"
    env[CRASH_AT] = crash_at
    try:
        done = subprocess.run(
            list(command), cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=env, timeout=timeout, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"{' '.join(command)} ran longer than {timeout}s (kill point {crash_at})"
        ) from None
    return RunOutcome(done.returncode == killed_exit, done.returncode, done.stderr)


def must_kill(
    command: Sequence[str],
    crash_at: str,
    *,
    seed: int,
    run: int,
    note: str = "",
    cwd: Path | None = None,
    killed_exit: int = -signal.SIGKILL,
) -> None:
    """:func:`run_and_kill`, asserting that the run died at its crash point (and saying so)."""
    outcome = run_and_kill(command, crash_at, cwd=cwd, killed_exit=killed_exit)
    assert outcome.killed, f"seed {seed}, run {run}, {crash_at}: exit {outcome.returncode} {outcome.stderr}"
    print(f"run {run}: {crash_at}{note} -> killed")


def counted_kill(
    chooser: random.Random,
    name: str,
    *,
    left: int,
    kills_to_come: int,
    per_kill_cost: int,
    most: int,
    workers: int = 1,
) -> str:
    """``name@N`` for a counting crash point (``restore:records-produced``), with a random N that the
    run is sure to reach and that leaves every later run a kill it is sure to reach too.

    ``left`` is a lower bound of the records this run has to copy (the total less what the target
    already holds, committed or not); ``per_kill_cost`` bounds how much further than its N one kill
    can move that bound (the rest of the batch holding the N-th record, and the records of an open
    transaction the kill leaves aborted on the target); ``kills_to_come`` later runs must each still
    find at least one record left after their own cost (``workers`` records on ``workers``).

    On ``workers`` processes each counts its own records: the first to reach N is killed, when
    none has copied more than N, so the run moves the bound by at most ``workers`` * N and the
    cost; and one of them copies at least ``left`` / ``workers``, so N up to that is reached.
    """
    reserve = kills_to_come * (per_kill_cost + 1)
    highest = min(most, (left - reserve - per_kill_cost) // workers)
    if highest < 1:
        raise AssertionError(
            f"only {left} records left for {kills_to_come + 1} kills of cost {per_kill_cost}: "
            "the test's data is too small for its kills"
        )
    return f"{name}@{chooser.randint(1, highest)}"
