"""The chart's Grafana dashboard, PrometheusRule and PodMonitor: off by default, wired to the device plugin
when on, and every query in them names a metric the device plugin really exports (read from its /metrics
text for a report that fills every series), with labels it sets."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.chart import render, schemas
from webhook.core.usage import usage
from webhook.deviceplugin import metrics

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

ON = {
    "monitoring": {
        "dashboard": {"enabled": True},
        "prometheusRule": {"enabled": True},
        "podMonitor": {"enabled": True},
    }
}
KINDS = ("PrometheusRule", "PodMonitor")
# PromQL words that are not metric names (functions, aggregations, operators, modifiers).
PROMQL = {
    "sum", "count", "max", "min", "avg", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "vector", "bool", "offset", "rate", "increase", "avg_over_time", "max_over_time",
    "min_over_time", "label_values", "topk", "bottomk", "clamp_max", "clamp_min",
}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(r"([a-zA-Z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_WORD = re.compile(r"(?<![\w$.])([a-zA-Z_:][\w:]*)")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@pytest.fixture(scope="module")
def exported() -> dict[str, set[str]]:
    """Metric name -> its label names, from the plugin's own /metrics text for a full report."""
    report = usage.NodeUsage(
        "n1",
        0.0,
        (usage.GpuUsage(0, "GPU-a", 16 << 30, 4 << 30, 5 << 30, 0.5, True, {usage.HOST: 1}, "V100"),),
        (usage.ContainerUsage("ml", "train", "main", "u1", 0, 4 << 30, 5 << 30, 0.4, 1, True),),
    )
    registry = metrics.Metrics(("aliyun.com/gpu-mem",))
    registry.reported(report)
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(registry.render().decode()):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render.render(ON)


