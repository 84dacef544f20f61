"""The registration socket as the kubelet's plugin watcher meets it, and the lifecycle of both sockets:
GetInfo names the DRA socket and the services, a refusal is heard, a removed socket is served again, a
second instance is kept away and stopping removes both files."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.dra import kubelet
from tests.dra.conftest import DRIVER, Claims
from webhook.core.node import cdi, devices
from webhook.dra import checkpoint, preparer, registration, server
from webhook.dra.cdispecs import SpecFiles
from webhook.nodeagent import unixsockets


def _sockets(root: Path) -> registration.Sockets:
    return registration.Sockets(
        DRIVER, root / "plugins" / DRIVER / "dra.sock", root / "registry" / f"{DRIVER}-reg.sock", poll_s=0.05
    )


@pytest.fixture
def driver_server(short_root: Path) -> Iterator[registration.DriverServer]:
    prep = preparer.Preparer(
        driver=DRIVER,
        node="n",
        gpus=(devices.Gpu(0, "GPU-a", 16384),),
        granularity=devices.Granularity(),
        claims=Claims(),
        store=checkpoint.Checkpoint(short_root / "checkpoint.json"),
        specs=SpecFiles(short_root / "cdi", cdi.kind(DRIVER)),
    )
    srv = registration.DriverServer(_sockets(short_root), lambda s: server.add_services(s, prep))
    try:
        yield srv.start()
    finally:
        srv.stop()


def test_get_info_names_the_driver_its_socket_and_the_services_the_kubelet_knows(driver_server):
    sockets = driver_server.sockets
    info = kubelet.register(sockets.registration_socket)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(sockets.dra_socket))
    services = ["v1.DRAPlugin", "v1beta1.DRAPlugin", "v1alpha1.DRAResourceHealth"]
    assert list(info.supported_versions) == services
    assert driver_server.registered.is_set()
    # The endpoint it named answers the DRA calls.
    assert kubelet.unprepare(info.endpoint, [("u", "ns", "c")]).claims["u"].error == ""


def test_a_refused_registration_is_heard(driver_server):
    kubelet.register(driver_server.sockets.registration_socket)
    kubelet.register(driver_server.sockets.registration_socket, accept=False, error="bad versions")
    assert not driver_server.registered.is_set()
    assert driver_server.registration.notifications == 2


@pytest.mark.parametrize("which", ["registration_socket", "dra_socket"])
def test_a_removed_socket_is_served_again(driver_server, which):
    path: Path = getattr(driver_server.sockets, which)
    path.unlink()
    deadline = time.monotonic() + 10
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    info = kubelet.register(driver_server.sockets.registration_socket)
    assert kubelet.unprepare(info.endpoint, [("u", "ns", "c")]).claims["u"].error == ""


def test_a_second_instance_is_refused_naming_the_lock(driver_server, short_root):
    second = registration.DriverServer(_sockets(short_root), lambda s: None)
    with pytest.raises(
        unixsockets.AlreadyRunning, match=r"another gpushare DRA driver serves .*\.driver\.lock"
    ):
        second.take_lock()
    kubelet.register(driver_server.sockets.registration_socket)  # the first one is undisturbed


def test_stopping_removes_both_sockets(short_root):
    srv = registration.DriverServer(_sockets(short_root), lambda s: None).start()
    srv.stop()
    assert not srv.sockets.dra_socket.exists() and not srv.sockets.registration_socket.exists()
    with pytest.raises(grpc.RpcError):
        kubelet.register(srv.sockets.registration_socket)
