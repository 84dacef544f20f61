"""Quota objects that name GPU resources so that nothing is counted get a warning naming the spelling that
counts; those that count (and everything not about GPUs) get none."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.admission import quotas
from webhook.core.wire import resources

NAMES = resources.GpuResourceNames()


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (
            "limits.aliyun.com/gpu-mem",
            "counts aliyun.com/gpu-mem only as requests.aliyun.com/gpu-mem (an extended",
        ),
        ("aliyun.com/gpu-mem", "this key limits nothing; write requests.aliyun.com/gpu-mem"),
        ("limits.nvidia.com/gpu", "write requests.nvidia.com/gpu"),
        ("nvidia.com/gpu", "write requests.nvidia.com/gpu"),
        (
            "requests.aliyun.com/gpumem",
            "aliyun.com/gpumem is no GPU resource, so nothing is counted; did you mean "
            "requests.aliyun.com/gpu-mem?",
        ),
        ("requests.nvidia.com/gpus", "did you mean requests.nvidia.com/gpu?"),
        ("limits.aliyun.com/gpumem", "write requests.aliyun.com/gpu-mem"),
        (
            "requests.aliyun.com/gpu-count",
            "is a pod label (the GPUs a share is split over) that no pod requests",
        ),
    ],
    ids=lambda v: v if "/" in v and " " not in v else "",
)
def test_a_quota_key_that_counts_nothing_is_named_with_the_one_that_counts(key: str, says: str) -> None:
    [warning] = quotas.hard_warnings({key: "8"}, NAMES)
    assert warning.startswith(f"spec.hard[{key}]: ")
    assert says in warning


@pytest.mark.parametrize(
    "key",
    [
        "requests.aliyun.com/gpu-mem",
        "requests.nvidia.com/gpu",
        "requests.nvidia.com/mig-1g.5gb",
        "requests.cpu",
        "limits.memory",
        "pods",
        "count/pods",
        "gpushare-memory.deviceclass.resource.k8s.io/devices",
        "requests.example.com/fpga",
    ],
)
def test_a_key_that_counts_or_is_not_about_gpus_gets_no_warning(key: str) -> None:
    assert quotas.hard_warnings({key: "8"}, NAMES) == []


def _queue(covered: list[Any], flavored: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "team-a"},
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": covered,
                    "flavors": [
                        {"name": "gpu-share", "resources": [{"name": n, "nominalQuota": 1} for n in flavored]}
                    ],
                }
            ]
        },
    }


def test_a_cluster_queues_misspelt_gpu_resources_are_named_where_they_are() -> None:
    found = quotas.warnings(_queue(["cpu", "aliyun.com/gpu-memory"], ["cpu", "aliyun.com/gpu-memory"]), NAMES)
    says = "aliyun.com/gpu-memory is no GPU resource, so Kueue counts it for no pod; "
    says += "did you mean aliyun.com/gpu-mem?"
    assert found == [
        f"spec.resourceGroups[0].coveredResources[1]: {says}",
        f"spec.resourceGroups[0].flavors[0].resources[1].name: {says}",
    ]
    assert quotas.warnings(_queue(["aliyun.com/gpu-mem"], ["aliyun.com/gpu-mem"]), NAMES) == []


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "ResourceQuota", "spec": {"hard": ["x"]}},
        {"apiVersion": "v1", "kind": "ResourceQuota", "spec": "x"},
        {"apiVersion": "v1", "kind": "ResourceQuota", "spec": {"hard": {1: 2, None: "x"}}},
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "spec": {"resourceGroups": "x"}},
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "spec": {"resourceGroups": [1, {"flavors": [2, {"resources": [3]}]}]},
        },
        {
            "apiVersion": "other/v1",
            "kind": "ClusterQueue",
            "spec": {"resourceGroups": [{"coveredResources": ["aliyun.com/gpumem"]}]},
        },
        {"apiVersion": "v1", "kind": "Pod", "spec": {"hard": {"limits.aliyun.com/gpu-mem": "1"}}},
    ],
    ids=["hard-list", "spec-text", "odd-keys", "groups-text", "odd-members", "other-group", "a-pod"],
)
def test_wrong_shapes_and_other_kinds_get_no_warning_and_no_error(obj: dict[str, Any]) -> None:
    assert quotas.warnings(obj, NAMES) == []


def test_the_warning_shows_a_hostile_key_escaped_and_cut() -> None:
    [warning] = quotas.hard_warnings({"limits.aliyun.com/gpu-mem\n" + "x" * 500: "1"}, NAMES) or [""]
    assert "\n" not in warning and len(warning) < 400
