"""Kubelet-facing GPU memory: fake device IDs, their granularity, and the GPU each ID stands for.

The kubelet counts `aliyun.com/gpu-mem` as fake devices (one per memory unit, `<GPU UUID>-_-<j>`), so a
device ID names its GPU: that is how GetPreferredAllocation steers the kubelet to the extender's GPU and
how Allocate and PodResources tell which GPU a container holds (core.node.matching). Whole cards have one
ID per GPU, its UUID (`card_gpus`). Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from webhook.core.placement import annotations as ann

# `<GPU UUID>-_-<j>`, as the original plugin names them; the kubelet allows 63 characters.
DEVICE_ID_SEPARATOR = "-_-"
MAX_DEVICE_ID_LENGTH = 63
MIB_PER_GIB = 1024
# MiB mode: one fake device per block of this many MiB. One device per MiB makes 1,155,072 devices
# (~70 MB) for 8 x 141 GiB, far past the kubelet's 4 MB gRPC limit (fault 5); 128 MiB blocks make
# 9,024 devices (~0.56 MB).
DEFAULT_MIB_PER_DEVICE = 128
# The `<j>` of a device ID as `device_id` writes it: no sign, no leading zero, at most the ID's length.
_CANONICAL_NUMBER = re.compile(rf"0|[1-9][0-9]{{0,{MAX_DEVICE_ID_LENGTH - 1}}}")


class DeviceError(ValueError):
    """A device ID, inventory or granularity that cannot be used; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Granularity:
    """How much GPU memory one fake device stands for: 1 GiB, or a block of `mib_per_device` MiB."""

    unit: str = "GiB"
    mib_per_device: int = MIB_PER_GIB

    @classmethod
    def parse(cls, unit: str, mib_per_device: int | None = None) -> Granularity:
        if unit == "GiB":
            if mib_per_device not in (None, MIB_PER_GIB):
                raise DeviceError("--mib-per-device applies to --memory-unit MiB only")
            return cls("GiB", MIB_PER_GIB)
        if unit == "MiB":
            block = DEFAULT_MIB_PER_DEVICE if mib_per_device is None else mib_per_device
            if not 1 <= block <= 512 * MIB_PER_GIB:
                raise DeviceError(f"MiB per device must be between 1 and {512 * MIB_PER_GIB}, not {block}")
            return cls("MiB", block)
        raise DeviceError(f"memory unit {unit!r} is not GiB or MiB")

    @property
    def label(self) -> str:
        """The unit every number of the protocol is counted in: "GiB", "MiB" or e.g. "128MiB"."""
        if self.unit == "GiB":
            return "GiB"
        return "MiB" if self.mib_per_device == 1 else f"{self.mib_per_device}MiB"

    def units(self, memory_mib: int) -> int:
        """Whole units of a GPU's memory, rounded down (a 16130 MiB V100 has 15 GiB)."""
        return memory_mib // self.mib_per_device

    def describe(self, units: int) -> str:
        if self.label in ("GiB", "MiB"):
            return f"{units} {self.label}"
        return f"{units} x {self.mib_per_device} MiB"


@dataclass(frozen=True, slots=True)
class Gpu:
    """One physical GPU as discovered (NVML or a declared fake inventory)."""

    index: int
    uuid: str
    memory_mib: int
    model: str = ""
    compute_capability: str = ""  # "7.0"; "" when unknown (MPS then refuses: webhook/core/node/mps.py)


@dataclass(frozen=True, slots=True)
class FakeDevice:
    id: str
    gpu_index: int
    healthy: bool


def check_inventory(gpus: Sequence[Gpu]) -> None:
    """Indexes and UUIDs unique, UUIDs usable inside a device ID; raises DeviceError."""
    seen_index: set[int] = set()
    seen_uuid: set[str] = set()
    for gpu in gpus:
        if gpu.index < 0 or gpu.index in seen_index:
            raise DeviceError(f"GPU index {gpu.index} is negative or appears twice")
        if not gpu.uuid or gpu.uuid in seen_uuid or DEVICE_ID_SEPARATOR in gpu.uuid:
            raise DeviceError(f"GPU {gpu.index}: UUID {gpu.uuid!r} is empty, repeated or contains '-_-'")
        if gpu.memory_mib <= 0:
            raise DeviceError(f"GPU {gpu.index}: memory must be positive, not {gpu.memory_mib} MiB")
        seen_index.add(gpu.index)
        seen_uuid.add(gpu.uuid)


def device_id(gpu: Gpu, j: int) -> str:
    ident = f"{gpu.uuid}{DEVICE_ID_SEPARATOR}{j}"
    if len(ident) > MAX_DEVICE_ID_LENGTH:
        raise DeviceError(f"device ID {ident!r} is longer than {MAX_DEVICE_ID_LENGTH} characters")
    return ident


