"""A node agent's start and stop, the parts both agents share: the GPUs and the API client opened at
start (a failure is a StartError: exit 1), the probe port and socket locks taken first, the GPU health
watcher, NVML and the API client closed last, and `run`, which serves until SIGTERM or SIGINT.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Protocol

import kubernetes.client
import prometheus_client

from webhook import __version__
from webhook.core.node import devices
from webhook.gpus import health, inventory
from webhook.kube import client, errors
from webhook.nodeagent.settings import NodeAgentSettings, SettingsError
from webhook.nodeagent.unixsockets import AlreadyRunning
from webhook.serving import logs, probeserver, stopsignals
from webhook.serving import server as http_server


class StartError(Exception):
    """The agent cannot start: no GPUs, an unreadable file, no API, a socket or port in use."""


def discover(settings: NodeAgentSettings) -> tuple[inventory.GpuInventory, tuple[devices.Gpu, ...]]:
    """The node's GPUs: the inventory (NVML, or the declared fake one) and the GPUs present in it."""
    try:
        found = inventory.discover(settings.fake_gpus, settings.inventory_file)
        return found, inventory.present(found)
    except inventory.InventoryError as err:
        raise StartError(str(err)) from None


def connect(settings: NodeAgentSettings) -> kubernetes.client.ApiClient:
    try:
        return client.connect(client.ClientSettings(host=settings.api_host, kubeconfig=settings.kubeconfig))
    except errors.ApiError as err:  # a kubeconfig or in-cluster configuration that cannot be used
        raise StartError(err.message) from None


def health_watcher(settings: NodeAgentSettings, inv: inventory.GpuInventory) -> health.HealthWatcher:
    return health.watcher(settings.health_file, inv, settings.health_recovery_s)


@dataclass
class Probes:
    """The probe port (`/healthz`, `/metrics` and the agent's own routes); none when `port` is 0."""

    port: int
    ready: Callable[[], bool]
    registry: prometheus_client.CollectorRegistry
    routes: Mapping[str, Callable[[], probeserver.Reply]] | None = None
    http: ThreadingHTTPServer | None = field(default=None, init=False)

    def open(self) -> None:
        if self.port:
            self.http = probeserver.serve(self.port, self.ready, self.registry, self.routes)

    def close(self) -> None:
        http, self.http = self.http, None
        if http is not None:
            http.shutdown()
            http.server_close()


def claim(probes: Probes, locks: Iterable[Callable[[], None]], undo: Callable[[], None]) -> None:
    """First at start: the probe port, then each socket lock (`locks` take them), so that a busy port or a
    second instance fails before anything is served, registered or left behind; `undo` closes what was
    opened before."""
    try:
        probes.open()
        for take in locks:
            take()
    except (AlreadyRunning, http_server.ServeError) as err:
        probes.close()
        undo()
        raise StartError(str(err)) from None


def close(
    health_thread: threading.Thread | None, inv: inventory.GpuInventory, api: kubernetes.client.ApiClient
) -> None:
    """Last at stop: the health watcher ends before the inventory shuts NVML down, then the API client."""
    health.join(health_thread)
    shutdown = getattr(inv, "close", None)
    if shutdown is not None:
        shutdown()
    api.close()  # type: ignore[no-untyped-call]


class Agent(Protocol):
    def stop(self) -> None: ...


def run(start: Callable[[], Agent], settings: NodeAgentSettings, log: logging.Logger, what: str) -> int:
    """Start the agent (`start` builds and starts it), log `what` runs, serve until SIGTERM or SIGINT."""
    logs.configure(settings.log_level, settings.log_format)
    try:
        agent = start()
    except SettingsError as err:
        raise StartError(str(err)) from None
    except OSError as err:
        raise StartError(f"cannot serve: {err}") from None
    stop = stopsignals.event()
    log.info("gpushare %s: %s running on node %s", __version__, what, settings.node_name)
    stop.wait()
    agent.stop()
    return 0
