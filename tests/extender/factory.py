"""Builders of the Pod and Node JSON the extender tests feed in, a fake BindingApi, and a Binder that
binds as the app does on its event loop."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.extender.bind.binder import Binder
from webhook.extender.bind.calls import BindingApi
from webhook.extender.wire import BindingArgs
from webhook.kube import errors


def node(name: str, *sizes: int, unhealthy: tuple[int, ...] = ()) -> dict[str, Any]:
    devices = ann.NodeDevices(
        "GiB",
        tuple(ann.GpuDevice(i, f"GPU-{name}-{i}", m, i not in unhealthy) for i, m in enumerate(sizes)),
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": {resources.NODE_DEVICES_ANNOTATION: devices.to_json()}},
        "status": {"capacity": {resources.GPU_MEMORY: str(sum(sizes)), resources.GPU_COUNT: str(len(sizes))}},
    }


def pod(
    name: str,
    *gpu_mem: int,
    namespace: str = "default",
    uid: str | None = None,
    gpu_count: int | None = None,
    node_name: str | None = None,
    placed: dict[int, dict[int, int]] | None = None,
    phase: str = "Pending",
    policy: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
    if gpu_count is not None:
        meta["labels"] = {resources.GPU_COUNT_LABEL: str(gpu_count)}
    notes: dict[str, str] = {}
    if placed is not None:
        notes.update(ann.encode(ann.Placement(ann.Allocation(placed), 16, 1)))
    if policy is not None:
        notes[resources.PLACEMENT_POLICY_ANNOTATION] = policy
    if notes:
        meta["annotations"] = notes
    containers = [
        {"name": f"c{i}", "image": "x", "resources": {"limits": {resources.GPU_MEMORY: str(m)}} if m else {}}
        for i, m in enumerate(gpu_mem or (0,))
    ]
    spec: dict[str, Any] = {"containers": containers}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def api_error(status: int, message: str) -> errors.ApiError:
    """What webhook.kube raises for an HTTP `status` (0: no answer) with a Status carrying `message`."""
    if status == errors.TRANSPORT:
        return errors.ApiError(errors.TRANSPORT, "ConnectionError", message)
    return errors.from_status(status, {"message": message})


class FakeApi:
    """A BindingApi in memory: pods by key; `failures` pops one (status, message) per bind call."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.failures: list[tuple[int, str]] = []
        self.get_failures: list[tuple[int, str]] = []  # popped one per get_pod call
        self.gets: list[str] = []  # the key of each get_pod call, in order
        self.bound: list[tuple[str, str, dict[str, str]]] = []
        self.lock = threading.Lock()
        self.apply_failed_bind = False  # a bind that fails but did happen (lost reply)
        self.entered = threading.Event()  # set when a bind call arrives
        self.gate = threading.Event()  # bind calls wait for it (a slow API server); open by default
        self.gate.set()

    def add(self, obj: dict[str, Any]) -> None:
        self.pods[f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"] = obj

    def bind(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        self.entered.set()
        self.gate.wait(10)
        with self.lock:
            key = f"{namespace}/{name}"
            failure = self.failures.pop(0) if self.failures else None
            if failure is not None and not self.apply_failed_bind:
                raise api_error(*failure)
            pod = self.pods.get(key)
            if pod is None:
                raise api_error(404, f'pods "{name}" not found')
            if uid and pod["metadata"]["uid"] != uid:
                raise api_error(409, "Precondition failed: UID in precondition")
            if pod["spec"].get("nodeName"):
                raise api_error(409, f"pod {name} is already assigned to node {pod['spec']['nodeName']!r}")
            pod["spec"]["nodeName"] = node
            pod["metadata"].setdefault("annotations", {}).update(annotations)
            self.bound.append((key, node, dict(annotations)))
            if failure is not None:
                raise api_error(*failure)

    def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        with self.lock:
            self.gets.append(f"{namespace}/{name}")
            if self.get_failures:
                raise api_error(*self.get_failures.pop(0))
            return self.pods.get(f"{namespace}/{name}")


class OnLoop:
    """An AsyncBindingApi passing each call to a blocking BindingApi (the fake: its calls are instant
    unless a test holds its gate, which then holds this loop; each bind runs on a loop of its own)."""

    def __init__(self, inner: BindingApi) -> None:
        self.inner = inner

    async def bind(
        self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]
    ) -> None:
        self.inner.bind(namespace, name, uid, node, annotations)

    async def get_pod(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.inner.get_pod(namespace, name)

    def close(self) -> None:
        pass


class LoopBinder(Binder):
    """A Binder whose `bind` runs as the app's does with a loop API: `bind_on_loop` (here on a loop of
    its own per call), and the thread path only when another bind holds the pod's turn."""

    def bind(self, args: BindingArgs) -> str:
        result = asyncio.run(self.bind_on_loop(args, OnLoop(self.api)))
        return super().bind(args) if result is None else result
