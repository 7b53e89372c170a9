"""Every benchmark, one after the other, with one command.

    .venv/bin/python -m bench all [--quick] [--only NAME ...]     (or: make bench / make bench-quick)
    .venv/bin/python -m bench plots

Runs each benchmark module in its own process (each starts and stops the local Kafka clusters it
needs): backup, restore, mapping, reset (when ``bench/bench_reset.py`` exists), point in time,
recovery, the cost of metrics, prune (no cluster: a folder and moto's S3 server), the engines,
encryption, the storage backends (a folder, moto's S3 server, fake-gcs-server and Azurite), the
rate limits and the accuracy study. A full run passes
``--write-docs``: each module rewrites its own section of docs/benchmarks.md
(between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``), then this runner
writes the ``run`` section (machine, what ran, how long) and a plot of the
throughput ratios found in the sections' tables (``python -m bench plots``
redraws that plot alone). ``--quick`` runs everything at smoke sizes and
writes nothing into docs/: the output goes to ``bench-results/quick/`` so
full-size figures are never overwritten by smoke ones.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench._perf import replace_section

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
RATIO_PLOT = REPO / "docs" / "img" / "throughput-ratios.png"
QUICK_RESULTS = REPO / "bench-results" / "quick"
#: Section name (its docs/benchmarks.md markers) -> module run with ``python -m``.
BENCHMARKS = {
    "backup": "bench.bench_backup",
    "restore": "bench.bench_restore",
    "mapping": "bench.bench_mapping",
    "reset": "bench.bench_reset",
    "point-in-time": "bench.bench_point_in_time",
    "recovery": "bench.bench_recovery",
    "metrics": "bench.bench_metrics",
    "prune": "bench.bench_prune",
    "erase": "bench.bench_erase",
    "engine": "bench.bench_engine",
    "encryption": "bench.bench_encryption",
    "storage": "bench.bench_storage",
    "throttle": "bench.bench_throttle",
    "compression": "bench.bench_compression",
    "backup-workers": "bench.bench_backup_workers",
    "accuracy": "bench.accuracy",
}
#: Hours a benchmark may take before the runner gives up on it.
TIMEOUT_HOURS = 3


@dataclass
class Outcome:
    name: str
    status: str
    seconds: float = 0.0
    log: Path | None = None


def machine_line() -> str:
    """Cores, memory and load: what every figure depends on."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} CPU(s) ({platform.machine()}, {platform.processor() or platform.system()}), "
        f"{memory:.1f} GiB memory, Python {platform.python_version()}, load average (1/5/15 min) "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )


def run_one(name: str, module: str, *, quick: bool, logs: Path) -> Outcome:
    if importlib.util.find_spec(module) is None:
        print(f"== {name}: skipped: {module} does not exist in this checkout", flush=True)
        return Outcome(name, f"skipped ({module} not in this checkout)")
    command = [sys.executable, "-m", module, "--quick" if quick else "--write-docs"]
    log_path = logs / f"{name}.log"
    print(f"== {name}: {' '.join(command[1:])} (log: {log_path})", flush=True)
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        assert process.stdout is not None
        for line in process.stdout:  # echo and keep: long runs show progress as they go
            print(f"  [{name}] {line}", end="", flush=True)
            log.write(line)
        try:
            code = process.wait(timeout=TIMEOUT_HOURS * 3600)
        except subprocess.TimeoutExpired:
            process.kill()
            code = -1
    seconds = time.monotonic() - started
    status = "ok" if code == 0 else f"failed (exit {code})"
    print(f"== {name}: {status} in {seconds / 60:.1f} min", flush=True)
    return Outcome(name, status, seconds, log_path)


def markdown_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """The tables of a markdown text: (header cells, body rows)."""
    tables = []
    lines = text.splitlines()
    index = 0
    while index < len(lines) - 1:
        if lines[index].startswith("|") and re.match(r"^\|[\s:|-]+\|$", lines[index + 1].strip()):
            header = [cell.strip() for cell in lines[index].strip().strip("|").split("|")]
            rows = []
            index += 2
            while index < len(lines) and lines[index].startswith("|"):
                rows.append([cell.strip() for cell in lines[index].strip().strip("|").split("|")])
                index += 1
            tables.append((header, rows))
        else:
            index += 1
    return tables