def _queries(objects: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(where, expression, legend) of every query of the dashboard and the rules."""
    found = []
    dashboard = json.loads(render.find(objects, "ConfigMap", "-dashboard")["data"]["gpushare-usage.json"])
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((f"panel {panel['title']!r}", target["expr"], target.get("legendFormat", "")))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"variable {variable['name']}", variable["query"]["query"], ""))
    rule = render.find(objects, "PrometheusRule")
    for group in rule["spec"]["groups"]:
        for item in group["rules"]:
            found.append((f"alert {item['alert']}", item["expr"], ""))
    return found


def _check(expr: str, exported: dict[str, set[str]]) -> tuple[set[str], list[str]]:
    """The metrics `expr` names and its problems: unknown metrics, labels they do not carry."""
    problems = []
    text = _STRING.sub('""', expr)
    text = re.sub(r"\[[^\]]*\]", "", text)  # range durations
    names: set[str] = set()
    for name, matchers in _SELECTOR.findall(text):
        names.add(name)
        for label in _MATCHER.findall(matchers):
            if name in exported and label not in exported[name]:
                problems.append(f"{name} has no label {label!r}")
    bare = _SELECTOR.sub(lambda m: m.group(1), text)
    grouped = {
        label.strip() for labels in _GROUPING.findall(bare) for label in labels.split(",") if label.strip()
    }
    bare = _GROUPING.sub(" ", bare)
    for word in _WORD.findall(bare):
        if word not in PROMQL and not word.isdigit():
            names.add(word)
    if "label_values" in expr:  # label_values(metric{...}, label): its last argument is a label
        grouped.add(expr.rstrip(") ").rsplit(",", 1)[1].strip())
        names.discard(expr.rstrip(") ").rsplit(",", 1)[1].strip())
    for name in sorted(names - set(exported)):
        problems.append(f"{name} is not a metric the device plugin exports")
    carried = set().union(*(exported.get(n, set()) for n in names)) if names else set()
    problems += [f"no metric of it has the label {label!r}" for label in sorted(grouped - carried)]
    return names, problems


def test_the_dashboard_the_rules_and_the_pod_monitor_are_off_by_default():
    objects = render.render()
    assert not [o for o in objects if o["kind"] in KINDS]
    assert not [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")
    ]


def test_every_query_names_exported_metrics_with_their_labels(objects, exported):
    queries = _queries(objects)
    assert len(queries) >= 15
    problems = []
    for where, expr, legend in queries:
        names, found = _check(expr, exported)
        assert names, f"{where}: no metric found in {expr!r}: the check is broken"
        carried = set().union(*(exported.get(n, set()) for n in names))
        found += [
            f"legend label {label!r} is on none of its metrics"
            for label in _LEGEND.findall(legend)
            if label not in carried
        ]
        problems += [f"{where}: {p}" for p in found]
    assert problems == []


@pytest.mark.parametrize(
    ("expr", "needle"),
    [
        ("kube_pod_info", "kube_pod_info is not a metric the device plugin exports"),
        ('gpushare_gpu_healthy{pod="x"}', "gpushare_gpu_healthy has no label 'pod'"),
        ("sum by (reason) (gpushare_gpu_memory_used_bytes)", "no metric of it has the label 'reason'"),
        (
            "rate(gpushare_device_plugin_usage_polls[5m])",
            "gpushare_device_plugin_usage_polls is not a metric",
        ),
    ],
    ids=["foreign-metric", "wrong-matcher", "wrong-grouping", "counter-without-total"],
)
def test_the_query_check_catches_what_the_agent_does_not_export(exported, expr, needle):
    assert needle in "; ".join(_check(expr, exported)[1])


def test_the_dashboard_is_a_configmap_for_grafanas_sidecar(objects):
    cm = render.find(objects, "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == render.NAMESPACE
    assert json.loads(cm["data"]["gpushare-usage.json"]) == json.loads(
        (render.CHART / "dashboards" / "gpushare-usage.json").read_text()
    )
    for version in schemas.VERSIONS:
        assert schemas.errors(cm, version) == []
    moved = render.render(
        {"monitoring": {"dashboard": {"enabled": True, "namespace": "grafana", "labels": {"dash": "yes"}}}}
    )
    cm = render.find(moved, "ConfigMap", "-dashboard")
    assert (cm["metadata"]["namespace"], cm["metadata"]["labels"]["dash"]) == ("grafana", "yes")


def test_the_alerts_take_their_durations_and_threshold_from_values():
    objects = render.render(
        {
            "monitoring": {
                "prometheusRule": {
                    "enabled": True,
                    "idleFor": "30m",
                    "idleUtilization": 0.1,
                    "labels": {"release": "kps"},
                }
            }
        }
    )
    rule = render.find(objects, "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(alerts) == {
        "GpushareContainerOverShare",
        "GpushareGpuAllocatedButIdle",
        "GpushareGpuUnhealthy",
    }
    assert alerts["GpushareGpuAllocatedButIdle"]["for"] == "30m"
    assert "gpushare_gpu_utilization_ratio < 0.1" in alerts["GpushareGpuAllocatedButIdle"]["expr"]
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_the_pod_monitor_scrapes_the_plugins_health_port_keeping_its_labels(objects):
    monitor = render.find(objects, "PodMonitor")
    daemonset = render.find(objects, "DaemonSet", "-device-plugin")
    template = daemonset["spec"]["template"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    assert endpoint["port"] in ports and endpoint["path"] == "/metrics"
    assert endpoint["honorLabels"] is True  # else namespace/pod/container become exported_*


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"monitoring": {"prometheusRule": {"idleFor": "soon"}}}, "idleFor"),
        ({"monitoring": {"prometheusRule": {"idleUtilization": 2}}}, "idleUtilization"),
        ({"monitoring": {"dashboard": {"namespace": "Not_A_Namespace"}}}, "namespace"),
        ({"monitoring": {"podMonitor": {"port": 9400}}}, "port"),
    ],
    ids=["duration", "ratio", "namespace", "unknown-key"],
)
def test_bad_monitoring_values_are_refused(values, needle):
    assert needle in render.render_error(values)
