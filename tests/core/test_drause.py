"""What our DRA driver's GPUs hold, read from ResourceSlices and ResourceClaims
(webhook/core/node/drause.py)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.node import devices, draslice, drause

DRIVER = draslice.DEFAULT_DRIVER


def a_slice(node: str, driver: str = DRIVER) -> dict[str, Any]:
    gpus = [devices.Gpu(0, "GPU-a", 16160, "Tesla V100", "7.0"), devices.Gpu(1, "GPU-b", 24576, "A10", "8.6")]
    return draslice.resource_slice(node, driver, 1, draslice.devices_of(gpus, devices.Granularity()))


def a_claim(*results: dict[str, Any], reserved: Any = None) -> dict[str, Any]:
    status: dict[str, Any] = {"allocation": {"devices": {"results": list(results)}}}
    if reserved is not None:
        status["reservedFor"] = reserved
    return {"metadata": {"namespace": "ml", "name": "c"}, "status": status}


def result(
    device: str = "gpu-0", memory: object = "3Gi", driver: str = DRIVER, pool: str = "n1"
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "request": "gpu",
        "driver": driver,
        "pool": pool,
        "device": device,
        "shareID": "s1",
    }
    if memory is not None:
        out["consumedCapacity"] = {"memory": memory}
    return out


def test_gpus_come_from_our_drivers_slices_only() -> None:
    broken = a_slice("n3")
    broken["spec"]["devices"] += [
        {"name": "nic-0"},
        {"name": "gpu-7", "capacity": {"memory": {"value": "x"}}},
        3,
    ]
    found = drause.gpus([a_slice("n1"), a_slice("n2", "gpu.example.com"), broken, {"spec": []}], DRIVER)
    assert sorted(found) == ["n1", "n3"]
    # Whole GiB as published: a 16160 MiB V100 holds 15.
    assert found["n1"] == {
        0: drause.DraGpu(0, 15 * 1024, "GPU-a", "Tesla V100"),
        1: drause.DraGpu(1, 24 * 1024, "GPU-b", "A10"),
    }
    assert sorted(found["n3"]) == [0, 1]


@pytest.mark.parametrize(
    ("claim", "expected", "problems"),
    [
        (a_claim(result(), reserved=[{"resource": "pods", "name": "train"}]), [(0, 3072, ("train",))], []),
        (a_claim(result(memory="2500Mi")), [(0, 2500, ())], []),
        (a_claim(result("gpu-1", memory=None)), [(1, 24 * 1024, ())], []),  # no memory asked: all of it
        (a_claim(result(driver="gpu.example.com")), [], []),
        ({"metadata": {}, "status": {}}, [], []),  # not allocated
        (a_claim(result("gpu-9")), [], ["claim ml/c: device 'gpu-9' is in no ResourceSlice"]),
        (a_claim(result(pool="n9")), [], ["claim ml/c: device 'gpu-0' is in no ResourceSlice"]),
        (a_claim(result(memory="lots")), [], ["claim ml/c: consumed memory 'lots' is no quantity"]),
        (a_claim(result(), reserved=[{"resource": "other", "name": "x"}, "junk"]), [(0, 3072, ())], []),
    ],
    ids=[
        "reserved",
        "mib",
        "whole",
        "other-driver",
        "unallocated",
        "unknown-gpu",
        "unknown-pool",
        "bad-memory",
        "odd-reservedFor",
    ],
)
def test_shares_are_the_allocation_results_of_our_driver(
    claim: dict[str, Any], expected: list[tuple[int, int, tuple[str, ...]]], problems: list[str]
) -> None:
    found = drause.shares([claim], DRIVER, drause.gpus([a_slice("n1")], DRIVER))
    assert [(s.gpu, s.mib, s.pods) for s in found.shares] == expected
    assert [p for _, p in found.problems] == problems
    assert all(s.node == "n1" and s.claim == "c" and s.share_id == "s1" for s in found.shares)
