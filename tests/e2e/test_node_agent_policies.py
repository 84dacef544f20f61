"""What a node agent's token may not do, refused by the chart's ValidatingAdmissionPolicies in the real API
server (beside tests/e2e/test_least_privilege.py): the device plugin's token rewriting its Node's status
beyond the GPU resources (addresses, removed resources), adding owners or finalizers (the garbage
collector would delete its Node or pods, or pods would never finish deleting); a DRA driver's token taking
another node's ResourceSlice name (that node could then never publish its GPUs)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import dra, objects
from tests.e2e.bed import Bed
from webhook.core.node import draslice
from webhook.kube import client, errors, rest

NS = "e2e-node-agents"
Call = Callable[[str, str, Any], Any]


@pytest.fixture(scope="module")
def node_a(bed: Bed) -> str:
    bed.namespace(NS)
    bed.node("agents-a", 1, 16, group="agents")
    body = objects.pod("on-agents-a")
    body["spec"]["nodeName"] = "agents-a"
    bed.request("POST", rest.path("pods", namespace=NS), body=body)
    return "agents-a"


def _as(kubeconfig: Path) -> Call:
    api = client.connect(client.ClientSettings(kubeconfig=str(kubeconfig)))
    return lambda method, path, body: rest.request(
        api, method, path, body=body, content_type=rest.MERGE_PATCH
    )


def _refused(call: Call, method: str, path: str, body: Any) -> str:
    with pytest.raises(errors.ForbiddenError) as caught:
        call(method, path, body)
    return caught.value.message


def test_the_device_plugin_may_not_rewrite_its_nodes_addresses(bed: Bed, node_a: str) -> None:
    plugin = _as(bed.device_plugin_kubeconfig(node_a))
    body = {"status": {"addresses": [{"type": "InternalIP", "address": "10.66.66.66"}]}}
    message = _refused(plugin, "PATCH", rest.path("nodes", node_a) + "/status", body)
    assert "may change only the GPU resources' capacity and allocatable" in message


def test_the_device_plugin_may_not_remove_other_resources_from_its_node(bed: Bed, node_a: str) -> None:
    plugin = _as(bed.device_plugin_kubeconfig(node_a))
    body = {"status": {"allocatable": {"cpu": None, "pods": None}}}
    _refused(plugin, "PATCH", rest.path("nodes", node_a) + "/status", body)
    allocatable = bed.request("GET", rest.path("nodes", node_a))["status"]["allocatable"]
    assert "cpu" in allocatable and "pods" in allocatable
    # What it does write still passes: its GPU resources.
    gpus = {"status": {"allocatable": {"aliyun.com/gpu-count": "1"}}}
    plugin("PATCH", rest.path("nodes", node_a) + "/status", gpus)


def test_the_device_plugin_may_not_add_owners_or_finalizers(bed: Bed, node_a: str) -> None:
    plugin = _as(bed.device_plugin_kubeconfig(node_a))
    owner = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "name": "gone",
        "uid": "00000000-0000-0000-0000-000000000002",
    }
    message = _refused(
        plugin, "PATCH", rest.path("nodes", node_a), {"metadata": {"ownerReferences": [owner]}}
    )
    assert "may not change owner references or finalizers" in message
    pod = rest.path("pods", f"on-{node_a}", NS)
    _refused(plugin, "PATCH", pod, {"metadata": {"finalizers": ["example.com/hold"]}})
    _refused(plugin, "PATCH", pod, {"metadata": {"ownerReferences": [owner]}})


def test_a_dra_driver_may_not_take_another_nodes_slice_name(bed: Bed) -> None:
    a, b = "agents-dra-a", "agents-dra-b"
    dra.install(bed)
    name_b = draslice.slice_name(b, dra.DRIVER)
    try:
        for name in (a, b):
            bed.node(name, 1, 16, group="agents-dra")
        driver_a = client.connect(client.ClientSettings(kubeconfig=str(dra.driver_kubeconfig(bed, a))))
        slices = rest.path("resourceslices", group=dra.GROUP)

        def enforced() -> bool:  # the policy is in force once another node's slice is refused
            probe = draslice.resource_slice(b, dra.DRIVER, 1, []) | {"metadata": {"name": "agents-probe"}}
            try:
                rest.request(driver_a, "POST", slices, body=probe)
            except errors.ForbiddenError:
                return True
            bed.request("DELETE", rest.path("resourceslices", "agents-probe", group=dra.GROUP))
            return False

        bed.wait("the DRA policy in force", enforced, timeout=30)
        squat = draslice.resource_slice(a, dra.DRIVER, 1, [])
        squat["metadata"]["name"] = name_b  # node b's name, node a's nodeName
        with pytest.raises(errors.ForbiddenError) as caught:
            rest.request(driver_a, "POST", slices, body=squat)
        assert "may write only the ResourceSlice named for its node" in caught.value.message
        own = draslice.resource_slice(a, dra.DRIVER, 1, [])  # its own, by its own name: allowed
        rest.request(driver_a, "POST", slices, body=own)
    finally:
        for name in (name_b, draslice.slice_name(a, dra.DRIVER)):
            with contextlib.suppress(errors.ApiError):
                bed.request("DELETE", rest.path("resourceslices", name, group=dra.GROUP))
        dra.uninstall(bed)
