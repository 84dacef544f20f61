"""GPU resource names: which names count as GPUs, and that the defaults follow the issue."""

from __future__ import annotations

import pytest

from webhook.core.wire import resources


@pytest.mark.parametrize(
    ("name", "whole", "gpu"),
    [
        ("nvidia.com/gpu", True, True),
        ("amd.com/gpu", True, True),
        ("gpu.intel.com/i915", True, True),
        ("gpu.intel.com/xe", True, True),
        ("nvidia.com/mig-1g.5gb", True, True),
        ("aliyun.com/gpu-mem", False, True),
        ("aliyun.com/gpu-count", False, True),
        ("cpu", False, False),
        ("example.com/fpga", False, False),
        ("nvidia.com/gpu-extra", False, False),
    ],
    ids=str,
)
def test_default_names_classify_gpu_resources(name: str, whole: bool, gpu: bool) -> None:
    names = resources.GpuResourceNames()
    assert names.is_whole_device(name) is whole
    assert names.is_gpu(name) is gpu


def test_names_are_configurable() -> None:
    names = resources.GpuResourceNames(
        whole_device=frozenset({"example.com/gpu"}), whole_device_prefixes=(), memory="example.com/gpu-mem"
    )
    assert names.is_whole_device("example.com/gpu")
    assert not names.is_gpu("nvidia.com/gpu")
    assert names.is_gpu("example.com/gpu-mem")
