"""Tests for webhook.core.placement.wholecards: whole-card demand, placement beside shares,
the mixed-pod rule."""

from __future__ import annotations

from typing import Any

import pytest

from tests.core import reads
from webhook.core.placement import accounting, allocator, wholecards
from webhook.core.placement import annotations as ann
from webhook.core.specs import demand
from webhook.core.specs.demand import Demand
from webhook.core.specs.finding import Finding
from webhook.core.wire import resources

CARD, MEM = resources.NVIDIA_GPU, resources.GPU_MEMORY
NAMES = resources.GpuResourceNames()


def cards(name: str, n: str) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {CARD: n}}}


def share(name: str, n: str) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {MEM: n}}}


def gpus(*used: int, memory: int = 16, unhealthy: tuple[int, ...] = ()) -> tuple[accounting.Gpu, ...]:
    return tuple(accounting.Gpu(i, memory, u, i not in unhealthy) for i, u in enumerate(used))


def test_a_pod_counts_whole_cards_per_container_in_spec_order():
    pod = {"spec": {"containers": [cards("a", "2"), {"name": "b"}, cards("c", "1")]}}
    asked = demand.pod_cards(pod, NAMES)
    assert asked.containers == (2, 0, 1) and asked.total == 3 and asked.asks()


def test_a_pod_without_whole_cards_asks_none():
    assert not demand.pod_cards({"spec": {"containers": [share("a", "3")]}}, NAMES).asks()


def test_the_configured_whole_card_resource_is_the_one_counted():
    names = resources.GpuResourceNames(whole_card="example.com/gpu")
    pod = {
        "spec": {"containers": [{"name": "a", "resources": {"limits": {"example.com/gpu": "2", CARD: "1"}}}]}
    }
    assert demand.pod_cards(pod, names).containers == (2,)


@pytest.mark.parametrize(
    ("value", "words"),
    [("0.5", "only whole GPUs are possible"), ("-1", "cannot be negative"), ("two", "not a valid quantity")],
    ids=["fraction", "negative", "not a number"],
)
def test_a_whole_card_count_that_is_no_whole_number_is_refused_naming_the_field(value: str, words: str):
    pod = {"spec": {"containers": [cards("train", value)]}}
    with pytest.raises(Finding, match=words) as err:
        demand.pod_cards(pod, NAMES)
    assert 'spec.containers[0].resources.limits[nvidia.com/gpu] (container "train")' in str(err.value)


def test_a_pod_with_whole_cards_in_one_container_and_a_share_in_another_is_refused():
    pod = {"spec": {"containers": [cards("train", "1"), share("sidecar", "2")]}}
    with pytest.raises(Finding) as err:
        demand.pod_cards(pod, NAMES)
    assert str(err.value) == (
        'spec.containers[0].resources.limits[nvidia.com/gpu] (container "train"): asks for whole GPUs '
        '(nvidia.com/gpu) while container "sidecar" asks for a share of GPU memory (aliyun.com/gpu-mem); '
        "one pod takes whole GPUs or shares, not both; fix: put them in two pods, or ask aliyun.com/gpu-mem "
        "in every container"
    )


def test_the_webhook_rules_deny_the_mixed_pod_with_the_same_words():
    spec = {"containers": [cards("train", "1")], "initContainers": [share("warm", "2")]}
    (found,) = reads.findings({}, spec, "spec.template", NAMES)
    assert found.path == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert found.container == "train" and 'container "warm" asks for a share' in found.problem


def test_the_rules_report_one_container_asking_both_once_not_as_a_mixed_pod():
    spec = {"containers": [{"name": "x", "resources": {"limits": {CARD: "1", MEM: "2"}}}]}
    found = reads.findings({}, spec, "", NAMES)
    assert [v.path for v in found] == ["spec.containers[0].resources.limits"]


def test_cards_go_to_the_lowest_index_gpus_that_hold_nothing_with_their_whole_memory():
    pod = Demand((1, 2))
    result = wholecards.fit(pod, gpus(3, 0, 0, 0, 0))
    assert isinstance(result, allocator.Fit)
    assert result.allocation.containers == {0: {1: 16}, 1: {2: 16, 3: 16}}
    assert result.device_memory == 16


def test_a_gpu_holding_any_share_never_takes_a_card():
    result = wholecards.fit(Demand((2,)), gpus(1, 0, 15))
    assert isinstance(result, allocator.NoFit)
    assert result.reason == (
        "pod asks for 2 whole GPUs, 1 of the node's 3 healthy GPUs hold nothing "
        "(a whole GPU never shares with gpu-mem pods)"
    )
    assert not wholecards.unresolvable(gpus(1, 0, 15), Demand((2,)))


def test_unhealthy_gpus_never_take_a_card_and_too_few_healthy_ones_cannot_be_helped():
    node = gpus(0, 0, unhealthy=(0,))
    result = wholecards.fit(Demand((2,)), node)
    assert isinstance(result, allocator.NoFit)
    assert result.reason == "pod asks for 2 whole GPUs, node has 1 healthy"
    assert wholecards.unresolvable(node, Demand((2,)))


def test_an_init_container_asking_more_cards_than_the_pod_holds_cannot_be_placed():
    pod = Demand((1,), init_containers=(2,))
    result = wholecards.fit(pod, gpus(0, 0))
    assert isinstance(result, allocator.NoFit) and "an init container asks for 2 whole GPUs" in result.reason
    assert wholecards.unresolvable(gpus(0, 0), pod)


def test_a_placed_card_fills_its_gpu_in_the_ledger_so_no_share_fits_there():
    placed = wholecards.fit(Demand((1,)), gpus(0, 0))
    assert isinstance(placed, allocator.Fit)
    ledger = accounting.Ledger("n")
    ledger.set_devices(ann.NodeDevices("GiB", (ann.GpuDevice(0, "", 16), ann.GpuDevice(1, "", 16))))
    ledger.place(accounting.PodShare("ns/card", "u", placed.allocation))
    assert [g.free for g in ledger.gpus()] == [0, 16]
    share = allocator.fit(Demand((16,)), ledger.gpus())
    assert isinstance(share, allocator.Fit) and share.allocation.gpus() == (1,)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("gpu", "is not an extended resource name"),
        ("Nvidia.com/gpu", "is not an extended resource name"),
        ("kubernetes.io/gpu", "kubernetes.io domain"),
        ("aliyun.com/gpu-mem", "the GPU memory protocol's own resource"),
    ],
    ids=["no domain", "upper-case domain", "reserved domain", "the memory resource"],
)
def test_a_whole_card_resource_name_that_cannot_work_is_refused(text: str, words: str):
    with pytest.raises(ValueError, match=words):
        resources.whole_card_resource(text)
