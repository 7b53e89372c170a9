"""Reading metrics as Prometheus reads them (prometheus-client's own parser), the metric names the
examples in examples/ use (Prometheus rules, the Grafana dashboard), and a small evaluator of the
simple alert expressions there (:func:`evaluate`), for checking that a rule fires on a run's samples
without a Prometheus server."""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
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


# -- evaluating simple alert expressions ----------------------------------------------------------------

Labels = tuple[tuple[str, str], ...]


class UnsupportedExpression(ValueError):
    """An expression outside the few forms :func:`evaluate` knows: one that needs samples over time
    (``increase``, ``rate``, ``deriv``, ``[10m]``), another function, ``bool``, or an operation
    between two vectors. Refused, never guessed at."""


_COMPARISONS: dict[str, Callable[[float, float], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
}
_AGGREGATIONS: dict[str, Callable[[list[float]], float]] = {"max": max, "min": min, "sum": sum}
_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
_COMPARISON = re.compile(rf"(?P<vector>.+?)\s*(?P<op>==|!=|>=|<=|>|<)\s*(?P<threshold>{_NUMBER})")
_SELECTOR = re.compile(r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<matchers>[^{}]*)\})?")
_MATCHER = re.compile(r'\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\s*(?P<op>=~|!~|!=|=)\s*"(?P<value>[^"\\]*)"\s*')
_AGGREGATION = re.compile(
    r"(?P<how>max|min|sum)\s+by\s*\((?P<by>[a-zA-Z0-9_,\s]*)\)\s*\((?P<inner>.*)\)", re.DOTALL
)
_TIME_MINUS = re.compile(r"time\(\)\s*-\s*(?P<inner>.*)", re.DOTALL)


def evaluate(expression: str, found: Samples, *, now: float = 0.0) -> dict[Labels, float]:
    """What Prometheus returns for ``expression`` evaluated once, at Unix time ``now``, over ``found``
    (the latest sample of each series), as the labels an alert built from each result would carry
    (the metric name dropped, as Prometheus drops it from alerts) and the result's value.

    Only the instant forms the example rules use are known, each with Prometheus' meaning:
    a selector ``name{label="v", label=~"re", label!="v", label!~"re"}`` (regular expressions
    anchored at both ends), ``time() - <selector>``, ``max|min|sum by (labels) (<selector>)``, and
    any of these compared with a number (``> 900``, ``== 0``: a filter that keeps the series for
    which it holds, with their values). Anything else raises :class:`UnsupportedExpression`.
    """
    text = " ".join(expression.split())
    comparison = _COMPARISON.fullmatch(text)
    if comparison is None:
        return _vector(text, found, now)
    compare = _COMPARISONS[comparison["op"]]
    threshold = float(comparison["threshold"])
    return {
        labels: value
        for labels, value in _vector(comparison["vector"], found, now).items()
        if compare(value, threshold)
    }


def _vector(text: str, found: Samples, now: float) -> dict[Labels, float]:
    text = text.strip()
    aggregation = _AGGREGATION.fullmatch(text)
    if aggregation is not None:
        by = sorted({label.strip() for label in aggregation["by"].split(",") if label.strip()})
        groups: dict[Labels, list[float]] = {}
        for labels, value in _selected(aggregation["inner"], found).items():
            present = dict(labels)
            kept = tuple((label, present[label]) for label in by if label in present)
            groups.setdefault(kept, []).append(value)
        return {labels: _AGGREGATIONS[aggregation["how"]](values) for labels, values in groups.items()}
    minus = _TIME_MINUS.fullmatch(text)
    if minus is not None:
        return {labels: now - value for labels, value in _selected(minus["inner"], found).items()}
    return _selected(text, found)


def _selected(text: str, found: Samples) -> dict[Labels, float]:
    """The series a selector picks (no range, no function: those need what this evaluator lacks)."""
    selector = _SELECTOR.fullmatch(text.strip())
    if selector is None or selector["name"] in ("bool", "and", "or", "unless", "by", "without"):
        raise UnsupportedExpression(f"not one of the forms this evaluator knows: {text.strip()!r}")
    matchers = _matchers(selector["matchers"] or "")
    return {
        labels: value
        for (name, labels), value in found.items()
        if name == selector["name"]
        and all(matches(dict(labels).get(label, "")) for label, matches in matchers)
    }


def _matchers(text: str) -> list[tuple[str, Callable[[str], bool]]]:
    matchers: list[tuple[str, Callable[[str], bool]]] = []
    for part in filter(str.strip, text.split(",")):
        matcher = _MATCHER.fullmatch(part)
        if matcher is None:
            raise UnsupportedExpression(f"not a label matcher this evaluator knows: {part!r}")
        op, value = matcher["op"], matcher["value"]
        pattern = re.compile(value) if op in ("=~", "!~") else None

        def matches(
            found: str, op: str = op, value: str = value, pattern: re.Pattern[str] | None = pattern
        ) -> bool:
            if pattern is not None:
                return (pattern.fullmatch(found) is not None) == (op == "=~")
            return (found == value) == (op == "=")

        matchers.append((matcher["label"], matches))
    return matchers