def section_text(document: str, name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->(.*?)<!-- {name}:end -->", document, re.DOTALL)
    return match.group(1) if match else ""


def throughput_ratios(document: str) -> list[tuple[str, float]]:
    """(label, value) of every ``ratio`` column in the throughput sections' tables."""
    found = []
    for name in ("backup", "restore", "mapping", "reset"):
        for header, rows in markdown_tables(section_text(document, name)):
            for column, title in enumerate(header):
                if not title.lower().startswith("ratio"):
                    continue
                for row in rows:
                    if "ConsumerPerformance" in row[0] or "ProducerPerformance" in row[0]:
                        continue  # the reference itself, 1.0 by definition
                    try:
                        value = float(row[column].replace(",", ""))
                    except (ValueError, IndexError):
                        continue
                    # Short first cells (a record size) need the second (a record count) to be told apart.
                    label = (
                        row[0]
                        if len(row[0]) > 20
                        else " ".join(cell for cell in row[: min(2, column)] if cell)
                    )
                    found.append(
                        (f"{name}: {label} [{header[column - 1] if title == 'ratio' else title}]", value)
                    )
    return found


def draw_ratios(ratios: list[tuple[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(12, 0.35 * len(ratios) + 1.2))
    labels = [label for label, _ in ratios]
    axis.barh(range(len(ratios)), [value for _, value in ratios])
    axis.set_yticks(range(len(ratios)), labels, fontsize=7)
    axis.invert_yaxis()
    axis.axvline(1.0, color="black", linewidth=0.8)
    axis.set_xlabel("ratio to Kafka's perf tool, same run (1.0 = as fast)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


def run_section(outcomes: list[Outcome], machine: str, seconds: float, quick: bool = False) -> str:
    command = (
        "`python -m bench all --quick` (`make bench-quick`)"
        if quick
        else "`python -m bench all` (`make bench`)"
    )
    lines = [
        "## How these figures were made",
        "",
        f"{command} on {machine} at the start; {seconds / 60:.0f} min in all, {time.strftime('%Y-%m-%d')}.",
        "",
        "| benchmark | status | minutes |",
        "|---|---|---:|",
        *(f"| {item.name} | {item.status} | {item.seconds / 60:.1f} |" for item in outcomes),
    ]
    return "\n".join(lines)


def redraw_ratios() -> bool:
    """Plot every throughput ratio now in docs/benchmarks.md into the ``ratios`` section; False if none."""
    ratios = throughput_ratios(DOCS.read_text())
    if not ratios:
        return False
    draw_ratios(ratios, RATIO_PLOT)
    body = "\n".join(
        [
            "## Throughput ratios at a glance",
            "",
            "Every `ratio` column of the Backup, Restore, Mapping (and Reset) tables above, drawn by "
            f"`python -m bench plots` ({time.strftime('%Y-%m-%d')}; `python -m bench all` redraws it after "
            "a full run). Each bar is this project's rate over Kafka's own perf tool measured in the "
            "same run on the same topic.",
            "",
            f"![throughput ratios]({RATIO_PLOT.relative_to(DOCS.parent).as_posix()})",
        ]
    )
    replace_section(DOCS, "<!-- ratios:start -->", "<!-- ratios:end -->", body)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command",
        choices=["all", "plots"],
        help="all: every benchmark; plots: redraw the throughput-ratio plot from docs/benchmarks.md",
    )
    parser.add_argument("--quick", action="store_true", help="smoke sizes; results to bench-results/quick/")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), help="run only these benchmarks")
    args = parser.parse_args()
    if args.command == "plots":
        print(f"written to {RATIO_PLOT}" if redraw_ratios() else "no ratio columns in docs/benchmarks.md")
        return
    names = args.only or list(BENCHMARKS)
    logs = QUICK_RESULTS if args.quick else REPO / "bench-results" / time.strftime("%Y%m%dT%H%M%S")
    logs.mkdir(parents=True, exist_ok=True)
    machine = machine_line()
    print(f"machine: {machine}", flush=True)
    started = time.monotonic()
    outcomes = [run_one(name, BENCHMARKS[name], quick=args.quick, logs=logs) for name in names]
    seconds = time.monotonic() - started
    print(f"\nmachine at the end: {machine_line()}")
    for item in outcomes:
        print(f"  {item.name:10} {item.status:45} {item.seconds / 60:6.1f} min")
    if not args.quick:
        replace_section(
            DOCS, "<!-- run:start -->", "<!-- run:end -->", run_section(outcomes, machine, seconds)
        )
        redraw_ratios()
        print(f"written to {DOCS}")
    else:
        summary = run_section(outcomes, machine, seconds, quick=True)
        (logs / "summary.md").write_text(summary + "\n")
        print(f"quick run: nothing written to docs/; logs and summary in {logs}")
    if any(item.status.startswith("failed") for item in outcomes):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
