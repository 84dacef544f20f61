"""Whole cards beside shares: the whole plugin (app.Plugin) against the API stand-in serves a second
endpoint, one device per GPU, and the kubelet stand-in registers, lists, asks and allocates over the real
gRPC, with its PodResources API on."""

from __future__ import annotations

import time
from typing import Any

import grpc
import pytest

from tests.deviceplugin.conftest import Start
from tests.deviceplugin.placed import card_pod
from webhook.cli.serve import device_plugin as serve_device_plugin
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.deviceplugin import app

CARDS = resources.NVIDIA_GPU


@pytest.fixture
def start(whole_plugin: Start) -> Start:
    return whole_plugin


def _card_pod(
    apiserver: ApiServer, name: str, placed: dict[int, dict[int, int]] | None, *counts: int, assume: int = 1
) -> dict[str, Any]:
    """A pod asking `counts` whole cards per container, with the extender's placement (None: bypassed)."""
    return apiserver.put(card_pod(name, placed, *counts, assume=assume))


def _uuids(plugin: app.Plugin) -> list[str]:
    """The card IDs: the fake GPUs' UUIDs, by index."""
    return [g.uuid for g in plugin.state.gpus]


def _seen(apiserver: ApiServer, plugin: app.Plugin, count: int) -> None:
    apiserver.wait_for(lambda: len(plugin.card_pods.snapshot()[1]) == count, what="pods in the watch")


def test_the_plugin_registers_whole_cards_on_their_own_socket_one_device_per_gpu(start):
    plugin, kubelet = start()
    uuid = _uuids(plugin)
    cards = kubelet.resource(CARDS)
    assert [(r.resource_name, r.endpoint) for r in cards.registrations] == [
        (CARDS, "gpushare-wholecard.sock")
    ]
    assert [(r.resource_name, r.endpoint) for r in kubelet.registrations] == [
        (resources.GPU_MEMORY, "gpushare.sock")
    ]
    assert cards.devices == {uuid[0]: "Healthy", uuid[1]: "Healthy", uuid[2]: "Healthy"}
    assert len(kubelet.healthy()) == 48  # the gpu-mem endpoint is untouched
    assert cards.options is not None and cards.options.get_preferred_allocation_available


def test_an_unhealthy_gpu_is_an_unhealthy_card(start, tmp_path):
    health = tmp_path / "unhealthy"
    health.write_text("1")
    plugin, kubelet = start(health_file=health)
    uuid = _uuids(plugin)
    cards = kubelet.resource(CARDS)
    cards.wait(lambda k: k.devices.get(uuid[1]) == "Unhealthy")
    assert cards.healthy() == sorted([uuid[0], uuid[2]])


def test_preferred_allocation_steers_the_kubelet_to_the_placed_gpus(start, apiserver):
    plugin, kubelet = start()
    _card_pod(apiserver, "train", {0: {2: 16, 1: 16}}, 2)
    _seen(apiserver, plugin, 1)
    uuid = _uuids(plugin)
    assert kubelet.resource(CARDS).prefer([uuid[0], uuid[1], uuid[2]], 2) == [uuid[1], uuid[2]]


def test_allocate_gives_a_placed_pod_exactly_its_gpus_and_marks_it_assigned(start, apiserver):
    plugin, kubelet = start()
    pod = _card_pod(apiserver, "train", {0: {0: 16, 2: 16}}, 2)
    _seen(apiserver, plugin, 1)
    uuid = _uuids(plugin)
    (env,) = kubelet.resource(CARDS).admit(pod)
    assert env[resources.ENV_VISIBLE_DEVICES] == f"{uuid[0]},{uuid[2]}"
    assert env[resources.ENV_MEM_IDX] == "0,2"
    assert (env[resources.ENV_MEM_CONTAINER], env[resources.ENV_MEM_DEV]) == ("16", "16")
    assert kubelet.resource(CARDS).in_use[pod["metadata"]["uid"]] == {uuid[0], uuid[2]}
    apiserver.wait_for(lambda: _assigned(apiserver, "train"), what="ALIYUN_COM_GPU_MEM_ASSIGNED=true")


def test_two_one_card_pods_admitted_against_arrival_order_each_get_their_own_gpu(start, apiserver):
    plugin, kubelet = start()
    first = _card_pod(apiserver, "first", {0: {0: 16}}, assume=1)
    second = _card_pod(apiserver, "second", {0: {1: 16}}, assume=2)
    _seen(apiserver, plugin, 2)
    uuid = _uuids(plugin)
    cards = kubelet.resource(CARDS)
    # The kubelet admits the later pod first: its PodResources list names it, so no GPU is swapped.
    (env_second,) = cards.admit(second)
    (env_first,) = cards.admit(first)
    assert env_second[resources.ENV_VISIBLE_DEVICES] == uuid[1]
    assert env_first[resources.ENV_VISIBLE_DEVICES] == uuid[0]
    assert cards.in_use == {"uid-second": {uuid[1]}, "uid-first": {uuid[0]}}


def test_allocate_without_advice_takes_the_pod_placed_on_the_cards_the_kubelet_passed(start, apiserver):
    plugin, kubelet = start(pod_resources_socket=None)
    _card_pod(apiserver, "first", {0: {0: 16}}, assume=1)
    _card_pod(apiserver, "second", {0: {1: 16}}, assume=2)
    _seen(apiserver, plugin, 2)
    uuid = _uuids(plugin)
    response = kubelet.resource(CARDS).allocate_ids([uuid[1]])
    assert response.container_responses[0].envs[resources.ENV_VISIBLE_DEVICES] == uuid[1]
    assert plugin.card_allocator.book.progress == {"uid-second": 1}


