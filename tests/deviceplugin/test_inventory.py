"""Fake inventories from a flag or a file; NVML is never needed."""

from __future__ import annotations

import pytest

from webhook.deviceplugin import inventory


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
