"""The DevicePlugin service over real gRPC on a unix socket, driven by the kubelet stand-in."""

from __future__ import annotations

import grpc
import pytest

from tests.deviceplugin.placed import placed_pod
from webhook.core.node import devices
from webhook.deviceplugin.v1beta1 import api_pb2


def test_registration_dials_back_and_streams_the_full_device_list(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:24")
    kubelet.wait(lambda k: len(k.devices) == 40)
    request = kubelet.registrations[0]
    assert (request.version, request.endpoint, request.resource_name) == (
        "v1beta1",
        "gpushare.sock",
        "aliyun.com/gpu-mem",
    )
    assert kubelet.options == request.options
    assert all(h == "Healthy" for h in kubelet.devices.values())
    gpus = plugin.state.gpus
    assert sorted({devices.decode_device_id(i, gpus, plugin.state.granularity) for i in kubelet.devices}) == [
        0,
        1,
    ]
    assert plugin.server.registered.wait(5)


def test_health_change_streams_the_full_list_again_and_recovers(make_plugin, kubelet):
    plugin = make_plugin("0:4,1:4")
    kubelet.wait(lambda k: len(k.devices) == 8)
    plugin.state.set_unhealthy({1})
    kubelet.wait(lambda k: sum(h == "Unhealthy" for h in k.devices.values()) == 4 and len(k.devices) == 8)
    assert len(kubelet.healthy()) == 4
    plugin.state.set_unhealthy(set())
    kubelet.wait(lambda k: len(k.healthy()) == 8)


def test_allocate_answers_each_container_of_a_multi_container_pod(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16")
    kubelet.wait(lambda k: len(k.devices) == 32)
    pod = placed_pod("multi", [2, 0, 3], {0: {1: 2}, 2: {0: 3}})
    plugin.pods.set([pod])
    envs = kubelet.admit(pod)
    gpus = plugin.state.gpus
    assert envs == [
        {
            "NVIDIA_VISIBLE_DEVICES": gpus[1].uuid,
            "ALIYUN_COM_GPU_MEM_IDX": "1",
            "ALIYUN_COM_GPU_MEM_POD": "5",
            "ALIYUN_COM_GPU_MEM_CONTAINER": "2",
            "ALIYUN_COM_GPU_MEM_DEV": "16",
        },
        {
            "NVIDIA_VISIBLE_DEVICES": gpus[0].uuid,
            "ALIYUN_COM_GPU_MEM_IDX": "0",
            "ALIYUN_COM_GPU_MEM_POD": "5",
            "ALIYUN_COM_GPU_MEM_CONTAINER": "3",
            "ALIYUN_COM_GPU_MEM_DEV": "16",
        },
    ]
    assert plugin.marks.marked == ["default/multi"]


def test_isolation_off_node_label_adds_cgpu_disable(make_plugin, kubelet):
    plugin = make_plugin("0:16")
    plugin.isolation[0] = True
    kubelet.wait(lambda k: len(k.devices) == 16)
    pod = placed_pod("p", [4], {0: {0: 4}})
    plugin.pods.set([pod])
    assert kubelet.admit(pod)[0]["CGPU_DISABLE"] == "true"


def test_no_placed_pod_fails_allocate_with_a_clear_message_not_a_fake_env(make_plugin, kubelet):
    plugin = make_plugin("0:16")
    kubelet.wait(lambda k: len(k.devices) == 16)
    plugin.pods.set([placed_pod("other", [2], {0: {0: 2}})])
    with pytest.raises(grpc.RpcError) as err:
        kubelet.allocate_ids(kubelet.choose(4))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    message = str(err.value.details())
    assert "cannot allocate 4 GiB of aliyun.com/gpu-mem on node node-1" in message
    assert "default/other (its first GPU container asks 2)" in message
    assert plugin.marks.marked == []


def test_pod_that_bypassed_the_extender_is_refused(make_plugin, kubelet):
    plugin = make_plugin("0:16")
    kubelet.wait(lambda k: len(k.devices) == 16)
    rogue = placed_pod("rogue", [4], None)
    placed = placed_pod("placed", [4], {0: {0: 4}}, assume=5)
    plugin.pods.set([rogue, placed])
    with pytest.raises(grpc.RpcError) as err:
        kubelet.admit(rogue)
    assert "default/rogue has no gpushare placement" in str(err.value.details())
    # The refused pod is not matched again: the next Allocate of the same size is the placed pod's.
    assert kubelet.admit(placed)[0]["ALIYUN_COM_GPU_MEM_IDX"] == "0"


@pytest.mark.parametrize(
    ("ids", "needle"),
    [
        (["nope"], "is not of the form <GPU UUID>-_-<n>"),
        (["GPU-unknown-_-0"], "names no GPU of this node"),
        ([], "lists no device IDs"),
    ],
    ids=["garbage", "unknown-uuid", "empty"],
)
def test_bad_device_ids_are_invalid_argument(make_plugin, kubelet, ids, needle):
    plugin = make_plugin("0:4")
    kubelet.wait(lambda k: len(k.devices) == 4)
    plugin.pods.set([placed_pod("p", [1], {0: {0: 1}})])
    with pytest.raises(grpc.RpcError) as err:
        kubelet.allocate_ids(ids)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in str(err.value.details())


def test_device_beyond_the_gpu_memory_is_unknown(make_plugin, kubelet):
    plugin = make_plugin("0:4")
    kubelet.wait(lambda k: len(k.devices) == 4)
    with pytest.raises(grpc.RpcError) as err:
        kubelet.allocate_ids([f"{plugin.state.gpus[0].uuid}-_-4"])
    assert "GPU 0 has no device 4" in str(err.value.details())


def test_allocate_with_no_container_requests_is_invalid(make_plugin, kubelet):
    make_plugin("0:4")
    kubelet.wait(lambda k: len(k.devices) == 4)
    assert kubelet._stub is not None
    with pytest.raises(grpc.RpcError) as err:
        kubelet._stub.Allocate(api_pb2.AllocateRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no container requests" in str(err.value.details())


def test_malformed_placement_is_refused_with_the_annotation_named(make_plugin, kubelet):
    plugin = make_plugin("0:16")
    kubelet.wait(lambda k: len(k.devices) == 16)
    pod = placed_pod("bad", [2], {0: {0: 2}})
    pod["metadata"]["annotations"]["scheduler.framework.gpushare.allocation"] = "{not json"
    plugin.pods.set([pod])
    with pytest.raises(grpc.RpcError) as err:
        kubelet.admit(pod)
    assert "default/bad malformed placement: annotation scheduler.framework.gpushare.allocation" in str(
        err.value.details()
    )


def test_placement_on_a_gpu_this_node_lacks_is_refused(make_plugin, kubelet):
    plugin = make_plugin("0:16")
    kubelet.wait(lambda k: len(k.devices) == 16)
    pod = placed_pod("far", [2], {0: {3: 2}})
    plugin.pods.set([pod])
    with pytest.raises(grpc.RpcError) as err:
        kubelet.admit(pod)
    assert "placed on GPU [3] which this node does not have" in str(err.value.details())
