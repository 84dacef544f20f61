"""What each part may do is enforced by the real API server: RBAC, and for the device plugin the
chart's ValidatingAdmissionPolicy (its own Node and the pods bound to it, only the gpushare keys); the
webhook's opt-out is a namespace label, which pod authors cannot set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e import objects
from tests.e2e.bed import FULLNAME, Bed
from webhook.core.node import gpulabels
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.kube import client, errors, rest

NS = "e2e-privilege"


@pytest.fixture(scope="module")
def nodes(bed: Bed) -> tuple[str, str]:
    bed.namespace(NS)
    for name in ("priv-a", "priv-b"):
        bed.node(name, 1, 16, group="privilege")
        body = objects.pod(f"on-{name}")
        body["spec"]["nodeName"] = name
        bed.request("POST", rest.path("pods", namespace=NS), body=body)
    return "priv-a", "priv-b"


def _as(bed: Bed, kubeconfig: Any) -> Callable[..., Any]:
    api = client.connect(client.ClientSettings(kubeconfig=str(kubeconfig)))

    def call(method: str, path: str, body: Any = None) -> Any:
        return rest.request(api, method, path, body=body, content_type=rest.MERGE_PATCH)

    return call


def _denied(call: Callable[[], Any]) -> str:
    with pytest.raises(errors.ForbiddenError) as caught:
        call()
    return caught.value.message


def test_a_plugin_may_mark_pods_of_its_own_node_only(bed: Bed, nodes: tuple[str, str]) -> None:
    a, b = nodes
    plugin_a = _as(bed, bed.device_plugin_kubeconfig(a))
    assigned = {"metadata": {"annotations": {resources.ANN_MEM_ASSIGNED: "true"}}}
    plugin_a("PATCH", rest.path("pods", f"on-{a}", NS), assigned)
    message = _denied(lambda: plugin_a("PATCH", rest.path("pods", f"on-{b}", NS), assigned))
    assert f"the device plugin of node {a} may not change pods bound to another node" in message


def test_a_plugin_may_change_only_gpushare_keys(bed: Bed, nodes: tuple[str, str]) -> None:
    a, _ = nodes
    plugin_a = _as(bed, bed.device_plugin_kubeconfig(a))
    pod = rest.path("pods", f"on-{a}", NS)
    message = _denied(lambda: plugin_a("PATCH", pod, {"metadata": {"annotations": {"owner": "mallory"}}}))
    assert "only the gpushare annotations, not: owner" in message
    message = _denied(lambda: plugin_a("PATCH", pod, {"metadata": {"labels": {"tier": "gold"}}}))
    assert "may not change these labels: tier" in message
    node = rest.path("nodes", a)
    devices = {
        "metadata": {"annotations": {resources.NODE_DEVICES_ANNOTATION: '{"unit":"GiB","devices":[]}'}}
    }
    plugin_a("PATCH", node, devices)
    # The GPU type labels, exactly those (core/node/gpulabels.py), and their removal.
    plugin_a("PATCH", node, {"metadata": {"labels": {key: "x" for key in gpulabels.KEYS}}})
    plugin_a("PATCH", node, {"metadata": {"labels": dict.fromkeys(gpulabels.KEYS)}})
    message = _denied(
        lambda: plugin_a("PATCH", node, {"metadata": {"labels": {resources.GPU_COUNT_LABEL: "7"}}})
    )
    assert f"may not change these labels: {resources.GPU_COUNT_LABEL}" in message
    message = _denied(lambda: plugin_a("PATCH", node, {"metadata": {"labels": {modes.MODE_LABEL: "share"}}}))
    assert f"may not change these labels: {modes.MODE_LABEL}" in message  # the mode is the admin's
    message = _denied(lambda: plugin_a("PATCH", node, {"metadata": {"labels": {"e2e-group": "elsewhere"}}}))
    assert "may not change these labels: e2e-group" in message
    message = _denied(lambda: plugin_a("PATCH", node, {"spec": {"unschedulable": True}}))
    assert "may change only" in message
    ready_false = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    message = _denied(lambda: plugin_a("PATCH", node + "/status", ready_false))
    assert "only the GPU resources' capacity" in message
    plugin_a("PATCH", node + "/status", {"status": {"capacity": {resources.GPU_COUNT: "1"}}})


def test_a_plugin_may_not_touch_another_node(bed: Bed, nodes: tuple[str, str]) -> None:
    a, b = nodes
    plugin_a = _as(bed, bed.device_plugin_kubeconfig(a))
    devices = {"metadata": {"annotations": {resources.NODE_DEVICES_ANNOTATION: "{}"}}}
    message = _denied(lambda: plugin_a("PATCH", rest.path("nodes", b), devices))
    assert f"may not change another Node ({b})" in message


def test_a_token_not_bound_to_a_node_may_not_write(bed: Bed, nodes: tuple[str, str]) -> None:
    a, _ = nodes
    unbound = _as(bed, bed.kubeconfig(f"{FULLNAME}-device-plugin"))
    assigned = {"metadata": {"annotations": {resources.ANN_MEM_ASSIGNED: "true"}}}
    message = _denied(lambda: unbound("PATCH", rest.path("pods", f"on-{a}", NS), assigned))
    assert "bound to its pod on a node" in message
    # Reading stays open: the plugin lists pods before it knows which are its own.
    assert unbound("GET", rest.path("pods", namespace=NS))["items"]


def test_rbac_keeps_the_extender_from_patching_pods(bed: Bed, nodes: tuple[str, str]) -> None:
    a, _ = nodes
    extender = _as(bed, bed.kubeconfig(f"{FULLNAME}-extender"))
    message = _denied(
        lambda: extender("PATCH", rest.path("pods", f"on-{a}", NS), {"metadata": {"labels": {"x": "y"}}})
    )
    assert "cannot patch resource" in message


def test_the_opt_out_is_a_namespace_label_only(bed: Bed) -> None:
    bad = objects.pod("half", objects.container(limits={"nvidia.com/gpu": "0.5"}))
    labelled = objects.pod(
        "half-labelled",
        objects.container(limits={"nvidia.com/gpu": "0.5"}),
        labels={"gpushare.aliyun.com/webhook-skip": "true"},
    )
    checked = bed.namespace("e2e-not-opted-out")
    message = _denied(lambda: bed.request("POST", rest.path("pods", namespace=checked), body=labelled))
    assert "denied the request" in message  # a pod label opts nothing out
    opted = bed.namespace("e2e-opted-out", labels={"gpushare.aliyun.com/webhook-skip": "true"})
    # Not sent to the webhook; the API server's own validation still refuses half a GPU.
    with pytest.raises(errors.ApiError) as caught:
        bed.request("POST", rest.path("pods", namespace=opted), body=bad)
    assert "denied the request" not in caught.value.message
    assert "must be an integer" in caught.value.message
