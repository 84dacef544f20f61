"""The GPU a container gets is the one its pod's placement names (issue 11.3), a waiting Allocate blocks
no other call (11.4), and a plugin restart mid-pod finishes it (11.5): over real gRPC, with the kubelet
stand-in asking GetPreferredAllocation first and serving PodResources List."""

from __future__ import annotations

import contextlib
import threading
import time

import grpc
import pytest

from tests.deviceplugin.placed import placed_pod
from webhook.core.node import devices
from webhook.deviceplugin.v1beta1 import api_pb2, api_pb2_grpc


def _gpu_of(plugin, ids):
    return sorted(devices.device_split(ids, plugin.state.gpus, plugin.state.granularity))


def test_plugin_advertises_preferred_allocation_and_the_kubelet_ids_follow_the_placement(
    make_plugin, kubelet
):
    plugin = make_plugin("0:16,1:16", pod_resources=True)
    kubelet.wait(lambda k: len(k.devices) == 32)
    assert kubelet.options is not None and kubelet.options.get_preferred_allocation_available
    pod = placed_pod("p", [3, 0, 2], {0: {1: 3}, 2: {0: 2}})
    plugin.pods.set([pod])
    envs = kubelet.admit(pod)
    assert [e["ALIYUN_COM_GPU_MEM_IDX"] for e in envs] == ["1", "0"]
    ids = kubelet.assigned["uid-p"]
    assert (_gpu_of(plugin, ids["c0"]), _gpu_of(plugin, ids["c2"])) == ([1], [0])
    assert kubelet.preferred_calls == 2


