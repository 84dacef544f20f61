"""The node's CDI devices: specs checked as the CDI library checks them, folders resolved by priority,
conflicts dropped, each GPU named by UUID, else by index."""

from __future__ import annotations

import re
from typing import Any

import pytest

from webhook.core.node import cdidevices, devices
from webhook.core.node.cdidevices import SpecFile

GPU0 = devices.Gpu(0, "GPU-aaaa", 16384)
GPU1 = devices.Gpu(1, "GPU-bbbb", 16384)


def _spec(*names: str, kind: str = "nvidia.com/gpu") -> dict[str, Any]:
    return {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [{"name": n, "containerEdits": {"deviceNodes": [{"path": f"/dev/{n}"}]}} for n in names],
    }


@pytest.mark.parametrize(
    ("document", "why"),
    [
        ("cdiVersion: 0.5.0", "not an object"),
        ({**_spec("0"), "cdiVersion": 5}, "cdiVersion 5"),
        ({**_spec("0"), "cdiVersion": "latest"}, "cdiVersion 'latest'"),
        ({**_spec("0"), "kind": "nvidia.com"}, "not a CDI kind"),
        ({**_spec("0"), "kind": ["nvidia.com/gpu"]}, "is not a string"),
        ({**_spec("0"), "devices": []}, "non-empty list"),
        ({**_spec("0"), "devices": ["0"]}, "devices[0] is not an object"),
        (_spec("-bad"), "devices[0].name '-bad'"),
        (_spec("0", "0"), "defined twice"),
        ({**_spec(), "devices": [{"name": "0"}]}, "no containerEdits"),
    ],
    ids=["text", "version-type", "version", "kind", "kind-type", "empty", "device", "name", "twice", "edits"],
)
def test_a_document_the_runtime_would_refuse_is_refused_naming_what_is_wrong(
    document: object, why: str
) -> None:
    with pytest.raises(cdidevices.SpecError, match=re.escape(why)):
        cdidevices.spec_devices(document)


def test_a_toolkit_spec_gives_its_kind_and_names() -> None:
    assert cdidevices.spec_devices(_spec("0", "GPU-aaaa", "all", "1:0")) == (
        "nvidia.com/gpu",
        ("0", "GPU-aaaa", "all", "1:0"),
    )


def test_a_gpu_is_named_by_uuid_first_then_by_index() -> None:
    both = cdidevices.index([SpecFile("/etc/cdi/nvidia.yaml", 0, _spec("0", "GPU-aaaa", "1"))])
    assert cdidevices.gpu_device(both, GPU0) == "nvidia.com/gpu=GPU-aaaa"
    assert cdidevices.gpu_device(both, GPU1) == "nvidia.com/gpu=1"
    by_uuid = cdidevices.index([SpecFile("/etc/cdi/nvidia.yaml", 0, _spec("GPU-bbbb"))])
    assert cdidevices.gpu_device(by_uuid, GPU0) is None
    assert cdidevices.gpu_device(by_uuid, GPU1) == "nvidia.com/gpu=GPU-bbbb"


def test_other_kinds_are_not_gpus_of_ours() -> None:
    found = cdidevices.index(
        [
            SpecFile(
                "/var/run/cdi/management.nvidia.com-gpu.yaml",
                1,
                _spec("all", kind="management.nvidia.com/gpu"),
            ),
            SpecFile(
                "/var/run/cdi/gpushare.aliyun.com-gpu_1.json", 1, _spec("0", kind="gpushare.aliyun.com/gpu")
            ),
        ]
    )
    assert found.names == frozenset() and found.warnings == ()


def test_a_later_folder_shadows_an_earlier_one_and_ends_its_conflict() -> None:
    found = cdidevices.index(
        [
            SpecFile("/etc/cdi/a.yaml", 0, _spec("0")),
            SpecFile("/etc/cdi/b.yaml", 0, _spec("0", "1")),
            SpecFile("/var/run/cdi/nvidia.yaml", 1, _spec("0")),
        ]
    )
    assert found.names == {"0", "1"} and found.warnings == ()


def test_two_files_of_one_folder_naming_one_device_conflict_and_neither_is_used() -> None:
    found = cdidevices.index(
        [SpecFile("/etc/cdi/a.yaml", 0, _spec("0", "1")), SpecFile("/etc/cdi/b.yaml", 0, _spec("0"))]
    )
    assert found.names == {"1"}
    assert found.warnings == (
        "CDI device nvidia.com/gpu=0 is defined in both /etc/cdi/a.yaml and /etc/cdi/b.yaml: not used",
    )


def test_an_unusable_file_is_skipped_with_one_warning_and_the_others_still_count() -> None:
    found = cdidevices.index(
        [
            SpecFile(
                "/etc/cdi/broken.yaml", 0, unreadable="is not valid YAML (mapping values are not allowed)"
            ),
            SpecFile("/etc/cdi/odd.json", 0, {"kind": "nvidia.com/gpu"}),
            SpecFile("/etc/cdi/nvidia.yaml", 0, _spec("0")),
        ],
        folders=["/etc/cdi"],
    )
    assert found.names == {"0"} and found.folders == ("/etc/cdi",)
    assert found.warnings == (
        "skipped CDI spec /etc/cdi/broken.yaml: is not valid YAML (mapping values are not allowed)",
        "skipped CDI spec /etc/cdi/odd.json: cdiVersion None is not a version like 0.5.0",
    )


@pytest.mark.parametrize("kind", ["nvidia.com/gpu", "k8s.device-plugin.nvidia.com/gpu", "a/b"])
def test_a_kind_flag_takes_vendor_and_class(kind: str) -> None:
    assert cdidevices.check_kind(kind) == kind


@pytest.mark.parametrize("kind", ["nvidia.com", "nvidia.com/", "/gpu", "nvidia.com/gpu=0", "a/b/c", ""])
def test_a_kind_flag_without_vendor_and_class_is_refused(kind: str) -> None:
    with pytest.raises(cdidevices.SpecError, match="not a CDI kind"):
        cdidevices.check_kind(kind)
