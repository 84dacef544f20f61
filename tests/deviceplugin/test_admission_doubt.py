"""Which container the kubelet is admitting, when the plugin's own book cannot tell: several pods wait
(even placed on the same GPUs: their env and their next containers differ), or none does (a kubelet
restarted mid-admission asks again for a container already answered). The kubelet's PodResources list
decides. The allocators are driven directly, with the pods, the assigned marks and the kubelet's list
stood in; the kubelet admits pods in its own order (creation time), not the order our watch saw them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from tests.deviceplugin.conftest import ListPods, Marks
from tests.deviceplugin.placed import card_pod, placed_pod
from webhook.core.node import devices, matching, mps, podviews
from webhook.core.wire import resources
from webhook.deviceplugin import allocator, state, wholecards

BOTH_GPUS = [f"GPU-{g}-_-{n}" for g in (0, 1) for n in range(16)]


View = Callable[[Mapping[str, Any], int], podviews.PodView | None]


class Pods(ListPods):
    def __init__(self, view: View) -> None:
        super().__init__()
        self.view = view

    def snapshot(self) -> tuple[int, list[podviews.PodView]]:
        with self._changed:
            views = [self.view(p, n) for n, p in enumerate(self.pods)]
            return self.version, [v for v in views if v is not None]


class KubeletList:
    """PodResources List: pod key -> container -> device IDs (empty: admitting it, none yet)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, tuple[str, ...]]] = {}
        self.lists = 0

    def view(self) -> matching.KubeletView:
        self.lists += 1
        return matching.KubeletView({k: dict(v) for k, v in self.pods.items()})


def _state() -> state.DeviceState:
    gpus = [devices.Gpu(i, f"GPU-{i}", 16 * 1024) for i in range(2)]
    return state.DeviceState(gpus, devices.Granularity.parse("GiB"))


Made = TypeVar("Made", allocator.Allocator, wholecards.CardAllocator)


def made(kind: type[Made], view: View, kubelet: KubeletList) -> tuple[Made, Pods, Marks]:
    """An allocator of `kind` over two 16 GiB GPUs, its pods read with `view`."""
    pods, marks = Pods(view), Marks()
    plugin = kind(
        _state(),
        pods,
        marks,
        isolation_disabled=lambda: False,
        node_name="node-1",
        wait_s=0.2,
        kubelet=kubelet,
    )
    return plugin, pods, marks


def shares(kubelet: KubeletList) -> tuple[allocator.Allocator, Pods, Marks]:
    return made(allocator.Allocator, podviews.pod_view, kubelet)


def test_pods_placed_on_the_same_gpu_each_get_their_own_compute_share():
    kubelet = KubeletList()
    plugin, pods, _ = shares(kubelet)
    plugin.mps_dirs = mps.MpsDirs
    first = placed_pod("first", [4], {0: {0: 4}}, assume=1)  # seen first, asks 20% of the SMs
    first["metadata"]["annotations"][mps.COMPUTE_PERCENT_ANNOTATION] = "20"
    second = placed_pod("second", [4], {0: {0: 4}}, assume=2)  # asks 80%
    second["metadata"]["annotations"][mps.COMPUTE_PERCENT_ANNOTATION] = "80"
    pods.set([first, second])
    kubelet.pods = {"default/second": {"c0": ()}}  # the kubelet admits second
    env = plugin.allocate(plugin.prefer(BOTH_GPUS, [], 4)).envs
    assert env[mps.ENV_THREAD_PERCENTAGE] == "80"
    assert kubelet.lists >= 1


def test_the_pod_total_and_the_assigned_mark_go_to_the_pod_being_admitted():
    kubelet = KubeletList()
    plugin, pods, marks = shares(kubelet)
    first = placed_pod("first", [4, 4], {0: {0: 4}, 1: {1: 4}}, assume=1)  # 8 in all
    second = placed_pod("second", [4], {0: {0: 4}}, assume=2)
    pods.set([first, second])
    kubelet.pods = {"default/second": {"c0": ()}}
    env = plugin.allocate(plugin.prefer(BOTH_GPUS, [], 4)).envs
    assert env[resources.ENV_MEM_POD] == "4"
    assert marks.marked == ["default/second"]


def test_each_pods_next_container_gets_the_gpu_reserved_for_it():
    # first: 4 on GPU 0, 2 on GPU 1; second: 4 and 2 on GPU 0 (the extender kept GPU 1's last 2 for
    # first). Served by arrival, second's 2 went to GPU 1 as well: 2 more than reserved there.
    kubelet = KubeletList()
    plugin, pods, _ = shares(kubelet)
    first = placed_pod("first", [4, 2], {0: {0: 4}, 1: {1: 2}}, assume=1)
    second = placed_pod("second", [4, 2], {0: {0: 4}, 1: {0: 2}}, assume=2)
    pods.set([first, second])
    used: set[str] = set()
    got: dict[tuple[str, str], str] = {}

    def admit(name: str) -> None:
        listed = kubelet.pods[f"default/{name}"] = {"c0": (), "c1": ()}
        for container, size in (("c0", 4), ("c1", 2)):
            ids = plugin.prefer([i for i in BOTH_GPUS if i not in used], [], size)
            got[(name, container)] = plugin.allocate(ids).envs[resources.ENV_MEM_IDX]
            used.update(ids)
            listed[container] = tuple(ids)

    admit("second")
    plugin.sync(kubelet.view())  # the reconciler's round between the two admissions
    admit("first")
    assert got == {("second", "c0"): "0", ("second", "c1"): "0", ("first", "c0"): "0", ("first", "c1"): "1"}


def test_a_whole_card_asked_again_after_a_kubelet_restart_is_answered_again():
    kubelet = KubeletList()
    plugin, pods, _ = made(wholecards.CardAllocator, podviews.card_view, kubelet)
    pods.set([card_pod("p", {0: {1: 16}})])
    cards = ["GPU-0", "GPU-1"]
    assert plugin.prefer(cards, [], 1) == ["GPU-1"]
    assert plugin.allocate(["GPU-1"]).envs[resources.ENV_VISIBLE_DEVICES] == "GPU-1"
    # Restarted before its checkpoint held the card: it lists the container without devices, asks again.
    kubelet.pods = {"default/p": {"c0": ()}}
    assert plugin.prefer(cards, [], 1) == ["GPU-1"]
    assert plugin.allocate(["GPU-1"]).envs[resources.ENV_VISIBLE_DEVICES] == "GPU-1"
    # And a share asked again the same way, as before.
    plugin_mem, mem_pods, _ = shares(KubeletList())
    mem_pods.set([placed_pod("q", [4], {0: {1: 4}})])
    ids = plugin_mem.prefer(BOTH_GPUS, [], 4)
    assert plugin_mem.allocate(ids).envs[resources.ENV_MEM_IDX] == "1"
    assert isinstance(plugin_mem.kubelet, KubeletList)
    plugin_mem.kubelet.pods = {"default/q": {"c0": ()}}
    assert plugin_mem.allocate(plugin_mem.prefer(BOTH_GPUS, [], 4)).envs[resources.ENV_MEM_IDX] == "1"
