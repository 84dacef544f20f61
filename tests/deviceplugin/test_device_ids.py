"""Device IDs the plugin never listed: decoding accepts only the exact form it lists, Allocate refuses
the others as INVALID_ARGUMENT (never UNKNOWN), GetPreferredAllocation skips them, and an Allocate
refused for any of its container requests records nothing for the others."""

from __future__ import annotations

import grpc
import pytest

from tests.deviceplugin.placed import placed_pod
from webhook.core.node import devices
from webhook.deviceplugin.v1beta1 import api_pb2

GPUS = [devices.Gpu(0, "GPU-a", 4096), devices.Gpu(1, "GPU-b", 4096)]
GIB = devices.Granularity()


@pytest.mark.parametrize("tail", ["0", "3"])
def test_the_ids_the_plugin_lists_decode_to_their_gpu(tail):
    assert devices.decode_device_id(f"GPU-b-_-{tail}", GPUS, GIB) == 1
    assert devices.device_indexer(GPUS, GIB)(f"GPU-b-_-{tail}") == 1


@pytest.mark.parametrize(
    "tail",
    ["00", "01", "+1", "1 ", " 1", "1\n", "\u0663", "", "9" * 5000],
    ids=[
        "zero-zero",
        "leading-zero",
        "sign",
        "space-after",
        "space-before",
        "newline",
        "arabic",
        "empty",
        "huge",
    ],
)
def test_any_other_spelling_of_a_device_number_is_an_id_never_listed(tail):
    ident = f"GPU-a-_-{tail}"
    with pytest.raises(devices.DeviceError) as caught:
        devices.decode_device_id(ident, GPUS, GIB)
    assert len(str(caught.value)) < 200  # quotes a bounded part of the ID
    with pytest.raises(devices.DeviceError):
        devices.device_indexer(GPUS, GIB)(ident)


def _allocate(kubelet, *requests: list[str]) -> grpc.RpcError:
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in requests]
    )
    with pytest.raises(grpc.RpcError) as caught:
        kubelet._stub.Allocate(request, timeout=5)
    return caught.value


@pytest.mark.parametrize("odd", ["-_-00", "-_-" + "9" * 5000], ids=["zero-zero", "huge"])
def test_allocate_refuses_an_id_never_listed_as_invalid_argument(make_plugin, kubelet, odd):
    plugin = make_plugin("0:4,1:4")
    kubelet.wait(lambda k: len(k.devices) == 8)
    plugin.pods.set([placed_pod("p", [2], {0: {0: 2}})])
    uuid = plugin.state.gpus[0].uuid
    err = _allocate(kubelet, [f"{uuid}-_-0", uuid + odd])
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not of the form <GPU UUID>-_-<n>" in str(err.details())
    assert plugin.allocator.book.progress == {}


def test_get_preferred_allocation_skips_ids_never_listed(make_plugin, kubelet):
    plugin = make_plugin("0:4,1:4")
    kubelet.wait(lambda k: len(k.devices) == 8)
    plugin.pods.set([placed_pod("p", [2], {0: {1: 2}})])
    uuid = plugin.state.gpus[1].uuid
    odd = [f"{uuid}-_-" + "9" * 5000, f"{uuid}-_-00", f"{uuid}-_-01"]
    assert kubelet.prefer([*odd, *kubelet.free()], 2) == [f"{uuid}-_-0", f"{uuid}-_-1"]


@pytest.mark.parametrize("second", ["bogus", "repeated"])
def test_an_allocate_refused_for_a_later_container_records_none_of_them(make_plugin, kubelet, second):
    plugin = make_plugin("0:16,1:16")
    kubelet.wait(lambda k: len(k.devices) == 32)
    pod = placed_pod("m", [2, 3], {0: {0: 2}, 1: {0: 3}})
    plugin.pods.set([pod])
    ids = [f"{plugin.state.gpus[0].uuid}-_-{j}" for j in range(5)]
    later = [ids[2], "bogus"] if second == "bogus" else ids[1:4]  # ids[1] is the first request's too
    err = _allocate(kubelet, ids[:2], later)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    book = plugin.allocator.book
    assert (book.progress, book.current, book.given, plugin.marks.marked) == ({}, None, {}, [])
    # The kubelet fails only that RPC: the pod is still admitted as a whole afterwards.
    assert [env["ALIYUN_COM_GPU_MEM_CONTAINER"] for env in kubelet.admit(pod)] == ["2", "3"]
    assert plugin.marks.marked == ["default/m"]
