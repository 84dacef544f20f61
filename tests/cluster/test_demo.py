"""`gpushare demo` where a node can run containers: the chart's parts as pods of our image, the demo's pods
real containers that print the GPU env they got, and nothing left running after it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.devcluster.demorun import Demo
from webhook.devcluster import binaries
from webhook.devcluster import cluster as clustermod
from webhook.gpus.inventory import fake_uuid


def test_the_demo_runs_the_charts_pods_and_real_containers(tmp_path: Path) -> None:
    reason = clustermod.unavailable(binaries.locate(), binaries.runtime())
    if reason is not None:
        pytest.skip(f"no node with a container runtime here: {reason}")
    demo = Demo("--once", "--workdir", str(tmp_path / "demo"), "--timeout", "240")
    try:
        code = demo.finish(timeout=900)
        out = demo.output
        assert code == 0, f"{out}\n{demo.err}"
        assert "a node that RUNS CONTAINERS" in out
        for part in ("webhook", "extender", "scheduler", "device-plugin"):
            assert re.search(rf"^  gs-gpushare-{part}-\S+\s+1/1\s+Running", out, re.M), out
        assert "pod demo/half-gpu: nvidia.com/gpu: 0.5 REFUSED:" in out
        for pod, gib in (("train-a", 12), ("train-b", 10), ("infer", 8), ("notebook", 4)):
            placed = re.search(rf"^pod {pod} -> gpu-node GPU (\d), Running$", out, re.M)
            assert placed is not None, out
            index = placed.group(1)
            assert re.search(
                rf"^  {pod}: ALIYUN_COM_GPU_MEM_CONTAINER={gib} ALIYUN_COM_GPU_MEM_DEV=\d+ "
                rf"ALIYUN_COM_GPU_MEM_IDX={index} ALIYUN_COM_GPU_MEM_POD={gib} "
                rf"NVIDIA_VISIBLE_DEVICES={fake_uuid(int(index))}$",
                out,
                re.M,
            ), out
        assert "Allocated/Total GPU Memory In Cluster (GiB):\n34/56 (60%)" in out
        assert "Traceback" not in demo.err
        assert demo.survivors() == []  # the node's processes, containerd's shims included
    except BaseException:
        demo.kill()  # no cluster left running after a failed assertion
        raise
