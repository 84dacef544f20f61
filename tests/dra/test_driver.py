"""The whole driver in-process against the API stand-in and a stand-in kubelet: it publishes its slice
once the node is in a DRA mode, registers, prepares a claim the API holds into a CDI spec, survives a
restart with the claim prepared, drops an unhealthy GPU from the slice, and follows a mode change."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dra import kubelet
from tests.dra.conftest import DRIVER, NODE, claim, result
from tests.gpus.stoporder import StopOrder
from webhook.core.node import cdi, draslice, mps
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.dra import app
from webhook.dra.settings import DraSettings

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


def test_a_second_instance_fails_to_start_naming_the_first(start):
    start()
    with pytest.raises(app.StartError, match="another gpushare DRA driver serves"):
        start()


def test_an_unreadable_checkpoint_stops_the_start(start, short_root):
    path = short_root / "plugins" / DRIVER / "checkpoint.json"
    path.parent.mkdir(parents=True)
    path.write_text("{")
    with pytest.raises(app.StartError, match="is unreadable"):
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
