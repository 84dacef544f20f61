"""The gpushare annotations: the only state shared by the extender, the device plugin and the tools.

The extender encodes a `Placement` onto the pod at bind time; the device plugin decodes it in Allocate
and marks it assigned; `inspect` and the extender's cache decode it to count memory. The node's GPUs
are published by the device plugin as `NodeDevices` in the node annotation `NODE_DEVICES_ANNOTATION`.
All values are decimal strings, as the original protocol writes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

import orjson

from webhook.core.wire import resources
from webhook.core.wire.units import unit_mib


class AnnotationError(ValueError):
    """An annotation that is present but cannot be read; names the key and what is wrong."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"annotation {key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Allocation:
    """GPU memory held by a pod: container index (in spec.containers) -> {GPU index -> units}."""

    containers: Mapping[int, Mapping[int, int]] = field(default_factory=dict)

    def per_gpu(self) -> dict[int, int]:
        totals: dict[int, int] = {}
        for gpus in self.containers.values():
            for gpu, units in gpus.items():
                totals[gpu] = totals.get(gpu, 0) + units
        return totals

    def total(self) -> int:
        return sum(self.per_gpu().values())

    def gpus(self) -> tuple[int, ...]:
        return tuple(sorted(self.per_gpu()))

    def for_container(self, index: int) -> Mapping[int, int]:
        return self.containers.get(index, {})

    def to_json(self) -> str:
        # Keys are strings on the wire: {"<containerIndex>": {"<gpuIndex>": <memory>}}.
        wire = {
            str(c): {str(g): u for g, u in sorted(gpus.items())}
            for c, gpus in sorted(self.containers.items())
        }
        return orjson.dumps(wire).decode()  # compact, as json.dumps with (",", ":"); one per bind

    @classmethod
    def from_json(cls, text: str) -> Allocation:
        key = resources.ANN_ALLOCATION
        wire = _load_json(key, text)
        if not isinstance(wire, dict):
            raise AnnotationError(key, "must be a JSON object of container index -> {GPU index: memory}")
        containers: dict[int, dict[int, int]] = {}
        for c, gpus in wire.items():
            if not isinstance(gpus, dict):
                raise AnnotationError(key, f"container {c!r} must map GPU index to memory")
            containers[_units(key, c)] = {_units(key, g): _units(key, u) for g, u in gpus.items()}
        return cls(containers)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the extender placed a pod, as written in its annotations."""

    allocation: Allocation
    device_memory: int  # ALIYUN_COM_GPU_MEM_DEV: memory of the first chosen GPU, same unit
    assume_time_ns: int
    assigned: bool = False

    @property
    def gpu_indexes(self) -> tuple[int, ...]:
        return self.allocation.gpus()

    @property
    def pod_total(self) -> int:
        return self.allocation.total()


def encode(placement: Placement) -> dict[str, str]:
    """The annotations the extender writes at bind time.

    ALIYUN_COM_GPU_MEM_IDX holds one index, as the original writes it; a pod spread over several GPUs
    gets a comma-separated list, so a tool that reads it as one integer fails loudly instead of
    counting all memory on one card. The allocation JSON is the full per-container truth.
    """
    return {
        resources.ANN_MEM_IDX: ",".join(str(g) for g in placement.gpu_indexes),
        resources.ANN_MEM_POD: str(placement.pod_total),
        resources.ANN_MEM_DEV: str(placement.device_memory),
        resources.ANN_MEM_ASSIGNED: "true" if placement.assigned else "false",
        resources.ANN_MEM_ASSUME_TIME: str(placement.assume_time_ns),
        resources.ANN_ALLOCATION: placement.allocation.to_json(),
    }


def decode(annotations: Mapping[str, str] | None) -> Placement | None:
    """The placement in a pod's annotations; None when the extender never placed it.

    Pods placed by the original extender carry only the five ALIYUN_COM_* keys: their whole
    ALIYUN_COM_GPU_MEM_POD is counted on ALIYUN_COM_GPU_MEM_IDX, against container 0.
    """
    annotations = annotations or {}
    raw_idx = annotations.get(resources.ANN_MEM_IDX)
    raw_alloc = annotations.get(resources.ANN_ALLOCATION)
    if raw_idx is None and raw_alloc is None:
        return None
    if raw_alloc is not None:
        allocation = Allocation.from_json(raw_alloc)
    else:
        assert raw_idx is not None
        gpus = [_units(resources.ANN_MEM_IDX, part) for part in raw_idx.split(",")]
        total = _units(resources.ANN_MEM_POD, annotations.get(resources.ANN_MEM_POD, ""))
        if len(gpus) != 1:
            if total % len(gpus):
                raise AnnotationError(resources.ANN_MEM_POD, f"{total} does not split over GPUs {raw_idx}")
            allocation = Allocation({0: {g: total // len(gpus) for g in gpus}})
        else:
            allocation = Allocation({0: {gpus[0]: total}})
    dev = annotations.get(resources.ANN_MEM_DEV)
    assume = annotations.get(resources.ANN_MEM_ASSUME_TIME)
    return Placement(
        allocation=allocation,
        device_memory=_units(resources.ANN_MEM_DEV, dev) if dev is not None else 0,
        assume_time_ns=_units(resources.ANN_MEM_ASSUME_TIME, assume) if assume is not None else 0,
        assigned=_flag(resources.ANN_MEM_ASSIGNED, annotations.get(resources.ANN_MEM_ASSIGNED, "false")),
    )


def assigned(now_ns: int) -> dict[str, str]:
    """The annotations the device plugin writes once Allocate has answered for the pod."""
    return {resources.ANN_MEM_ASSIGNED: "true", resources.ANN_MEM_ASSUME_TIME: str(now_ns)}


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One physical GPU of a node, as the device plugin publishes it."""

    index: int
    uuid: str
    memory: int  # in NodeDevices.unit
    healthy: bool = True
    model: str = ""


@dataclass(frozen=True, slots=True)
class NodeDevices:
    """The GPUs of one node; the value of the node annotation NODE_DEVICES_ANNOTATION."""

    unit: str
    devices: tuple[GpuDevice, ...]

    def to_json(self) -> str:
        wire = {
            "unit": self.unit,
            "devices": [
                {"index": d.index, "uuid": d.uuid, "memory": d.memory, "healthy": d.healthy, "model": d.model}
                for d in sorted(self.devices, key=lambda d: d.index)
            ],
        }
        return json.dumps(wire, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> NodeDevices:
        key = resources.NODE_DEVICES_ANNOTATION
        wire = _load_json(key, text)
        if not isinstance(wire, dict) or not isinstance(wire.get("devices"), list):
            raise AnnotationError(key, 'must be {"unit": "GiB"|"MiB", "devices": [...]}')
        unit = wire.get("unit", "GiB")
        try:
            unit_mib(unit)
        except ValueError as err:
            raise AnnotationError(key, str(err)) from None
        devices = []
        seen: set[int] = set()
        for raw in wire["devices"]:
            if not isinstance(raw, dict):
                raise AnnotationError(key, "each device must be an object")
            index = _units(key, raw.get("index"))
            if index in seen:
                raise AnnotationError(key, f"GPU index {index} appears twice")
            seen.add(index)
            healthy = raw.get("healthy", True)
            if not isinstance(healthy, bool):
                raise AnnotationError(key, f"GPU {index}: healthy must be true or false")
            devices.append(
                GpuDevice(
                    index=index,
                    uuid=str(raw.get("uuid", "")),
                    memory=_units(key, raw.get("memory")),
                    healthy=healthy,
                    model=str(raw.get("model", "")),
                )
            )
        return cls(unit=unit, devices=tuple(sorted(devices, key=lambda d: d.index)))


def _load_json(key: str, text: str) -> object:
    """The annotation's JSON value; AnnotationError for anything json cannot read."""
    try:
        return json.loads(text)
    except RecursionError:
        # "[[[[..." deeper than the interpreter's stack: anyone can write an annotation, and an
        # escaping RecursionError would stop the reader of every pod of the node, not just this one.
        raise AnnotationError(key, "not JSON (nested too deeply)") from None
    except ValueError as err:
        raise AnnotationError(key, f"not JSON ({err.args[0]})") from None


def _units(key: str, raw: object) -> int:
    """A non-negative decimal integer, given as a JSON number or a decimal string."""
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and len(raw) <= 30:
        return int(raw)
    raise AnnotationError(key, f"{_shown(raw)} is not a non-negative integer")


def _shown(raw: object) -> str:
    # A nested list or a long string would flood the message (and a deep one can fail repr).
    if isinstance(raw, (list, dict)):
        return f"a JSON {'array' if isinstance(raw, list) else 'object'}"
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


def _flag(key: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise AnnotationError(key, f"{raw!r} is not true or false")
