"""The node's CDI spec folders as the node agents read them: YAML and JSON specs, a bad file skipped with one
warning, a change picked up at the next call (and only then read again), each change logged once and
passed on, and the flags that configure it."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import prometheus_client
import pytest
import yaml

from webhook.core.node import devicelist
from webhook.devcluster import toolkitcdi
from webhook.gpus import inventory, toolkitspecs
from webhook.gpus.toolkitspecs import DeliverySettings

GPUS = inventory.parse_fake_gpus("0:16,1:16").gpus()


@pytest.fixture
def folders(tmp_path: Path) -> tuple[Path, Path]:
    static, dynamic = tmp_path / "etc-cdi", tmp_path / "run-cdi"
    static.mkdir()
    dynamic.mkdir()
    return static, dynamic


def _write(path: Path, document: object) -> None:
    path.write_text(json.dumps(document) if path.suffix == ".json" else yaml.safe_dump(document))


def _specs(folders: tuple[Path, Path], strategy: str = "auto") -> toolkitspecs.ToolkitSpecs:
    return DeliverySettings(strategy, folders).specs(GPUS)


def _watched(
    folders: tuple[Path, Path], strategy: str = "auto"
) -> tuple[toolkitspecs.ToolkitSpecs, list[devicelist.Delivery]]:
    """The specs and every delivery passed to on_change."""
    seen: list[devicelist.Delivery] = []
    return DeliverySettings(strategy, folders).specs(GPUS, on_change=seen.append), seen


def test_a_toolkit_spec_in_yaml_makes_auto_hand_out_cdi_devices(folders, caplog) -> None:
    caplog.set_level(logging.INFO)
    _write(folders[1] / "nvidia.yaml", toolkitcdi.spec(GPUS, "/lib/libnvidia-ml.so.1"))
    found = _specs(folders).delivery()
    assert found.mode == "cdi-cri"
    assert found.cdi_devices([1]) == (f"nvidia.com/gpu={GPUS[1].uuid}",)
    assert "GPUs handed to containers as CDI devices nvidia.com/gpu" in caplog.text


def test_a_json_spec_by_index_only_is_read_too(folders) -> None:
    _write(folders[0] / "nvidia.json", toolkitcdi.spec(GPUS, "/lib/libnvidia-ml.so.1", names=("index",)))
    assert _specs(folders).delivery().cdi_devices([0, 1]) == ("nvidia.com/gpu=0", "nvidia.com/gpu=1")


def test_no_folder_at_all_falls_back_to_the_env_and_says_why(tmp_path, caplog) -> None:
    caplog.set_level(logging.INFO)
    found = DeliverySettings("auto", (tmp_path / "absent",)).specs(GPUS).delivery()
    assert found.mode == "envvar"
    assert "no CDI spec in" in caplog.text and str(tmp_path / "absent") in caplog.text


def test_a_malformed_file_is_skipped_with_one_warning_naming_it(folders, caplog) -> None:
    caplog.set_level(logging.INFO)
    (folders[0] / "broken.yaml").write_text("devices: [unclosed\n")
    (folders[0] / "binary.json").write_bytes(b"\xff\xfe\x00")
    (folders[0] / "notes.txt").write_text("not a spec, not read")
    _write(folders[1] / "nvidia.yaml", toolkitcdi.spec(GPUS, "/lib/x"))
    specs = _specs(folders)
    assert specs.delivery().mode == "cdi-cri"
    specs.delivery()  # unchanged folders: nothing read or said again
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert any(str(folders[0] / "broken.yaml") in w and "is not valid YAML" in w for w in warnings)
    assert any(str(folders[0] / "binary.json") in w and "cannot be read" in w for w in warnings)


def test_a_huge_file_is_not_read(folders, caplog, monkeypatch) -> None:
    monkeypatch.setattr(toolkitspecs, "MAX_SPEC_BYTES", 64)
    _write(folders[1] / "nvidia.yaml", toolkitcdi.spec(GPUS, "/lib/x"))
    assert _specs(folders).delivery().mode == "envvar"
    assert "larger than any CDI spec" in caplog.text


def test_a_spec_written_after_start_is_picked_up_and_its_removal_too(folders) -> None:
    specs, seen = _watched(folders)
    assert specs.delivery().mode == "envvar"
    path = folders[1] / "nvidia.yaml"
    _write(path, toolkitcdi.spec(GPUS, "/lib/x"))
    assert specs.delivery().mode == "cdi-cri"
    path.unlink()
    assert specs.delivery().mode == "envvar"
    assert [d.mode for d in seen] == ["envvar", "cdi-cri", "envvar"]


def test_a_rewritten_spec_naming_other_gpus_is_read_again(folders) -> None:
    path = folders[1] / "nvidia.yaml"
    _write(path, toolkitcdi.spec(GPUS[:1], "/lib/x"))
    specs = _specs(folders)
    with pytest.raises(devicelist.UnnamedGpu):
        specs.delivery().cdi_devices([1])
    _write(path, toolkitcdi.spec(GPUS, "/lib/x"))
    os.utime(path, ns=(1, 1))  # a new mtime even on a coarse clock
    assert specs.delivery().cdi_devices([1]) == (f"nvidia.com/gpu={GPUS[1].uuid}",)


def test_the_env_strategy_reads_no_folder(folders) -> None:
    (folders[1] / "nvidia.yaml").write_text("{{{")
    specs, seen = _watched(folders, "envvar")
    assert specs.delivery().mode == "envvar" and specs.delivery() is specs.delivery()
    assert len(seen) == 1


def test_the_gauge_shows_the_mode_in_use_and_the_unnamed_gpus(folders) -> None:
    registry = prometheus_client.CollectorRegistry()
    observe = toolkitspecs.delivery_gauge(registry)
    _write(folders[1] / "nvidia.yaml", toolkitcdi.spec(GPUS[:1], "/lib/x"))
    observe(_specs(folders).delivery())
    value = registry.get_sample_value
    assert value("gpushare_device_list", {"mode": "cdi-cri"}) == 1
    assert value("gpushare_device_list", {"mode": "envvar"}) == 0
    assert value("gpushare_device_list_unnamed_gpus") == 1


@pytest.mark.parametrize(
    ("settings", "why"),
    [
        (DeliverySettings(strategy="cdi"), "--device-list-strategy 'cdi' is not one of auto, envvar"),
        (DeliverySettings(folders=(Path("etc/cdi"),)), "--cdi-spec-dirs must be absolute"),
        (DeliverySettings(folders=()), "--cdi-spec-dirs must be absolute"),
        (DeliverySettings(kind="nvidia.com"), "--cdi-kind: 'nvidia.com' is not a CDI kind"),
    ],
    ids=["strategy", "relative", "none", "kind"],
)
def test_settings_that_cannot_work_are_refused_naming_the_flag(settings: DeliverySettings, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        settings.check()
