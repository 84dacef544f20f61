"""`gpushare inspect` reads the shares the real kube-scheduler allocated from our real DRA driver's slice:
the claims' status.allocation as the API server stores it."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import dra
from tests.e2e.bed import GPUSHARE, Bed
from webhook.core.placement import modes
from webhook.devcluster.process import Process

NODE = "dra-inspect-0"
GROUP = "dra-inspect"
NS = "e2e-dra-inspect"


@pytest.fixture(scope="module")
def driver(bed: Bed) -> Iterator[Process]:
    dra.install(bed)
    root = Path(tempfile.mkdtemp(prefix="gpushare-dra-inspect-", dir="/tmp"))
    running: list[Process] = []
    try:
        bed.node(NODE, 2, 16, {modes.MODE_LABEL: "dra"}, group=GROUP)
        running.append(dra.start_driver(bed, NODE, "0:16,1:16", root / NODE))
        bed.wait("the driver's slice", lambda: len(dra.capacities(bed, [NODE])) == 2, timeout=60)
        yield running[0]
    finally:
        dra.release(bed, NS)
        for process in running:
            process.stop()
        dra.forget_slices(bed, [NODE])
        dra.uninstall(bed)
        shutil.rmtree(root, ignore_errors=True)


def test_inspect_counts_the_allocated_shares_per_gpu(bed: Bed, driver: Process) -> None:
    ns = bed.namespace(NS)
    for name, memory in (("a", "3Gi"), ("b", "2500Mi"), ("c", "12Gi")):
        dra.create(bed, ns, dra.claim(name, memory), dra.pod(name, name, GROUP))
    bed.wait("3 claims allocated", lambda: sum(bool(dra.results(c)) for c in dra.claims(bed, ns)) == 3, 60)
    by_claim = {c["metadata"]["name"]: dra.results(c)[0] for c in dra.claims(bed, ns)}
    expected: dict[int, int] = {}
    for result in by_claim.values():
        gpu = int(result["device"].removeprefix("gpu-"))
        expected[gpu] = expected.get(gpu, 0) + int(result["consumedCapacity"]["memory"].removesuffix("Gi"))
    assert sum(expected.values()) == 3 + 3 + 12  # 2500Mi rounded up to 3Gi by kube-scheduler
    done = subprocess.run(
        [GPUSHARE, "inspect", "-o", "json", "--kubeconfig", str(bed.cp.admin_kubeconfig), NODE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (node,) = json.loads(done.stdout)["nodes"]
    assert (node["mode"], node["total"], node["allocated"]) == ("dra", 32, 18)
    assert {g["index"]: g["allocated"] for g in node["gpus"]} == {
        0: expected.get(0, 0),
        1: expected.get(1, 0),
    }
    pods = {p["claim"]: (p["name"], p["allocated"]) for g in node["gpus"] for p in g["pods"]}
    # The pod each claim is reserved for, once kube-scheduler bound it.
    assert pods == {"a": ("a", 3), "b": ("b", 3), "c": ("c", 12)}
    assert node["problems"] == []
