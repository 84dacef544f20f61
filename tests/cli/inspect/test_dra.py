"""`gpushare inspect` shows the shares kube-scheduler allocated through our DRA driver (ResourceClaims'
status.allocation) per GPU, beside the extender's placements, from the API stand-in."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook.cli.inspect import command
from webhook.core.node import devices, draslice
from webhook.core.placement import annotations as ann
from webhook.core.placement import modes
from webhook.devcluster.standin.apiserver import ApiServer

DRIVER = draslice.DEFAULT_DRIVER


def publish(server: ApiServer, node: str, *gib: int) -> None:
    """The node's ResourceSlice as our driver writes it (core/node/draslice.py), GPUs of `gib` GiB each."""
    gpus = [devices.Gpu(i, f"GPU-{node}-{i}", size * 1024, "Tesla T4", "7.5") for i, size in enumerate(gib)]
    found = draslice.devices_of(gpus, devices.Granularity())
    server.put(draslice.resource_slice(node, DRIVER, 1, found))


def allocated(
    name: str, namespace: str, node: str, *results: tuple[int, str | None], pod: str = ""
) -> dict[str, Any]:
    """A ResourceClaim as kube-scheduler leaves it: one result per (GPU, consumed memory or None)."""
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpushare-memory"}}]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": node,
                            "device": f"gpu-{gpu}",
                            "shareID": f"share-{name}-{i}",
                            **({"consumedCapacity": {"memory": memory}} if memory is not None else {}),
                        }
                        for i, (gpu, memory) in enumerate(results)
                    ]
                }
            }
        },
    }
    if pod:
        claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": f"uid-{pod}"}]
    return claim


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    dra = {modes.MODE_LABEL: "dra"}
    apiserver.add_node("d1", labels=dra)
    publish(apiserver, "d1", 16, 16)
    apiserver.put(allocated("train-gpu", "ml", "d1", (0, "3Gi"), pod="train"))
    apiserver.put(allocated("rounded", "ml", "d1", (0, "3Gi"), pod="small"))  # asked 2500Mi
    apiserver.put(allocated("whole", "ml", "d1", (1, None), pod="big"))  # no memory asked: all of it
    apiserver.put(allocated("unused", "ml", "d1", (1, "0.5Gi")))  # allocated, no pod yet
    apiserver.put(allocated("elsewhere", "ml", "gone", (0, "1Gi")))  # a node without a slice
    unallocated = allocated("waiting", "ml", "d1", (0, "1Gi"))
    del unallocated["status"]
    apiserver.put(unallocated)
    # An extender node beside it, as test_command.py's.
    notes = ann.encode(ann.Placement(ann.Allocation({0: {0: 4}}), 16, 1_700_000_000_000_000_000, True))
    apiserver.add_node("n1", gpus=1, gpu_mem=16)
    apiserver.add_pod("old", "ml", gpu_mem=[4], node_name="n1", phase="Running", annotations=notes)
    return apiserver


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = command.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_dra_shares_are_counted_per_gpu_beside_the_extenders(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--server", cluster.url, "-o", "json")
    assert code == 0
    found = json.loads(out)
    d1, n1 = found["nodes"]
    assert (d1["name"], d1["mode"], d1["model"], d1["allocated"], d1["total"]) == (
        "d1",
        "dra",
        "Tesla-T4",
        23,
        32,
    )
    assert [(g["index"], g["allocated"], g["total"], g["uuid"]) for g in d1["gpus"]] == [
        (0, 6, 16, "GPU-d1-0"),
        (1, 17, 16, "GPU-d1-1"),  # half a GiB rounds up to a whole unit; over 16: shown, not hidden
    ]
    assert d1["gpus"][1]["pods"] == [
        {"namespace": "ml", "name": "big", "allocated": 16, "assigned": True, "claim": "whole"},
        {"namespace": "ml", "name": "unused", "allocated": 1, "assigned": True, "claim": "unused"},
    ]
    assert (n1["allocated"], n1["total"]) == (4, 16)
    assert n1["gpus"][0]["pods"] == [{"namespace": "ml", "name": "old", "allocated": 4, "assigned": True}]
    assert (found["allocated"], found["total"]) == (27, 48)


def test_details_name_the_claim_of_each_dra_share(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, "--server", cluster.url, "-d", "d1")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert ["train", "(claim", "train-gpu)", "ml", "3", "0", "true"] in rows
    assert ["big", "(claim", "whole)", "ml", "0", "16", "true"] in rows


def test_in_mib_a_share_is_counted_in_mib(cluster: ApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--server", cluster.url, "-o", "json", "--unit", "MiB", "-d", "d1")
    assert code == 0
    (d1,) = json.loads(out)["nodes"]
    assert [(g["allocated"], g["total"]) for g in d1["gpus"]] == [(6144, 16384), (16896, 16384)]


def test_a_cluster_without_dra_nodes_reads_no_claims(
    apiserver: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver.add_node("n1", gpus=1, gpu_mem=16)
    code, _, _ = _run(capsys, "--server", apiserver.url, "-o", "json")
    assert code == 0
    assert apiserver.requests[("list", "resourceclaims")] == 0
    assert apiserver.requests[("list", "resourceslices")] == 0


def test_claims_that_cannot_be_read_are_an_error_naming_them(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.fail_next("list", "resourceclaims", status=403)
    code, out, err = _run(capsys, "--server", cluster.url)
    assert (code, out) == (1, "")
    assert "resourceclaims" in err and "403" in err