def test_equal_count_pods_on_different_gpus_in_one_kubelet_batch_each_get_their_own_gpu(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16", pod_resources=True)
    kubelet.wait(lambda k: len(k.devices) == 32)
    # a arrived first, but the kubelet's batch (sorted by creation time after its restart) admits b first.
    a = placed_pod("a", [4], {0: {0: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {1: 4}}, assume=2)
    plugin.pods.set([a, b])
    env_b = kubelet.admit(b)
    env_a = kubelet.admit(a)
    assert (env_a[0]["ALIYUN_COM_GPU_MEM_IDX"], env_b[0]["ALIYUN_COM_GPU_MEM_IDX"]) == ("0", "1")
    assert _gpu_of(plugin, kubelet.assigned["uid-a"]["c0"]) == [0]
    assert _gpu_of(plugin, kubelet.assigned["uid-b"]["c0"]) == [1]
    assert kubelet.lists == 1  # asked only while two pods could be the one (for b; a was then alone)
    assert plugin.marks.marked == ["default/b", "default/a"]


def test_without_pod_resources_device_ids_on_the_placed_gpu_still_pick_the_pod(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16")  # no PodResources client: order and device IDs only
    kubelet.wait(lambda k: len(k.devices) == 32)
    a = placed_pod("a", [4], {0: {0: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {1: 4}}, assume=2)
    plugin.pods.set([a, b])
    on_gpu1 = [i for i in kubelet.free() if _gpu_of(plugin, [i]) == [1]][:4]
    env = dict(kubelet.allocate_ids(on_gpu1).container_responses[0].envs)
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert plugin.marks.marked == ["default/b"]


def test_a_pod_rejected_midway_hands_its_next_gpu_to_no_other_pod(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16")  # no PodResources: the book's pod in progress
    kubelet.wait(lambda k: len(k.devices) == 32)
    a = placed_pod("a", [4, 4], {0: {0: 4}, 1: {1: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {0: 4}}, assume=2)
    plugin.pods.set([a])
    on_gpu0 = [i for i in kubelet.free() if _gpu_of(plugin, [i]) == [0]][:4]
    assert kubelet.allocate_ids(on_gpu0).container_responses[0].envs["ALIYUN_COM_GPU_MEM_IDX"] == "0"
    plugin.pods.set([placed_pod("a", [4, 4], {0: {0: 4}, 1: {1: 4}}, phase="Failed"), b])
    env = kubelet.admit(b)[0]
    assert (env["ALIYUN_COM_GPU_MEM_IDX"], env["ALIYUN_COM_GPU_MEM_POD"]) == ("0", "4")
    assert plugin.marks.marked == ["default/b"]


def test_advice_for_a_pod_rejected_since_goes_to_the_pod_the_kubelet_admits(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16")
    kubelet.wait(lambda k: len(k.devices) == 32)
    a = placed_pod("a", [4], {0: {0: 4}}, assume=1)
    b = placed_pod("b", [4], {0: {0: 4}}, assume=2)
    plugin.pods.set([a, b])
    advised = kubelet.prefer(kubelet.free(), 4)  # for a, which the kubelet then rejects
    plugin.pods.set([placed_pod("a", [4], {0: {0: 4}}, phase="Failed"), b])
    kubelet.allocate_ids(advised)
    assert plugin.marks.marked == ["default/b"]


def test_a_listed_pod_rejected_before_allocate_does_not_take_the_next_pods_gpu(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16", pod_resources=True)
    kubelet.wait(lambda k: len(k.devices) == 32)
    x = placed_pod("x", [4], {0: {0: 4}}, assume=1)
    y = placed_pod("y", [4], {0: {1: 4}}, assume=2)
    plugin.pods.set([x, y])
    with kubelet._lock:
        kubelet.active["uid-x"] = x  # listed, then rejected (say OutOfcpu) before any Allocate
    assert kubelet.admit(y)[0]["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert _gpu_of(plugin, kubelet.assigned["uid-y"]["c0"]) == [1]
    assert plugin.marks.marked == ["default/y"]


def test_a_hundred_waiting_allocates_block_no_other_call(make_plugin, kubelet):
    plugin = make_plugin("0:16,1:16", wait_s=3.0)
    kubelet.wait(lambda k: len(k.devices) == 32)
    assert kubelet._stub is not None
    stub = kubelet._stub
    free = kubelet.free()
    pending = [
        stub.Allocate.future(
            api_pb2.AllocateRequest(container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=[i])]),
            timeout=20,
        )
        for i in free[:16] * 7
    ][:100]
    time.sleep(0.5)  # all 100 are now waiting for a pod asking 1 device
    assert not any(f.done() for f in pending)
    started = time.perf_counter()
    stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    options_s = time.perf_counter() - started
    channel = grpc.insecure_channel(f"unix://{plugin.dir / 'gpushare.sock'}")
    try:
        started = time.perf_counter()
        first = next(iter(api_pb2_grpc.DevicePluginStub(channel).ListAndWatch(api_pb2.Empty(), timeout=5)))
        stream_s = time.perf_counter() - started
    finally:
        channel.close()
    assert len(first.devices) == 32
    # Another Allocate, for a pod that exists, is answered while the 100 still wait.
    pod = placed_pod("p", [2], {0: {1: 2}})
    plugin.pods.set([pod])
    started = time.perf_counter()
    env = dict(kubelet.allocate_ids(kubelet.choose(2), timeout=5).container_responses[0].envs)
    allocate_s = time.perf_counter() - started
    assert env["ALIYUN_COM_GPU_MEM_IDX"] == "1"
    assert options_s < 0.1 and stream_s < 0.1, (options_s, stream_s)
    assert allocate_s < 0.5
    errors = [f.exception() for f in pending]
    assert all(e is not None and e.code() == grpc.StatusCode.FAILED_PRECONDITION for e in errors)


def test_plugin_restart_in_the_middle_of_a_pod_finishes_it_on_the_right_gpus(make_plugin, kubelet, tmp_path):
    first = make_plugin("0:8,1:8", pod_resources=True)
    kubelet.wait(lambda k: len(k.devices) == 16)
    earlier = placed_pod("earlier", [2], {0: {1: 2}}, assume=1)  # arrived first, asks the same 2
    split = placed_pod("split", [2, 2], {0: {0: 2}, 1: {1: 2}}, assume=2)
    done = placed_pod("done", [1], {0: {0: 1}}, assume=3)
    first.pods.set([earlier, split, done])
    kubelet.admit(done)
    # The kubelet allocates split's first container; the plugin dies before the second.
    with kubelet._lock:
        kubelet.active["uid-split"] = split
    ids = kubelet.choose(2)
    env0 = dict(kubelet.allocate_ids(ids).container_responses[0].envs)
    with kubelet._lock:
        kubelet.assigned["uid-split"] = {"c0": ids}
        kubelet.in_use["uid-split"] = set(ids)
    first.server.stop()
    assert first.marks.marked == ["default/done"]
    # A new process: nothing in memory, "done" not yet marked assigned in the API.
    second = make_plugin("0:8,1:8", pod_resources=True)
    second.pods.set([earlier, split, done])
    kubelet.wait(lambda k: len(k.registrations) == 2)
    assert second.kubelet_pods is not None
    view = second.kubelet_pods.view()
    assert view is not None
    assert second.allocator.sync(view) == []
    assert second.marks.marked == ["default/done"]  # finished before the restart: marked now
    ids = kubelet.choose(2)
    env1 = dict(kubelet.allocate_ids(ids).container_responses[0].envs)
    assert (env0["ALIYUN_COM_GPU_MEM_IDX"], env1["ALIYUN_COM_GPU_MEM_IDX"]) == ("0", "1")
    assert second.marks.marked == ["default/done", "default/split"]
    # The pod that arrived first is still fresh and gets its own GPU next.
    assert kubelet.admit(earlier)[0]["ALIYUN_COM_GPU_MEM_IDX"] == "1"


def test_registration_never_waits_behind_allocates(make_plugin, kubelet):
    plugin = make_plugin("0:4", wait_s=1.0)
    kubelet.wait(lambda k: len(k.devices) == 4)
    assert kubelet._stub is not None
    waiting = [
        threading.Thread(target=lambda: _swallow(kubelet.allocate_ids, [kubelet.free()[0]]), daemon=True)
        for _ in range(20)
    ]
    for t in waiting:
        t.start()
    time.sleep(0.2)
    kubelet.restart()  # re-registration dials back and calls GetDevicePluginOptions
    kubelet.wait(lambda k: len(k.registrations) == 2 and len(k.devices) == 4, timeout=0.7)
    assert plugin.server.registrations == 2
    for t in waiting:
        t.join(5)
    time.sleep(1.0)  # the plugin's side of the cancelled calls ends its wait and logs the refusal


def _swallow(fn, *args):
    with contextlib.suppress(grpc.RpcError, ValueError):
        fn(*args)


def test_gpu_init_container_the_kubelet_does_not_list_is_followed_by_the_right_app_container(
    make_plugin, kubelet
):
    plugin = make_plugin("0:16,1:16", pod_resources=True)
    kubelet.wait(lambda k: len(k.devices) == 32)
    # The init container runs where the pod holds most (GPU 0); the first app container asks the same 2.
    pod = placed_pod("p", [2, 3], {0: {1: 2}, 1: {0: 3}}, init_gpu_mem=[2])
    plugin.pods.set([pod])
    envs = kubelet.admit(pod)
    assert [e["ALIYUN_COM_GPU_MEM_IDX"] for e in envs] == ["0", "1", "0"]
    assert plugin.marks.marked == ["default/p"]


def test_a_pod_that_bypassed_the_extender_is_refused_without_waiting(make_plugin, kubelet):
    plugin = make_plugin("0:16", wait_s=3.0, pod_resources=True)
    kubelet.wait(lambda k: len(k.devices) == 16)
    rogue = placed_pod("rogue", [4], None)
    plugin.pods.set([rogue])
    started = time.perf_counter()
    with pytest.raises(grpc.RpcError, match="has no gpushare placement"):
        kubelet.admit(rogue)
    assert time.perf_counter() - started < 1.0


def test_a_container_split_unevenly_over_two_gpus_is_limited_to_the_least_it_holds_on_either(
    make_plugin, kubelet
):
    # The extender's split of [6, 2] over 2 GPUs (4 GiB each): container 0 holds 4 on GPU 0 and 2 on
    # GPU 1. A per-GPU limit of 4 would let it take on GPU 1 memory that container 1 holds.
    plugin = make_plugin("0:16,1:16")
    kubelet.wait(lambda k: len(k.devices) == 32)
    labels = {"aliyun.com/gpu-count": "2"}
    pod = placed_pod("uneven", [6, 2], {0: {0: 4, 1: 2}, 1: {1: 2}}, labels=labels)
    plugin.pods.set([pod])
    envs = kubelet.admit(pod)
    assert [env["ALIYUN_COM_GPU_MEM_CONTAINER"] for env in envs] == ["2", "2"]
    assert [env["ALIYUN_COM_GPU_MEM_IDX"] for env in envs] == ["0,1", "1"]
