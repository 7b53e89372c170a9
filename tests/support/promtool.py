"""The example alert rules evaluated by Prometheus' own ``promtool`` (``make promtool`` puts Debian's
into the virtualenv), on the samples a real run exported, not by a rule evaluator of ours.

:func:`alert_test` writes a ``promtool test rules`` unit-test file against
examples/prometheus-alerts.yaml: each case's samples (as tests/support/metrics_text.py parses them)
are series with one sample at time 0, the rules are evaluated at time 0, and promtool compares the
alerts firing then with the alerts the case expects (their labels and annotations, exactly). All the
cases go to one promtool call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.metrics_text import PROMETHEUS_ALERTS, Samples

#: Set by the Makefile's test targets, which install promtool first: a missing promtool fails the test
#: there instead of skipping it.
REQUIRE_PROMTOOL = "KBACKUP_REQUIRE_PROMTOOL"
INSTALL_HINT = "`make promtool` puts Debian's promtool into .venv/bin"


def find_promtool() -> str | None:
    """promtool on PATH, or in this interpreter's virtualenv (where ``make promtool`` puts it)."""
    found = shutil.which("promtool")
    if found is not None:
        return found
    in_venv = Path(sys.prefix) / "bin" / "promtool"
    return str(in_venv) if os.access(in_venv, os.X_OK) else None


def promtool_path(*, skip_outside_make: bool = False) -> str:
    """The promtool to run. Missing, the test fails; with ``skip_outside_make`` it is skipped instead,
    unless it runs under the Makefile's test targets (``KBACKUP_REQUIRE_PROMTOOL=1``)."""
    found = find_promtool()
    if found is not None:
        return found
    reason = f"no promtool on PATH or in {Path(sys.prefix) / 'bin'}: {INSTALL_HINT}"
    if skip_outside_make and os.environ.get(REQUIRE_PROMTOOL) != "1":
        pytest.skip(reason)
    pytest.fail(f"{reason} ({REQUIRE_PROMTOOL}=1: the tests that run promtool must run)")


@dataclass(frozen=True)
class Alert:
    """An alert expected to fire: its labels (the rule's and the series', without ``alertname``) and
    its annotations as Prometheus renders them (promtool compares both exactly)."""

    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AlertCase:
    """Samples, and the alerts of one rule that must fire on them (none: the rule must stay quiet)."""

    name: str
    samples: Samples
    alerts: Sequence[Alert] = ()


def series_selector(name: str, labels: Sequence[tuple[str, str]]) -> str:
    """A series in promtool's notation: ``name{label="value"}``, values escaped as in PromQL."""
    if not labels:
        return name
    return name + "{" + ",".join(f'{label}="{_escaped(value)}"' for label, value in labels) + "}"


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample_value(value: float) -> str:
    """A sample's value in promtool's notation (``NaN``, ``Inf``, ``-Inf`` and exponents included)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Inf" if value > 0 else "-Inf"
    return repr(float(value))


def unit_test_file(alertname: str, cases: Sequence[AlertCase], rules: Path = PROMETHEUS_ALERTS) -> str:
    """The ``promtool test rules`` file: one test group per case, the rules evaluated at time 0."""
    document: dict[str, Any] = {
        "rule_files": [str(rules.resolve())],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": case.name,
                "interval": "1m",
                "input_series": [
                    {"series": series_selector(name, labels), "values": sample_value(value)}
                    for (name, labels), value in sorted(case.samples.items())
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "0m",
                        "alertname": alertname,
                        "exp_alerts": [
                            {"exp_labels": dict(alert.labels), "exp_annotations": dict(alert.annotations)}
                            for alert in case.alerts
                        ],
                    }
                ],
            }
            for case in cases
        ],
    }
    return yaml.safe_dump(document, sort_keys=False, width=1_000)


def alert_test(alertname: str, cases: Sequence[AlertCase], rules: Path = PROMETHEUS_ALERTS) -> str | None:
    """Run ``promtool test rules`` on the cases: None when every case got exactly its alerts, else
    promtool's own output (which names the failing case, the alerts expected and those it got),
    followed by the unit-test file it ran."""
    assert cases, "no case to test"
    # A name no rule has would make every case that expects nothing pass.
    named = {
        rule["alert"] for group in yaml.safe_load(rules.read_text())["groups"] for rule in group["rules"]
    }
    assert alertname in named, f"{rules.name} has no alert {alertname}"
    text = unit_test_file(alertname, cases, rules)
    with tempfile.TemporaryDirectory(prefix="kbackup-promtool-") as folder:
        path = Path(folder) / "alert-test.yaml"
        path.write_text(text)
        answer = subprocess.run(
            [promtool_path(), "test", "rules", str(path)], capture_output=True, text=True, timeout=120
        )
    if answer.returncode == 0:
        return None
    output = answer.stdout + answer.stderr
    return (
        f"promtool test rules exited {answer.returncode}:\n{output}\n--- the unit-test file it ran:\n{text}"
    )
