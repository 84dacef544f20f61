"""Reading a claim's allocation at NodePrepareResources: our results only, consumed memory in units (the
whole GPU when none is named), one set of edits per request, and a clear refusal of what cannot be ours."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.node import devices, drashares, mps
from webhook.core.wire import resources

DRIVER = "gpushare.aliyun.com"
NODE = "node-1"
GPUS = (devices.Gpu(0, "GPU-a", 16384), devices.Gpu(1, "GPU-b", 16384))
GIB = devices.Granularity()


def claim(*results: dict[str, Any], uid: str = "u1") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "c", "uid": uid},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(device: str, memory: object = "3Gi", request: str = "gpu", **extra: Any) -> dict[str, Any]:
    out = {"request": request, "driver": DRIVER, "pool": NODE, "device": device, **extra}
    if memory is not None:
        out["consumedCapacity"] = {"memory": memory}
    return out


def read(obj: dict[str, Any], granularity: devices.Granularity = GIB) -> drashares.ClaimShares:
    return drashares.read(obj, "u1", driver=DRIVER, pool=NODE, gpus=GPUS, granularity=granularity)


def test_a_share_reads_its_gpu_units_and_share_id_and_skips_other_drivers():
    other = {"request": "nic", "driver": "nic.example.com", "pool": NODE, "device": "eth0"}
    found = read(claim(result("gpu-1", "3Gi", shareID="s-1"), other))
    assert found.shares == (drashares.Share("gpu", "gpu-1", 1, 3, "s-1"),)
    assert (found.namespace, found.name, found.total) == ("ns", "c", 3)


def test_a_result_without_consumed_memory_holds_the_whole_gpu():
    assert read(claim(result("gpu-0", None))).shares[0].units == 16


def test_a_subrequest_counts_for_its_request_as_the_kubelet_matches_containers_on_it():
    assert read(claim(result("gpu-0", request="gpu/small"))).shares[0].request == "gpu"


def test_each_request_gets_the_gpushare_env_of_its_gpus_and_the_claim_total_as_the_pods():
    shares = read(claim(result("gpu-0", "5Gi", request="a"), result("gpu-1", "3Gi", request="b")))
    edits = drashares.edits(shares, GPUS, GIB)
    assert edits["a"].env == {
        resources.ENV_VISIBLE_DEVICES: "GPU-a",
        resources.ENV_MEM_IDX: "0",
        resources.ENV_MEM_POD: "8",
        resources.ENV_MEM_CONTAINER: "5",
        resources.ENV_MEM_DEV: "16",
    }
    assert edits["b"].env[resources.ENV_VISIBLE_DEVICES] == "GPU-b"
    assert edits["a"].mounts == ()


def test_a_request_on_two_gpus_lists_both_and_gets_the_least_it_holds_on_either():
    shares = read(claim(result("gpu-1", "4Gi"), result("gpu-0", "6Gi")))
    env = drashares.edits(shares, GPUS, GIB)["gpu"].env
    assert env[resources.ENV_VISIBLE_DEVICES] == "GPU-a,GPU-b"
    assert env[resources.ENV_MEM_CONTAINER] == "4"


def test_on_an_mps_node_each_request_gets_its_memory_limit_and_the_mps_folders():
    dirs = mps.MpsDirs("/run/mps", "/var/log/mps")
    shares = read(claim(result("gpu-1", "3Gi")))
    edits = drashares.edits(shares, GPUS, GIB, dirs)["gpu"]
    assert edits.env[mps.ENV_MEM_LIMIT] == "0=3072MB"
    assert edits.env[mps.ENV_PIPE_DIRECTORY] == "/run/mps"
    assert edits.mounts == mps.mounts(dirs)


def test_mib_units_count_the_consumed_memory_in_mib():
    mib = devices.Granularity.parse("MiB", 1)
    assert read(claim(result("gpu-0", "2500Mi")), mib).shares[0].units == 2500


@pytest.mark.parametrize(
    ("obj", "needle"),
    [
        (claim(result("gpu-0"), uid="u2"), "has UID 'u2', not 'u1': it was deleted and made again"),
        ({"metadata": {"uid": "u1"}, "status": {}}, "is not allocated"),
        (claim(result("gpu-7")), "device 'gpu-7' is not a GPU of this node"),
        (claim(result("gpu-0", pool="node-2")), "pool 'node-2' is not this node's"),
        (claim(result("gpu-0", "2500Mi")), "is not a whole number of 1 GiB units"),
        (claim(result("gpu-0", "17Gi")), "is more than GPU 0 has"),
        (claim(result("gpu-0", "-1Gi")), "is not a whole number"),
        (claim(result("gpu-0", "lots")), "is not a quantity"),
        (claim(result("gpu-0", request="")), "names no request"),
    ],
    ids=[
        "replaced",
        "unallocated",
        "foreign-device",
        "foreign-pool",
        "not-a-unit",
        "too-much",
        "negative",
        "not-a-quantity",
        "no-request",
    ],
)
def test_what_cannot_be_prepared_is_refused_naming_the_claim_and_why(obj, needle):
    with pytest.raises(drashares.ClaimError, match=needle):
        read(obj)
