"""The node's ResourceSlice kept current through the API (stand-in server): written once per change with
a higher pool generation, left alone when current, written again when deleted (the kubelet wipes a
driver's slices), emptied outside DRA modes, and older slices of the driver on the node removed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dra.conftest import DRIVER, NODE
from webhook.core.node import devices, draslice, mps
from webhook.core.placement import modes
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.dra import nodemode, publisher
from webhook.kube import draobjects, watch

GPUS = (devices.Gpu(0, "GPU-a", 16384, "T4", "7.5"), devices.Gpu(1, "GPU-b", 16384, "T4", "7.5"))
NAME = draslice.slice_name(NODE, DRIVER)


@pytest.fixture
def mode() -> nodemode.NodeMode:
    found = nodemode.NodeMode(GPUS, force_mps=False, dirs=mps.MpsDirs())
    found.labels_changed({modes.MODE_LABEL: "dra"})
    return found


@pytest.fixture
def pub(apiserver: ApiServer, mode: nodemode.NodeMode) -> Iterator[publisher.SlicePublisher]:
    found = publisher.SlicePublisher(
        apiserver.api, driver=DRIVER, node=NODE, gpus=GPUS, granularity=devices.Granularity(), mode=mode
    )
    found.node_uid = "node-uid"
    yield found
    found.stop()


def _slice(apiserver: ApiServer) -> dict[str, Any]:
    found = apiserver.get("resourceslices", NAME)
    assert found is not None
    return found


def test_the_first_round_creates_the_slice_and_a_current_one_is_left_alone(apiserver, pub):
    assert pub.publish() is True
    obj = _slice(apiserver)
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0", "gpu-1"]
    assert obj["spec"]["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert pub.publish() is False
    assert _slice(apiserver)["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]


def test_an_unhealthy_gpu_leaves_the_slice_with_a_higher_generation(apiserver, pub):
    pub.publish()
    pub.set_unhealthy(frozenset({1}))
    assert pub.publish() is True
    obj = _slice(apiserver)
    assert [d["name"] for d in obj["spec"]["devices"]] == ["gpu-0"]
    assert obj["spec"]["pool"]["generation"] == 2


def test_outside_a_dra_mode_the_slice_has_no_devices(apiserver, pub, mode):
    pub.publish()
    mode.labels_changed({modes.MODE_LABEL: "share"})
    pub.publish()
    assert _slice(apiserver)["spec"]["devices"] == []


def test_older_slices_of_the_driver_on_this_node_are_deleted_and_others_kept(apiserver, pub):
    def other(name: str, node: str, driver: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {"driver": driver, "nodeName": node, "pool": {"name": node, "generation": 1}},
        }

    apiserver.put(other("old-name", NODE, DRIVER))
    apiserver.put(other("other-node", "node-2", DRIVER))
    apiserver.put(other("other-driver", NODE, "nic.example.com"))
    pub.publish()
    names = sorted(o["metadata"]["name"] for o in apiserver.objects("resourceslices"))
    assert names == sorted([NAME, "other-node", "other-driver"])


def test_a_deleted_slice_comes_back_through_the_watch(apiserver, pub):
    slices = watch.Watcher(
        apiserver.api, draobjects.slices_path(), pub.on_slice_event, field_selector=pub.field_selector
    )
    pub.start()
    slices.start()
    try:
        apiserver.wait_for(lambda: apiserver.get("resourceslices", NAME), what="the slice")
        apiserver.remove("resourceslices", NAME)
        back = apiserver.wait_for(lambda: apiserver.get("resourceslices", NAME), what="the slice again")
        assert len(back["spec"]["devices"]) == 2
        assert pub.synced.is_set()
    finally:
        slices.stop()


def test_a_failed_write_is_retried(apiserver, pub):
    apiserver.fail_next("create", "resourceslices", status=500)
    pub.retry_s = 0.05
    pub.start()
    apiserver.wait_for(lambda: apiserver.get("resourceslices", NAME), what="the slice after a retry")


def test_an_api_server_that_drops_multiple_allocations_is_named_in_the_log(
    apiserver, pub, monkeypatch, caplog
):
    real = draobjects.create_slice

    def without(api, body):  # what an API server with DRAConsumableCapacity off stores
        for device in body["spec"]["devices"]:
            device.pop("allowMultipleAllocations")
        return real(api, body)

    monkeypatch.setattr(draobjects, "create_slice", without)
    pub.publish()
    assert "consumable capacity (feature gate DRAConsumableCapacity) is off" in caplog.text
