"""MPS: the per-container env, the compute share annotation and the Volta check."""

from __future__ import annotations

import pytest

from tests.core import reads
from webhook.core.node import devices, mps
from webhook.core.node.devices import Gpu
from webhook.core.wire import resources

GIB = devices.Granularity("GiB", 1024)


def test_memory_limit_is_per_container_device_ordinal_in_mib():
    env = mps.container_env({3: 4, 1: 2}, GIB, 30, mps.MpsDirs())
    # Ordinals follow NVIDIA_VISIBLE_DEVICES (GPU index order): GPU 1 is the container's device 0.
    assert env == {
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048MB,1=4096MB",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
        "CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps",
        "CUDA_MPS_LOG_DIRECTORY": "/var/log/nvidia-mps",
    }


def test_without_a_compute_share_the_servers_default_applies():
    env = mps.container_env({0: 5}, devices.Granularity("MiB", 128), None, mps.MpsDirs("/run/mps", "/log"))
    assert env[mps.ENV_MEM_LIMIT] == "0=640MB"
    assert mps.ENV_THREAD_PERCENTAGE not in env
    assert mps.mounts(mps.MpsDirs("/run/mps", "/log")) == (
        mps.Mount("/run/mps", "/run/mps"),
        mps.Mount("/log", "/log"),
    )


@pytest.mark.parametrize(("raw", "expected"), [(None, None), ("1", 1), ("100", 100), (" 30 ", 30)])
def test_compute_percent_accepts_whole_percents(raw, expected):
    assert mps.compute_percent(raw) == expected


@pytest.mark.parametrize("raw", ["0", "101", "30%", "0.5", "", "-5", 30, "1000"])
def test_a_wrong_compute_percent_says_what_to_write(raw):
    with pytest.raises(mps.MpsError, match=r'compute-percent=.* between 1 and 100, e.g. "30"'):
        mps.compute_percent(raw)


def test_volta_and_newer_run_mps():
    assert mps.refusal([Gpu(0, "GPU-a", 16384, "V100", "7.0"), Gpu(1, "GPU-b", 40960, "A100", "8.0")]) is None


def test_gpus_older_than_volta_or_of_unknown_capability_refuse_mps_with_the_reason():
    message = mps.refusal([Gpu(0, "GPU-a", 16384, "Tesla P100", "6.0"), Gpu(1, "GPU-b", 8192, "fake", "")])
    assert message == (
        "MPS needs Volta (compute capability 7.0) or newer: GPU 0 (Tesla P100) has compute capability 6.0; "
        "GPU 1 (fake) has an unknown compute capability; use mode share or cgpu on this node"
    )


def test_the_webhooks_rules_deny_a_wrong_compute_percent_naming_the_annotation():
    metadata = {"annotations": {mps.COMPUTE_PERCENT_ANNOTATION: "150"}}
    (found,) = reads.findings(metadata, {"containers": []}, "spec.template", resources.GpuResourceNames())
    assert str(found) == (
        'spec.template.metadata.annotations[gpushare.aliyun.com/compute-percent]: "150": must be a whole '
        'percent of the GPU\'s compute between 1 and 100 (MPS nodes only); fix: write e.g. "30", or remove '
        "the annotation"
    )
    metadata = {"annotations": {mps.COMPUTE_PERCENT_ANNOTATION: "30"}}
    assert reads.findings(metadata, {"containers": []}, "", resources.GpuResourceNames()) == []