def test_after_a_plugin_restart_finished_card_pods_are_marked_and_a_pod_part_way_goes_on(start, apiserver):
    first, kubelet = start(fake_gpus="0:16,1:16,2:16,3:16")
    earlier = _card_pod(apiserver, "earlier", {0: {2: 16}}, assume=1)  # arrived first, asks 1 card too
    split = _card_pod(apiserver, "split", {0: {0: 16}, 1: {1: 16}}, 1, 1, assume=2)
    done = _card_pod(apiserver, "done", {0: {3: 16}}, assume=3)
    _seen(apiserver, first, 3)
    uuid = _uuids(first)
    cards = kubelet.resource(CARDS)
    # The kubelet allocates split's first container; the plugin dies before the second.
    with cards._lock:
        cards.active["uid-split"] = split
    ids = cards.choose(1)
    env0 = dict(cards.allocate_ids(ids).container_responses[0].envs)
    with cards._lock:
        cards.assigned["uid-split"] = {"c0": ids}
        cards.in_use["uid-split"] = set(ids)
    first.stop()
    # The old process answered "done" too, and died before marking it assigned: only the kubelet's
    # checkpoint (its PodResources list) knows.
    with cards._lock:
        cards.active["uid-done"] = done
        cards.assigned["uid-done"] = {"c0": [uuid[3]]}
        cards.in_use["uid-done"] = {uuid[3]}
    assert not _assigned(apiserver, "done") and not _assigned(apiserver, "split")
    second, _ = start(fake_gpus="0:16,1:16,2:16,3:16", kubelet=kubelet)
    assert second.card_allocator.book.progress == {"uid-split": 1, "uid-done": 1}
    apiserver.wait_for(lambda: _assigned(apiserver, "done"), what="done marked assigned after the restart")
    env1 = dict(cards.allocate_ids(cards.choose(1)).container_responses[0].envs)
    assert (env0[resources.ENV_MEM_IDX], env1[resources.ENV_MEM_IDX]) == ("0", "1")
    apiserver.wait_for(lambda: _assigned(apiserver, "split"), what="split marked assigned")
    # The pod that arrived first is still waiting and gets its own card.
    assert cards.admit(earlier)[0][resources.ENV_VISIBLE_DEVICES] == uuid[2]


def _assigned(apiserver: ApiServer, name: str) -> bool:
    notes = (apiserver.get("pods", name, "default") or {})["metadata"]["annotations"]
    return bool(notes.get(resources.ANN_MEM_ASSIGNED) == "true")


def test_a_card_pod_that_bypassed_the_extender_is_refused_naming_the_problem(start, apiserver):
    plugin, kubelet = start()
    rogue = _card_pod(apiserver, "rogue", None)
    _seen(apiserver, plugin, 1)
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.resource(CARDS).admit(rogue)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert str(caught.value.details()) == (
        "gpushare: cannot allocate 1 whole GPU of nvidia.com/gpu on node node-1: pod default/rogue has no "
        "gpushare placement (it was not bound by the gpushare extender)"
    )


def test_a_card_id_that_names_no_gpu_of_the_node_is_an_invalid_request(start):
    _, kubelet = start()
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.resource(CARDS).allocate_ids(["GPU-elsewhere"])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "device ID 'GPU-elsewhere' names no GPU of this node" in str(caught.value.details())


def test_a_kubelet_restart_registers_both_endpoints_again(start):
    plugin, kubelet = start()
    kubelet.restart()
    kubelet.wait(lambda k: len(k.registrations) == 2 and len(k.resource(CARDS).registrations) == 2, 10)
    kubelet.wait(lambda k: len(k.resource(CARDS).healthy()) == 3 and len(k.healthy()) == 48)
    # Register returns on the plugin's side just after the kubelet has recorded it (and may have opened
    # ListAndWatch): ready follows within moments, not necessarily before this line.
    deadline = time.monotonic() + 5
    while not plugin.ready() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert plugin.ready()


def test_a_default_node_advertises_no_cards_until_its_label_says_share(start, apiserver):
    _, kubelet = start({modes.MODE_LABEL: "default"})
    cards = kubelet.resource(CARDS)
    assert cards.devices == {}  # NVIDIA's plugin serves the cards on this node
    apiserver.edit("nodes", "node-1", {"metadata": {"labels": {modes.MODE_LABEL: "cgpu"}}})
    cards.wait(lambda k: len(k.healthy()) == 3)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("gpu", "--whole-card-resource: 'gpu' is not an extended resource name"),
        ("aliyun.com/gpu-mem", "the GPU memory protocol's own resource, not whole cards"),
        ("kubernetes.io/gpu", "in the kubernetes.io domain"),
    ],
    ids=["no-domain", "gpu-mem", "kubernetes-domain"],
)
def test_a_whole_card_resource_the_kubelet_would_refuse_exits_2_with_the_reason(
    monkeypatch, capsys, value, needle
):
    monkeypatch.setenv("NODE_NAME", "n")
    assert serve_device_plugin.main(["--fake-gpus", "0:16", "--whole-card-resource", value]) == 2
    assert needle in capsys.readouterr().err
