"""Fixtures for the device plugin: a plugin serving under tmp_path and the kubelet stand-in beside it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.standins.kubelet import Kubelet
from webhook.core.node import devices, podviews
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.deviceplugin import allocator, app, reconcile, registration, server, state
from webhook.deviceplugin.settings import DevicePluginSettings
from webhook.gpus import inventory

CARDS = resources.NVIDIA_GPU
Start = Callable[..., tuple[app.Plugin, Kubelet]]


class ListPods:
    """A PodSource over pod dicts set by the test (the watch-fed source is tested on its own)."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.version = 0
        self._changed = threading.Condition()

    def set(self, pods: list[dict[str, Any]]) -> None:
        with self._changed:
            self.pods = list(pods)
            self.version += 1
            self._changed.notify_all()

    def snapshot(self) -> tuple[int, list[podviews.PodView]]:
        with self._changed:
            views = [podviews.pod_view(p, n) for n, p in enumerate(self.pods)]
            return self.version, [v for v in views if v is not None]

    def wait_newer(self, version: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self.version != version, timeout)


@dataclass
class Marks:
    marked: list[str] = field(default_factory=list)

    def mark(self, pod: podviews.PodView) -> None:
        self.marked.append(pod.key)


@dataclass
class Plugin:
    dir: Path
    state: state.DeviceState
    pods: ListPods
    marks: Marks
    service: server.DevicePluginService
    server: registration.PluginServer
    isolation: list[bool]
    allocator: allocator.Allocator
    kubelet_pods: reconcile.PodResourcesClient | None


def pod_resources_socket(tmp_path: Path) -> Path:
    return tmp_path / "pr" / "kubelet.sock"


def short_dir(tmp_path: Path) -> Path:
    # A unix socket path must stay under 108 bytes.
    path = tmp_path / "dp"
    assert len(str(path / "kubelet.sock")) < 100, path
    return path


@pytest.fixture
def make_plugin(tmp_path: Path) -> Iterator[Callable[..., Plugin]]:
    started: list[registration.PluginServer] = []

    def make(
        fake_gpus: str = "0:16,1:16",
        unit: str = "GiB",
        mib_per_device: int | None = None,
        wait_s: float = 0.3,
        *,
        pod_resources: bool = False,
        pods: ListPods | None = None,
    ) -> Plugin:
        plugin_dir = short_dir(tmp_path)
        gpus = inventory.parse_fake_gpus(fake_gpus).gpus()
        st = state.DeviceState(gpus, devices.Granularity.parse(unit, mib_per_device))
        pods, marks, isolation = pods or ListPods(), Marks(), [False]
        client = (
            reconcile.PodResourcesClient(pod_resources_socket(tmp_path), resources.GPU_MEMORY)
            if pod_resources
            else None
        )
        alloc = allocator.Allocator(
            st,
            pods,
            marks,
            isolation_disabled=lambda: isolation[0],
            node_name="node-1",
            wait_s=wait_s,
            kubelet=client,
        )
        service = server.DevicePluginService(st, alloc)
        settings = registration.RegistrationSettings(
            plugin_dir, "gpushare.sock", resources.GPU_MEMORY, poll_s=0.05
        )
        srv = registration.PluginServer(service, settings).start()
        started.append(srv)
        return Plugin(plugin_dir, st, pods, marks, service, srv, isolation, alloc, client)

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[Kubelet]:
    k = Kubelet(short_dir(tmp_path), pod_resources=pod_resources_socket(tmp_path)).start()
    yield k
    k.stop()


@pytest.fixture
def whole_plugin(apiserver: ApiServer, tmp_path: Path) -> Iterator[Start]:
    """The whole plugin (app.Plugin) against the API stand-in, with a kubelet stand-in for both resources
    and its PodResources API; `make(labels, fake_gpus, kubelet=None, **settings)`."""
    running: list[tuple[app.Plugin, Kubelet]] = []

    def make(
        labels: dict[str, str] | None = None,
        fake_gpus: str = "0:16,1:16,2:16",
        kubelet: Kubelet | None = None,  # given: a plugin restart beside a running kubelet
        **settings: Any,
    ) -> tuple[app.Plugin, Kubelet]:
        plugin_dir = short_dir(tmp_path)
        socket = pod_resources_socket(tmp_path)
        if kubelet is None:
            apiserver.add_node("node-1", labels=labels or {})
            kubelet = Kubelet(plugin_dir, pod_resources=socket, also=(CARDS,)).start()
        config = DevicePluginSettings(
            node_name="node-1",
            fake_gpus=fake_gpus,
            api_host=apiserver.url,
            device_plugin_dir=plugin_dir,
            endpoint="gpushare.sock",
            **{"pod_resources_socket": socket, "allocate_wait_s": 0.3, **settings},
        )
        seen, cards_seen = kubelet.messages, kubelet.resource(CARDS).messages
        plugin = app.Plugin(config).start()
        running.append((plugin, kubelet))
        kubelet.wait(lambda k: k.messages > seen and k.resource(CARDS).messages > cards_seen, timeout=10)
        return plugin, kubelet

    yield make
    for plugin, kubelet in running:
        plugin.stop()
        kubelet.stop()
