"""What the DRA driver publishes: one ResourceSlice per node, one device per healthy GPU, its memory a
consumable capacity that kube-scheduler shares out itself (KEP-5075, resource.k8s.io/v1).

Each device allows multiple allocations; its `memory` capacity is the GPU's memory in whole units of the
configured granularity (GiB by default), with a request policy of those units: a claim asking 2500Mi
on a GiB node is rounded up to 3Gi by the scheduler. The policy's `default`, what a request naming no
capacity consumes, is the whole GPU: a whole-card claim (and `nvidia.com/gpu` mapped through the
DeviceClass's extendedResourceName) holds every unit, so no share lands beside it.

    devices([Gpu(0, "GPU-a", 16384, "Tesla T4", "7.5")], Granularity())
    -> [{"name": "gpu-0", "allowMultipleAllocations": True,
         "attributes": {"uuid": {"string": "GPU-a"}, "index": {"int": 0}, "model": {"string": "Tesla T4"},
                        "memoryMiB": {"int": 16384}, "cudaComputeCapability": {"version": "7.5.0"}},
         "capacity": {"memory": {"value": "16Gi", "requestPolicy": {"default": "16Gi",
                      "validRange": {"min": "1Gi", "max": "16Gi", "step": "1Gi"}}}}}]
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.core.node import devices, gpulabels
from webhook.core.wire import quantity

API_VERSION = "resource.k8s.io/v1"
# Ours, the domain of our annotations (gpushare.aliyun.com/devices): a DNS subdomain, as a driver name
# must be, and the prefix of our socket names under the kubelet's plugins folders.
DEFAULT_DRIVER = "gpushare.aliyun.com"
CAPACITY = "memory"
DEVICE_PREFIX = "gpu-"
# Not in the spec: what we published, so a restart or a periodic check rewrites only what changed.
HASH_ANNOTATION = "gpushare.aliyun.com/devices-hash"
_DRIVER_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_MAX_DRIVER = 63  # resource.DriverNameMaxLength
_MAX_NAME = 253
_STRING_LIMIT = 64  # resource.DeviceAttributeMaxValueLength


class SliceError(ValueError):
    """A driver name or node that cannot make a ResourceSlice; the message says why."""


def driver_name(text: str) -> str:
    """`text` when it can name a DRA driver (a lower-case DNS subdomain of at most 63 characters)."""
    if not text or len(text) > _MAX_DRIVER or not _DRIVER_NAME.match(text):
        raise SliceError(
            f"driver name {text!r} must be a lower-case DNS subdomain of at most {_MAX_DRIVER} characters, "
            f"e.g. {DEFAULT_DRIVER}"
        )
    return text


def device_name(index: int) -> str:
    return f"{DEVICE_PREFIX}{index}"


def gpu_index(name: str) -> int | None:
    """The GPU index of one of our device names (`gpu-3` -> 3); None for any other name."""
    tail = name.removeprefix(DEVICE_PREFIX)
    if tail == name or not (tail.isascii() and tail.isdigit()) or (len(tail) > 1 and tail[0] == "0"):
        return None
    return int(tail)


def mib_quantity(mib: int) -> str:
    """MiB as the API server writes the quantity (`16384` -> "16Gi"), so a read-back compares equal."""
    return quantity.parse(f"{mib}Mi").canonical()


def capacity(gpu: devices.Gpu, granularity: devices.Granularity) -> dict[str, Any] | None:
    """The GPU's `memory` capacity and its request policy; None when it holds less than one unit."""
    units = granularity.units(gpu.memory_mib)
    if units <= 0:
        return None
    step = mib_quantity(granularity.mib_per_device)
    whole = mib_quantity(units * granularity.mib_per_device)
    return {
        "value": whole,
        "requestPolicy": {"default": whole, "validRange": {"min": step, "max": whole, "step": step}},
    }


def attributes(gpu: devices.Gpu) -> dict[str, dict[str, Any]]:
    """uuid, index, model, memoryMiB and cudaComputeCapability (a semantic version, when known)."""
    out: dict[str, dict[str, Any]] = {
        "uuid": {"string": gpu.uuid[:_STRING_LIMIT]},
        "index": {"int": gpu.index},
        "memoryMiB": {"int": gpu.memory_mib},
    }
    if gpu.model:
        out["model"] = {"string": gpu.model[:_STRING_LIMIT]}
    found = gpulabels.compute_capability(gpu.compute_capability)
    if found is not None:
        out["cudaComputeCapability"] = {"version": f"{found[0]}.{found[1]}.0"}
    return out


def devices_of(
    gpus: Sequence[devices.Gpu], granularity: devices.Granularity, unhealthy: Iterable[int] = ()
) -> list[dict[str, Any]]:
    """The slice's devices: every healthy GPU holding at least one unit, in index order."""
    bad = set(unhealthy)
    out = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        memory = capacity(gpu, granularity)
        if gpu.index in bad or memory is None:
            continue
        out.append(
            {
                "name": device_name(gpu.index),
                "allowMultipleAllocations": True,
                "attributes": attributes(gpu),
                "capacity": {CAPACITY: memory},
            }
        )
    return out


def slice_name(node: str, driver: str) -> str:
    """`<node>-<driver>`; shortened with a hash when that passes 253 characters."""
    name = f"{node}-{driver}"
    if len(name) <= _MAX_NAME:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{node[: _MAX_NAME - len(digest) - 1].rstrip('.-')}-{digest}"


def devices_hash(devices_: Sequence[Mapping[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(devices_, sort_keys=True).encode()).hexdigest()[:32]


def resource_slice(
    node: str,
    driver: str,
    generation: int,
    devices_: Sequence[Mapping[str, Any]],
    node_uid: str = "",
) -> dict[str, Any]:
    """The node's one ResourceSlice (its pool is named after the node). With `node_uid` the Node owns it,
    so the garbage collector removes it with the Node."""
    metadata: dict[str, Any] = {
        "name": slice_name(node, driver),
        "annotations": {HASH_ANNOTATION: devices_hash(devices_)},
    }
    if node_uid:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}
        ]
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [dict(d) for d in devices_],
        },
    }


def published_hash(obj: Mapping[str, Any]) -> str:
    """The devices hash a slice read from the API carries; "" when absent."""
    notes = (obj.get("metadata") or {}).get("annotations") or {}
    value = notes.get(HASH_ANNOTATION, "")
    return value if isinstance(value, str) else ""


def generation(obj: Mapping[str, Any]) -> int:
    """The pool generation of a slice read from the API (0 when unreadable)."""
    value = ((obj.get("spec") or {}).get("pool") or {}).get("generation", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
