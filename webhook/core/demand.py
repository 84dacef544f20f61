"""What a pod asks of shared GPU memory: per-container `aliyun.com/gpu-mem` and the GPU-count split.

The webhook's rules, the extender's filter and the device plugin's Allocate all read a pod's demand
through `pod_demand`, so they agree on the numbers (HAMi's lesson: one device model for all parts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import quantity, resources


class DemandError(ValueError):
    """A pod whose GPU-memory request cannot be read; the message says what to fix."""


@dataclass(frozen=True, slots=True)
class GpuMemoryDemand:
    """gpu-mem units per container (spec.containers order, 0 when none) and GPUs to spread over."""

    containers: tuple[int, ...]
    init_containers: tuple[int, ...] = ()
    gpu_count: int = 1

    @property
    def total(self) -> int:
        """The pod's total: the sum over app containers (ALIYUN_COM_GPU_MEM_POD)."""
        return sum(self.containers)

    @property
    def effective(self) -> int:
        """What the pod holds at once: init containers run one by one, before the app containers."""
        return max(self.total, max(self.init_containers, default=0))

    @property
    def per_gpu(self) -> int:
        """Units on each of the `gpu_count` GPUs when the pod is split over several GPUs."""
        return self.total // self.gpu_count

    def asks(self) -> bool:
        return self.effective > 0


def container_units(container: Mapping[str, Any], name: str = resources.GPU_MEMORY) -> int:
    """A container's whole-unit limit (or, failing that, request) of resource `name`; 0 when absent."""
    res = container.get("resources") or {}
    if not isinstance(res, Mapping):
        raise DemandError(f"container {container.get('name')!r}: resources must be an object")
    for section in ("limits", "requests"):
        values = res.get(section) or {}
        if isinstance(values, Mapping) and name in values:
            try:
                q = quantity.from_json(values[name])
            except ValueError as err:  # QuantityError, or a value holding an int too long to print
                raise DemandError(f"container {container.get('name')!r}: {section}[{name}] {err}") from None
            if q.is_negative() or not q.is_integer():
                raise DemandError(
                    f"container {container.get('name')!r}: {section}[{name}] {q} is not a whole number"
                )
            return q.to_int()
    return 0


def gpu_count(labels: Mapping[str, Any] | None, key: str = resources.GPU_COUNT_LABEL) -> int:
    """The number of GPUs the pod label asks to spread over (1 when unset)."""
    if labels is not None and not isinstance(labels, Mapping):
        raise DemandError("metadata.labels must be an object")
    raw = (labels or {}).get(key)
    if raw is None:
        return 1
    # Python refuses to convert ints of more than 4300 digits to or from text: check the size first.
    if isinstance(raw, str):
        text, shown = raw.strip(), repr(raw[:40])
    elif isinstance(raw, int) and raw.bit_length() < 64:
        text = shown = str(raw)
    else:
        text, shown = "", f"<{type(raw).__name__}>"
    if not (text.isascii() and text.isdigit()) or len(text) > 6 or int(text) < 1:
        raise DemandError(f'label {key}={shown} must be a positive whole number of GPUs, e.g. "2"')
    return int(text)


def check_split(total: int, count: int, key: str = resources.GPU_COUNT_LABEL) -> None:
    """Several GPUs for one pod: the pod's total must split evenly (N/M whole units per GPU)."""
    if count > 1 and total % count:
        raise DemandError(
            f"label {key}={count} asks to split the pod's {total} units of GPU memory over {count} GPUs, "
            f"which is not a whole number per GPU; use a total that is a multiple of {count}"
        )


def pod_demand(pod: Mapping[str, Any], names: resources.GpuResourceNames | None = None) -> GpuMemoryDemand:
    """Read a pod (or pod template: metadata + spec) into its GPU-memory demand."""
    names = names or resources.GpuResourceNames()
    spec = pod.get("spec") or {}
    metadata = pod.get("metadata") or {}
    if not isinstance(spec, Mapping) or not isinstance(metadata, Mapping):
        raise DemandError("pod spec and metadata must be objects")
    app = tuple(container_units(c, names.memory) for c in _containers(spec, "containers"))
    init = tuple(container_units(c, names.memory) for c in _containers(spec, "initContainers"))
    count = gpu_count(metadata.get("labels"), names.count)
    check_split(sum(app), count, names.count)
    return GpuMemoryDemand(containers=app, init_containers=init, gpu_count=count)


def _containers(spec: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = spec.get(key) or []
    if not isinstance(items, list) or not all(isinstance(c, Mapping) for c in items):
        raise DemandError(f"spec.{key} must be a list of containers")
    return items
