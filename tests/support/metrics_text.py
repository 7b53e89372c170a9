"""Reading metrics as Prometheus reads them (prometheus-client's own parser), and the metric names the
examples in examples/ use (Prometheus rules, the Grafana dashboard). Whether a rule fires on a run's
samples is promtool's answer (tests/support/promtool.py), not ours."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

EXAMPLES = Path(__file__).parents[2] / "examples"
PROMETHEUS_ALERTS = EXAMPLES / "prometheus-alerts.yaml"
GRAFANA_DASHBOARD = EXAMPLES / "grafana-dashboard.json"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]

_METRIC = re.compile(r"kafka_backup_[a-z_]+")
#: The series a histogram is exposed as, named after the histogram plus these.
_HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def parse(text: str) -> Samples:
    """Every sample of an exposition, by name and sorted labels."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def total(found: Samples, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include ``labels``."""
    return sum(
        value
        for (sample, sample_labels), value in found.items()
        if sample == name and set(labels.items()) <= set(sample_labels)
    )


def series(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in found.items() if sample == name}


def sampled_names(text: str) -> set[str]:
    """The names of an exposition that have at least one sample: each sample's (``_total``,
    ``_bucket``, ``_sum``, ``_count``, ``_info``) and its family's (a histogram's, a counter's without
    ``_total``). A family declared by its HELP and TYPE lines alone (a labelled metric no run has
    set) has no sample, and names nothing: Prometheus would have no series of it."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.samples:
            names.add(family.name)
            names.update(sample.name for sample in family.samples)
    return names


def metric_names(expression: str) -> set[str]:
    """The metrics a PromQL expression reads; a histogram's series are named by the histogram."""
    names = set()
    for name in _METRIC.findall(expression):
        for suffix in _HISTOGRAM_SERIES:
            if name.endswith(suffix):
                name = name.removesuffix(suffix)
                break
        names.add(name)
    return names


def alert_rules() -> dict[str, dict[str, Any]]:
    """Each alerting rule of examples/prometheus-alerts.yaml (``expr``, ``for``, ``labels``, ...), by
    alert name."""
    rules = yaml.safe_load(PROMETHEUS_ALERTS.read_text())
    return {rule["alert"]: rule for group in rules["groups"] for rule in group["rules"]}


def alert_expressions() -> dict[str, str]:
    """Each alerting rule's expression, by alert name."""
    return {name: str(rule["expr"]) for name, rule in alert_rules().items()}


def dashboard_expressions() -> list[str]:
    """Every PromQL query of the dashboard: its panels' targets and its template variables."""
    dashboard = json.loads(GRAFANA_DASHBOARD.read_text())
    queries = [
        target["expr"] for panel in _panels(dashboard["panels"]) for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if variable.get("type") == "query":
            queries.append(query["query"] if isinstance(query, dict) else query)
    return queries


def _panels(panels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Panels, and those inside collapsed rows."""
    return [item for panel in panels for item in [panel, *_panels(panel.get("panels", []))]]


def example_metric_names() -> dict[str, set[str]]:
    """The metrics each example uses, by example file name."""
    return {
        PROMETHEUS_ALERTS.name: set().union(*(metric_names(expr) for expr in alert_expressions().values())),
        GRAFANA_DASHBOARD.name: set().union(*(metric_names(expr) for expr in dashboard_expressions())),
    }