def fake_devices(
    gpus: Sequence[Gpu], granularity: Granularity, unhealthy: Iterable[int] = ()
) -> list[FakeDevice]:
    """The full device list for ListAndWatch: `units(memory)` devices per GPU, GPU by GPU."""
    bad = set(unhealthy)
    return [
        FakeDevice(device_id(gpu, j), gpu.index, gpu.index not in bad)
        for gpu in sorted(gpus, key=lambda g: g.index)
        for j in range(granularity.units(gpu.memory_mib))
    ]


def _number(tail: str) -> int | None:
    """`<j>` exactly as `device_id` writes it, else None: "07" or "+7" would count one device twice,
    and int() of thousands of digits raises (the kubelet's IDs are not to be trusted)."""
    return int(tail) if _CANONICAL_NUMBER.fullmatch(tail) else None


def decode_device_id(ident: str, gpus: Sequence[Gpu], granularity: Granularity) -> int:
    """The GPU index of one of our device IDs; DeviceError for an ID we never listed."""
    uuid, sep, tail = ident.rpartition(DEVICE_ID_SEPARATOR)
    number = _number(tail) if sep else None
    if number is None:
        raise DeviceError(f"device ID {_shown(ident)} is not of the form <GPU UUID>-_-<n>")
    for gpu in gpus:
        if gpu.uuid == uuid:
            if number >= granularity.units(gpu.memory_mib):
                raise DeviceError(f"device ID {ident!r}: GPU {gpu.index} has no device {tail}")
            return gpu.index
    raise DeviceError(f"device ID {_shown(ident)} names no GPU of this node")


def _shown(ident: str) -> str:
    # Refusals quote the ID; one that is not ours may be any length.
    text = repr(ident)
    return text if len(text) <= MAX_DEVICE_ID_LENGTH + 2 else text[: MAX_DEVICE_ID_LENGTH - 1] + "..."


def node_devices(
    gpus: Sequence[Gpu], granularity: Granularity, unhealthy: Iterable[int] = ()
) -> ann.NodeDevices:
    """What the extender reads from the node annotation: each GPU's memory in the protocol unit."""
    bad = set(unhealthy)
    return ann.NodeDevices(
        unit=granularity.label,
        devices=tuple(
            ann.GpuDevice(g.index, g.uuid, granularity.units(g.memory_mib), g.index not in bad, g.model)
            for g in sorted(gpus, key=lambda g: g.index)
        ),
    )


def device_indexer(gpus: Sequence[Gpu], granularity: Granularity) -> Callable[[str], int]:
    """`decode_device_id` for many IDs (the kubelet offers thousands): the UUID lookup built once."""
    by_uuid = {g.uuid: (g.index, granularity.units(g.memory_mib)) for g in gpus}

    def index(ident: str) -> int:
        uuid, sep, tail = ident.rpartition(DEVICE_ID_SEPARATOR)
        found = by_uuid.get(uuid)
        number = _number(tail) if sep and found is not None else None
        if found is None or number is None or number >= found[1]:
            return decode_device_id(ident, gpus, granularity)  # raises, saying what is wrong
        return found[0]

    return index


def device_split(ids: Iterable[str], gpus: Sequence[Gpu], granularity: Granularity) -> dict[int, int]:
    """How many of these device IDs lie on each GPU: {GPU index: count}; DeviceError for a foreign ID."""
    index = device_indexer(gpus, granularity)
    split: dict[int, int] = {}
    for ident in ids:
        gpu = index(ident)
        split[gpu] = split.get(gpu, 0) + 1
    return split


def check_distinct(ids: Sequence[str]) -> None:
    """DeviceError for a container request (either resource) that lists no device ID, or one twice."""
    if not ids:
        raise DeviceError("the container request lists no device IDs")
    if len(set(ids)) != len(ids):
        raise DeviceError("the container request lists a device ID twice")


def card_gpus(ids: Sequence[str], gpus: Sequence[Gpu]) -> tuple[int, ...]:
    """The GPU indexes of whole-card device IDs (each a GPU's UUID), sorted; DeviceError for an empty
    list, a repeated ID or an ID that names no GPU of this node."""
    check_distinct(ids)
    by_uuid = {g.uuid: g.index for g in gpus}
    unknown = [i for i in ids if i not in by_uuid]
    if unknown:
        raise DeviceError(f"device ID {unknown[0]!r} names no GPU of this node")
    return tuple(sorted(by_uuid[i] for i in ids))


def device_number(ident: str) -> int:
    """The `<j>` of a well-formed device ID, for a stable order within a GPU."""
    return int(ident.rpartition(DEVICE_ID_SEPARATOR)[2])
