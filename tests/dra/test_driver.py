"""The whole driver in-process against the API stand-in and a stand-in kubelet: it publishes its slice
once the node is in a DRA mode, registers, prepares a claim the API holds into a CDI spec, survives a
restart with the claim prepared, drops an unhealthy GPU from the slice, and follows a mode change."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest

from tests.dra import kubelet
from tests.dra.conftest import DRIVER, NODE, claim, result
from tests.gpus.stoporder import StopOrder
from tests.serving import scraped
from webhook.core.node import cdi, draslice, mps
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster import toolkitcdi
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.dra import app
from webhook.dra.settings import DraSettings
from webhook.gpus import inventory
from webhook.gpus.inventory import fake_uuid
from webhook.gpus.toolkitspecs import DeliverySettings
from webhook.nodeagent import lifecycle

NAME = draslice.slice_name(NODE, DRIVER)
Start = Callable[..., app.Driver]


def settings_for(apiserver: ApiServer, short_root: Path, **overrides: object) -> DraSettings:
    values: dict[str, Any] = {
        "node_name": NODE,
        "fake_gpus": "0:16,1:16",
        "api_host": apiserver.url,
        "registry_dir": short_root / "registry",
        "plugins_dir": short_root / "plugins",
        "cdi_dir": short_root / "cdi",
        "health_file": short_root / "unhealthy",
        "api_timeout_s": 5,
    }
    return DraSettings(**{**values, **overrides})


@pytest.fixture
def start(apiserver: ApiServer, short_root: Path) -> Iterator[Start]:
    apiserver.add_node(NODE, labels={modes.MODE_LABEL: "dra"})
    running: list[app.Driver] = []

    def make(**overrides: object) -> app.Driver:
        driver = app.Driver(settings_for(apiserver, short_root, **overrides)).start()
        running.append(driver)
        return driver

    try:
        yield make
    finally:
        for driver in running:
            driver.stop()


def _devices(apiserver: ApiServer) -> list[str] | None:
    found = apiserver.get("resourceslices", NAME)
    return None if found is None else [d["name"] for d in found["spec"]["devices"]]


def test_the_driver_publishes_registers_and_prepares_a_claim_from_the_api(apiserver, start, short_root):
    driver = start()
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0", "gpu-1"], what="the slice")
    info = kubelet.register(driver.settings.registration_socket)
    assert driver.ready()
    apiserver.put(claim("u1", "c1", result("gpu-1", "5Gi", share="s1")))
    got = kubelet.prepare(info.endpoint, [("u1", "ns", "c1")]).claims["u1"]
    assert got.error == "" and got.devices[0].share_id == "s1"
    spec = json.loads((short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")).read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    assert f"{resources.ENV_MEM_CONTAINER}=5" in env and f"{resources.ENV_MEM_IDX}=1" in env


def test_a_restart_with_a_prepared_claim_unprepares_it_after(apiserver, start, short_root):
    driver = start()
    apiserver.put(claim("u1", "c1", result("gpu-0")))
    kubelet.prepare(driver.settings.dra_socket, [("u1", "ns", "c1")])
    driver.stop()
    apiserver.remove("resourceclaims", "c1", "ns")  # deleted while the driver was away
    again = start()
    spec = short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")
    assert spec.exists()
    assert kubelet.unprepare(again.settings.dra_socket, [("u1", "ns", "c1")]).claims["u1"].error == ""
    assert not spec.exists()


def test_a_claim_prepared_while_the_next_instance_waits_for_the_lock_keeps_its_spec(
    apiserver, start, short_root
):
    # The next instance (a DaemonSet pod replaced while the old one still exits) reads the checkpoint
    # when it is made; what the old one prepares before it stops must still be known once the new one
    # holds the lock, or its CDI spec is deleted as a leftover and the checkpoint rewritten without it.
    old = start()
    new = app.Driver(settings_for(apiserver, short_root))
    try:
        apiserver.put(claim("u1", "c1", result("gpu-0")))
        assert kubelet.prepare(old.settings.dra_socket, [("u1", "ns", "c1")]).claims["u1"].error == ""
        old.stop()
        new.start()
        assert (short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")).exists()
        assert new.store.get("u1") is not None
    finally:
        new.stop()


def test_a_spec_no_checkpointed_claim_owns_is_removed_at_start(start, short_root):
    stray = short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "crashed")
    stray.parent.mkdir(parents=True)
    stray.write_text("{}")
    foreign = short_root / "cdi" / "nvidia.com-gpu_x.json"
    foreign.write_text("{}")
    start()
    assert not stray.exists() and foreign.exists()


def test_an_unhealthy_gpu_and_a_mode_change_change_the_slice(apiserver, start, short_root):
    start()
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0", "gpu-1"], what="the slice")
    (short_root / "unhealthy").write_text("1")
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0"], what="GPU 1 gone", timeout=10)
    apiserver.edit("nodes", NODE, {"metadata": {"labels": {modes.MODE_LABEL: "share"}}})
    apiserver.wait_for(lambda: _devices(apiserver) == [], what="no devices", timeout=10)


def test_the_driver_metrics_name_the_release_and_the_python_that_serve_them(start):
    scrape = prometheus_client.generate_latest(start().metrics.registry)
    assert scraped.build_info(scrape) == scraped.THIS_BUILD


def test_a_second_instance_fails_to_start_naming_the_first(start):
    start()
    with pytest.raises(lifecycle.StartError, match="another gpushare DRA driver serves"):
        start()


def test_an_unreadable_checkpoint_stops_the_start(start, short_root):
    path = short_root / "plugins" / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    with pytest.raises(lifecycle.StartError, match="is unreadable"):
        start()


def test_on_a_dra_mps_node_the_spec_carries_the_mps_limit_and_folders(apiserver, start, short_root):
    apiserver.edit("nodes", NODE, {"metadata": {"labels": {modes.MODE_LABEL: "dra-mps"}}})
    driver = start(fake_gpus="0:16:Tesla V100-SXM2-16GB:7.0", mps_pipe_dir="/run/mps")
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0"], what="the slice")
    apiserver.put(claim("u1", "c1", result("gpu-0", "6Gi")))
    assert kubelet.prepare(driver.settings.dra_socket, [("u1", "ns", "c1")]).claims["u1"].error == ""
    spec = json.loads((short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")).read_text())
    edits = spec["devices"][0]["containerEdits"]
    assert f"{mps.ENV_MEM_LIMIT}=0=6144MB" in edits["env"]
    assert "/run/mps" in [m["hostPath"] for m in edits["mounts"]]


def test_a_dra_mps_node_of_gpus_older_than_volta_publishes_no_devices(apiserver, start):
    apiserver.edit("nodes", NODE, {"metadata": {"labels": {modes.MODE_LABEL: "dra-mps"}}})
    start(fake_gpus="0:16:Tesla P100:6.0")
    apiserver.wait_for(lambda: _devices(apiserver) == [], what="an empty slice")


def test_stop_waits_for_the_health_watcher_before_nvml_shuts_down(start, monkeypatch):
    order = StopOrder()
    order.install(monkeypatch)
    start().stop()
    assert order.closed_after_watcher is True


def _toolkit_spec(
    short_root: Path, names: tuple[str, ...] = ("index", "uuid"), gpus: str = "0:16,1:16"
) -> tuple[Path, ...]:
    """A toolkit-shaped nvidia.com/gpu spec for fake GPUs `gpus`; the spec folders to read."""
    folder = short_root / "etc-cdi"
    folder.mkdir(exist_ok=True)
    found = inventory.parse_fake_gpus(gpus).gpus()
    (folder / toolkitcdi.FILE_NAME).write_text(json.dumps(toolkitcdi.spec(found, "/lib/x", names)))
    return folder, short_root / "cdi"


def test_a_prepared_claim_names_the_toolkit_device_of_each_gpu_beside_our_own(apiserver, start, short_root):
    folders = _toolkit_spec(short_root, names=("uuid",))
    driver = start(delivery=DeliverySettings("auto", folders))
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0", "gpu-1"], what="the slice")
    # One request over both GPUs, twice on GPU 1 (two shares of it): each GPU's device once.
    apiserver.put(
        claim(
            "u1",
            "c1",
            result("gpu-0", "2Gi", share="a"),
            result("gpu-1", "2Gi", share="b"),
            result("gpu-1", "3Gi", share="c"),
        )
    )
    got = kubelet.prepare(driver.settings.dra_socket, [("u1", "ns", "c1")]).claims["u1"]
    assert got.error == ""
    ours = f"{cdi.kind(DRIVER)}=u1-gpu"
    assert [list(d.cdi_device_ids) for d in got.devices] == [
        [ours, f"nvidia.com/gpu={fake_uuid(0)}"],
        [f"nvidia.com/gpu={fake_uuid(1)}"],
        [],
    ]
    spec = json.loads((short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")).read_text())
    env = spec["devices"][0]["containerEdits"]["env"]
    assert f"{resources.ENV_MEM_IDX}=0,1" in env
    visible = f"nvidia.com/gpu={fake_uuid(0)},nvidia.com/gpu={fake_uuid(1)}"
    assert f"{resources.ENV_VISIBLE_DEVICES}={visible}" in env  # the same devices, fully qualified
    assert driver.metrics.registry.get_sample_value("gpushare_device_list", {"mode": "cdi-cri"}) == 1


def test_without_a_toolkit_spec_a_claim_gets_the_visible_devices_env_in_our_spec(
    apiserver, start, short_root
):
    driver = start(delivery=DeliverySettings("auto", (short_root / "cdi",)))
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0", "gpu-1"], what="the slice")
    apiserver.put(claim("u1", "c1", result("gpu-1", "4Gi")))
    got = kubelet.prepare(driver.settings.dra_socket, [("u1", "ns", "c1")]).claims["u1"]
    assert [list(d.cdi_device_ids) for d in got.devices] == [[f"{cdi.kind(DRIVER)}=u1-gpu"]]
    spec = json.loads((short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")).read_text())
    assert f"{resources.ENV_VISIBLE_DEVICES}={fake_uuid(1)}" in spec["devices"][0]["containerEdits"]["env"]


def test_forced_cdi_refuses_a_claim_on_a_gpu_no_spec_names_and_writes_nothing(apiserver, start, short_root):
    folders = _toolkit_spec(short_root, names=("index",), gpus="0:16")  # GPU 1 not named
    driver = start(delivery=DeliverySettings("cdi-cri", folders))
    apiserver.wait_for(lambda: _devices(apiserver) == ["gpu-0", "gpu-1"], what="the slice")
    apiserver.put(claim("u1", "c1", result("gpu-1", "4Gi")))
    got = kubelet.prepare(driver.settings.dra_socket, [("u1", "ns", "c1")]).claims["u1"]
    assert got.error.startswith(
        f"ResourceClaim ns/c1: GPU 1 ({fake_uuid(1)}) is not a CDI device of kind nvidia.com/gpu in the "
        f"specs read from {folders[0]}, {folders[1]} (device-list strategy cdi-cri)"
    )
    assert not (short_root / "cdi" / cdi.file_name(cdi.kind(DRIVER), "u1")).exists()
