"""GPU discovery behind the `GpuInventory` protocol: NVML on a GPU node, a declared fake inventory elsewhere.
Shared by the device plugin and the DRA driver (`discover` picks the source from their flags).

`pynvml` (nvidia-ml-py) is imported only when the NVML inventory is built, so the plugin, its tests and
`--fake-gpus` runs never need a driver. GPUs of different sizes are kept apart: each has its own memory.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import yaml

from webhook.core.node import devices, gpulabels


class InventoryError(ValueError):
    """A fake-GPU declaration or inventory file that cannot be read; says which part is wrong."""


class GpuInventory(Protocol):
    def gpus(self) -> tuple[devices.Gpu, ...]: ...


class FakeInventory:
    """GPUs declared by flag or file; nothing is probed."""

    def __init__(self, gpus: Sequence[devices.Gpu]) -> None:
        try:
            devices.check_inventory(gpus)
        except devices.DeviceError as err:
            raise InventoryError(str(err)) from None
        self._gpus = tuple(sorted(gpus, key=lambda g: g.index))

    def gpus(self) -> tuple[devices.Gpu, ...]:
        return self._gpus


def fake_uuid(index: int) -> str:
    """A stable, UUID-shaped ID for fake GPU `index` (same on every run, as a real UUID is)."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_OID, f'gpushare-fake-gpu-{index}')}"


def parse_memory_mib(raw: object, where: str) -> int:
    """`16` or `"16"` (GiB), `"16GiB"`, `"16130MiB"` -> MiB."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        text = str(raw)
    elif isinstance(raw, str):
        text = raw.strip()
    else:
        raise InventoryError(f"{where}: memory {raw!r} is not a number")
    factor = 1024
    for suffix, mult in (("GiB", 1024), ("MiB", 1)):
        if text.endswith(suffix):
            text, factor = text[: -len(suffix)].strip(), mult
            break
    if not (text.isascii() and text.isdigit()) or len(text) > 9 or int(text) <= 0:
        raise InventoryError(
            f"{where}: memory {raw!r} must be a positive whole number of GiB, or e.g. '16130MiB'"
        )
    return int(text) * factor


def parse_fake_gpus(spec: str) -> FakeInventory:
    """`--fake-gpus "0:16,1:16,2:24"`: index:memory pairs, memory in GiB unless it says MiB; optionally
    `:<model>:<compute capability>` after each, e.g. `0:16:Tesla V100-SXM2-16GB:7.0` (default model `fake`,
    compute capability unknown)."""
    gpus = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        fields = part.split(":")
        if not 2 <= len(fields) <= 4 or not fields[0].strip().isdigit():
            raise InventoryError(
                f"--fake-gpus: {part!r} is not <index>:<memory>[:<model>[:<compute capability>]], e.g. 0:16"
            )
        index = int(fields[0])
        model = fields[2].strip() if len(fields) > 2 else "fake"
        capability = _capability(fields[3] if len(fields) > 3 else "", f"--fake-gpus {part!r}")
        memory = parse_memory_mib(fields[1], f"--fake-gpus {part!r}")
        gpus.append(devices.Gpu(index, fake_uuid(index), memory, model or "fake", capability))
    if not gpus:
        raise InventoryError("--fake-gpus declares no GPU; write e.g. '0:16,1:16,2:24'")
    return FakeInventory(gpus)


def read_document(path: Path, what: str, *, missing_ok: bool = False) -> Any:
    """The YAML or JSON document of a declared file (None for an empty one, and for a missing one when
    `missing_ok`); InventoryError naming `what`, the file and why."""
    try:
        text = path.read_text()
    except FileNotFoundError as err:
        if missing_ok:
            return None
        raise InventoryError(f"{what} {path}: {err.strerror or err}") from None
    except OSError as err:
        raise InventoryError(f"{what} {path}: {err.strerror or err}") from None
    try:
        return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        raise InventoryError(f"{what} {path}: not YAML/JSON ({err})") from None


def load_inventory_file(path: Path) -> FakeInventory:
    """A YAML or JSON file: `gpus: [{index: 0, memory: 16GiB, uuid: ..., model: ..., compute_capability:
    "7.0"}, ...]`; uuid, model and compute_capability are optional."""
    data = read_document(path, "inventory file")
    items = data.get("gpus") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise InventoryError(f"inventory file {path}: expected 'gpus: [{{index: 0, memory: 16GiB}}, ...]'")
    gpus = []
    for n, item in enumerate(items):
        where = f"inventory file {path}: gpus[{n}]"
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("index"), int)
            or isinstance(item["index"], bool)
        ):
            raise InventoryError(f"{where}: needs an integer 'index'")
        index = item["index"]
        memory = parse_memory_mib(item.get("memory"), where)
        capability = _capability(str(item.get("compute_capability", "")), where)
        uuid_ = str(item.get("uuid") or fake_uuid(index))
        gpus.append(devices.Gpu(index, uuid_, memory, str(item.get("model", "")), capability))
    return FakeInventory(gpus)


def discover(fake_gpus: str = "", inventory_file: Path | None = None) -> GpuInventory:
    """The node's GPUs: declared by `--fake-gpus`, else by an inventory file, else from NVML.
    InventoryError says why none could be read."""
    if fake_gpus:
        return parse_fake_gpus(fake_gpus)
    if inventory_file:
        return load_inventory_file(inventory_file)
    try:
        return NvmlInventory()
    except Exception as err:  # pynvml missing, no driver, NVML errors: all mean "no GPUs to serve"
        raise InventoryError(
            f"GPU discovery through NVML failed ({err}); on a node without GPUs use --fake-gpus"
        ) from None


def present(inv: GpuInventory) -> tuple[devices.Gpu, ...]:
    """The GPUs of `inv`; InventoryError when there are none (an agent then has nothing to serve)."""
    gpus = inv.gpus()
    if not gpus:
        raise InventoryError("no GPUs found on this node")
    return gpus


class NvmlInventory:
    """The node's GPUs from NVML: index, UUID, total memory, model, compute capability. Read once; restart
    to rediscover."""

    def __init__(self) -> None:
        import pynvml  # noqa: PLC0415  (lazy: only GPU nodes have libnvidia-ml)

        self._nvml = pynvml
        pynvml.nvmlInit()
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                devices.Gpu(
                    index=index,
                    uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
                    memory_mib=int(memory.total) // (1024 * 1024),
                    model=_text(pynvml.nvmlDeviceGetName(handle)),
                    compute_capability=_nvml_capability(pynvml, handle),
                )
            )
        devices.check_inventory(gpus)
        self._gpus = tuple(gpus)

    def gpus(self) -> tuple[devices.Gpu, ...]:
        return self._gpus

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def _capability(text: str, where: str) -> str:
    """A declared compute capability: "" (unknown) or "<major>.<minor>", e.g. "7.0"."""
    text = text.strip()
    if text and gpulabels.compute_capability(text) is None:
        raise InventoryError(f"{where}: compute capability {text!r} is not <major>.<minor>, e.g. 7.0")
    return text


def _nvml_capability(nvml: Any, handle: Any) -> str:
    try:
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
    except Exception:  # an old driver without the call: unknown, so MPS is refused, never guessed
        return ""
    return f"{int(major)}.{int(minor)}"


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
