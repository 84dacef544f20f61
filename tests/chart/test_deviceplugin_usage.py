"""The chart's GPU usage values reach the device plugin: its flags (read by the plugin's own parser), the
node's /proc mount, the Event rule while usage is on, and pods/eviction only with the opt-in policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chart import render
from webhook.cli.serve import device_plugin as serve_device_plugin

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

EVENTS = ("", "events", "create")
EVICTION = ("", "pods/eviction", "create")


def _plugin(values: dict[str, Any] | None = None) -> tuple[dict[str, Any], set[tuple[str, str, str]]]:
    objects = render.render(values or {})
    spec = render.find(objects, "DaemonSet", "-device-plugin")["spec"]["template"]["spec"]
    role = render.find(objects, "ClusterRole", "-device-plugin")
    grants = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    return spec, grants


def _settings(spec: dict[str, Any]) -> Any:
    args = spec["containers"][0]["args"][1:]  # after the "device-plugin" subcommand
    parsed = serve_device_plugin.build_parser().parse_args(args)
    return serve_device_plugin.settings_from_args(parsed, {"NODE_NAME": "n1"})


def test_usage_is_on_by_default_reading_the_nodes_proc_with_events_and_no_eviction():
    spec, grants = _plugin()
    settings = _settings(spec)
    assert (settings.usage_interval_s, settings.proc_root) == (10, Path("/host/proc"))
    assert (settings.overshare_grace_s, settings.overshare_event_interval_s, settings.overshare_evict) == (
        60,
        600,
        False,
    )
    assert "hostPID" not in spec
    assert EVENTS in grants and EVICTION not in grants


def test_the_opt_in_eviction_passes_the_flag_and_grants_pods_eviction():
    spec, grants = _plugin({"devicePlugin": {"usage": {"overShare": {"evict": True, "grace": 120}}}})
    settings = _settings(spec)
    assert settings.overshare_evict and settings.overshare_grace_s == 120
    assert EVICTION in grants


def test_usage_off_mounts_no_proc_and_creates_no_events():
    spec, grants = _plugin({"devicePlugin": {"usage": {"interval": 0}}})
    assert _settings(spec).usage_interval_s == 0
    assert "host-proc" not in {v["name"] for v in spec["volumes"]}
    assert EVENTS not in grants and EVICTION not in grants


def test_without_the_nodes_proc_nothing_is_mounted_and_the_default_proc_is_read():
    spec, _ = _plugin({"devicePlugin": {"usage": {"hostProc": ""}}})
    assert "host-proc" not in {v["name"] for v in spec["volumes"]}
    assert _settings(spec).proc_root == Path("/proc")


@pytest.mark.parametrize(
    ("values", "needle"),
    [
        ({"usage": {"interval": 0.5}}, "interval"),
        ({"usage": {"hostProc": "proc"}}, "hostProc"),
        ({"usage": {"overShare": {"grace": -1}}}, "grace"),
        ({"usage": {"overShare": {"eventInterval": 0}}}, "eventInterval"),
        ({"usage": {"overShare": {"evict": "yes"}}}, "evict"),
        ({"usage": {"interval": 0, "overShare": {"evict": True}}}, "evict needs GPU usage"),
    ],
    ids=[
        "too-often",
        "relative-proc",
        "negative-grace",
        "zero-events",
        "evict-not-bool",
        "evict-without-usage",
    ],
)
def test_bad_usage_values_are_refused(values, needle):
    assert needle in render.render_error({"devicePlugin": values})
