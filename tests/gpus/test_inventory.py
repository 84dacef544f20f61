"""Fake inventories from a flag or a file; NVML is never needed."""

from __future__ import annotations

import sys
import types

import pytest

from webhook.gpus import inventory


def test_fake_gpus_flag_keeps_sizes_apart_and_uuids_stable():
    inv = inventory.parse_fake_gpus("0:16, 1:16130MiB, 2:24GiB")
    assert [(g.index, g.memory_mib) for g in inv.gpus()] == [(0, 16384), (1, 16130), (2, 24576)]
    assert inv.gpus()[0].uuid == inventory.parse_fake_gpus("0:8").gpus()[0].uuid
    assert len({g.uuid for g in inv.gpus()}) == 3


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("", "declares no GPU"),
        ("0", "is not <index>:<memory>"),
        ("x:16", "is not <index>:<memory>"),
        ("0:0", "must be a positive whole number"),
        ("0:1.5", "must be a positive whole number"),
        ("0:16,0:8", "appears twice"),
    ],
    ids=["empty", "no-memory", "bad-index", "zero", "fraction", "duplicate"],
)
def test_bad_fake_gpus_flags_say_what_is_wrong(spec, needle):
    with pytest.raises(inventory.InventoryError, match=needle):
        inventory.parse_fake_gpus(spec)


def test_inventory_file_in_yaml_and_json(tmp_path):
    (tmp_path / "gpus.yaml").write_text(
        "gpus:\n- {index: 0, memory: 16GiB, model: T4}\n- {index: 1, memory: 40960MiB}\n"
    )
    (tmp_path / "gpus.json").write_text('{"gpus": [{"index": 3, "memory": 8, "uuid": "GPU-x"}]}')
    yaml_inv = inventory.load_inventory_file(tmp_path / "gpus.yaml")
    assert [(g.index, g.memory_mib, g.model) for g in yaml_inv.gpus()] == [(0, 16384, "T4"), (1, 40960, "")]
    assert [(g.index, g.uuid) for g in inventory.load_inventory_file(tmp_path / "gpus.json").gpus()] == [
        (3, "GPU-x")
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("gpus: [", "not YAML/JSON"),
        ("gpus: []", "expected 'gpus:"),
        ("gpus: [{memory: 4}]", "needs an integer 'index'"),
        ("gpus: [{index: 0, memory: lots}]", "must be a positive whole number"),
    ],
    ids=["not-yaml", "empty", "no-index", "bad-memory"],
)
def test_bad_inventory_files_say_what_is_wrong(tmp_path, text, needle):
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    with pytest.raises(inventory.InventoryError, match=needle):
        inventory.load_inventory_file(path)


def test_missing_inventory_file(tmp_path):
    with pytest.raises(inventory.InventoryError, match="No such file"):
        inventory.load_inventory_file(tmp_path / "none.yaml")


def test_fake_gpus_may_declare_model_and_compute_capability():
    gpus = inventory.parse_fake_gpus("0:16:Tesla V100-SXM2-16GB:7.0,1:16:Tesla T4").gpus()
    assert [(g.model, g.compute_capability) for g in gpus] == [
        ("Tesla V100-SXM2-16GB", "7.0"),
        ("Tesla T4", ""),
    ]
    assert inventory.parse_fake_gpus("0:16").gpus()[0].model == "fake"


def test_inventory_file_declares_compute_capability_and_refuses_a_wrong_one(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text('gpus:\n- {index: 0, memory: 16GiB, model: V100, compute_capability: "7.0"}\n')
    assert inventory.load_inventory_file(path).gpus()[0].compute_capability == "7.0"
    path.write_text("gpus:\n- {index: 0, memory: 16GiB, compute_capability: volta}\n")
    with pytest.raises(inventory.InventoryError, match=r"gpus\[0\]: compute capability 'volta' is not"):
        inventory.load_inventory_file(path)


def test_nvml_inventory_reads_the_compute_capability_and_leaves_it_unknown_on_old_drivers(monkeypatch):
    def fake_nvml(capability: object) -> types.SimpleNamespace:
        def get_capability(handle: int) -> object:
            if isinstance(capability, Exception):
                raise capability
            return capability

        return types.SimpleNamespace(
            nvmlInit=lambda: None,
            nvmlDeviceGetCount=lambda: 1,
            nvmlDeviceGetHandleByIndex=lambda index: index,
            nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=16 * 1024**3),
            nvmlDeviceGetUUID=lambda handle: b"GPU-1234",
            nvmlDeviceGetName=lambda handle: b"Tesla V100-SXM2-16GB",
            nvmlDeviceGetCudaComputeCapability=get_capability,
        )

    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml((7, 0)))
    (gpu,) = inventory.NvmlInventory().gpus()
    assert (gpu.model, gpu.memory_mib, gpu.compute_capability) == ("Tesla V100-SXM2-16GB", 16384, "7.0")
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml(RuntimeError("NVML_ERROR_FUNCTION_NOT_FOUND")))
    assert inventory.NvmlInventory().gpus()[0].compute_capability == ""


def test_discover_prefers_the_flag_then_the_file(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus: [{index: 3, memory: 8GiB}]\n")
    assert [g.index for g in inventory.discover("0:16", path).gpus()] == [0]
    assert [g.index for g in inventory.discover("", path).gpus()] == [3]


def test_discover_without_nvml_says_to_declare_fake_gpus(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml then raises ImportError
    with pytest.raises(inventory.InventoryError, match=r"NVML failed .*use --fake-gpus"):
        inventory.discover()


def test_an_inventory_without_gpus_has_nothing_to_serve():
    assert [g.index for g in inventory.present(inventory.parse_fake_gpus("0:16,1:8"))] == [0, 1]
    with pytest.raises(inventory.InventoryError, match=r"^no GPUs found on this node$"):
        inventory.present(inventory.FakeInventory([]))
