"""Resource names close to a GPU resource name get a warning that names the container and the likely name."""

from __future__ import annotations

import pytest

from webhook.core.admission import lookalikes, verdict
from webhook.core.specs import podread
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("nvidia.com/gpus", "nvidia.com/gpu"),
        ("nvidia.com/GPU", "nvidia.com/gpu"),
        ("aliyun.com/gpumem", "aliyun.com/gpu-mem"),
        ("aliyun.com/gpu-memory", "aliyun.com/gpu-mem"),
        ("aliyun/gpu-mem", "aliyun.com/gpu-mem"),
        ("aliyun.com/gpu-cnt", "aliyun.com/gpu-count"),
        ("amd.com/gpus", "amd.com/gpu"),
    ],
    ids=lambda v: v,
)
def test_typos_of_gpu_resource_names_are_recognised(name, meant):
    assert lookalikes.suggestion(name, NAMES) == meant


@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/gpu",  # the real names are not typos
        "aliyun.com/gpu-mem",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/gpu.shared",  # time-slicing's renamed resource: a real neighbour
        "aliyun.com/gpu-core.percentage",
        "example.com/fpga",
        "cpu",
        "hugepages-2Mi",
    ],
    ids=lambda v: v,
)
def test_real_and_unrelated_names_are_left_alone(name):
    assert lookalikes.suggestion(name, NAMES) is None


def test_configured_names_are_the_ones_suggested():
    names = resources.GpuResourceNames(memory="example.com/vram")
    assert lookalikes.suggestion("example.com/vrams", names) == "example.com/vram"
    assert lookalikes.suggestion("aliyun.com/gpumem", names) is None


def test_one_warning_per_container_and_name_within_the_api_servers_limit():
    spec = {
        "containers": [
            {
                "name": "a" * 80,
                "resources": {"limits": {"nvidia.com/gpus": 1}, "requests": {"nvidia.com/gpus": 1}},
            },
            {"name": "b", "resources": {"requests": {"aliyun.com/gpumem": 2}}},
            {"name": "c", "resources": "wrong"},
            "not a container",
        ],
        "initContainers": 3,
    }
    found = lookalikes.warnings(podread.of_spec(spec, NAMES).view)
    assert found == [
        f'container "{"a" * 19}…": limits[nvidia.com/gpus] is no GPU resource; did you mean nvidia.com/gpu?',
        'container "b": requests[aliyun.com/gpumem] is no GPU resource; did you mean aliyun.com/gpu-mem?',
    ]
    assert all(len(w) <= verdict.WARNING_LIMIT for w in found)


def test_the_verdict_carries_the_warning_and_allows_the_pod():
    pod = {
        "kind": "Pod",
        "spec": {"containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpus": 1}}}]},
    }
    decided = verdict.evaluate(pod, verdict.Policy())
    assert decided.allowed
    assert decided.warnings == (
        'container "t": limits[nvidia.com/gpus] is no GPU resource; did you mean nvidia.com/gpu?',
    )


def test_an_unknown_memory_unit_is_refused_when_the_policy_is_made():
    with pytest.raises(ValueError, match="GiB, MiB or <N>MiB"):
        verdict.Policy(memory_unit="GB")
