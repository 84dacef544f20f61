"""The node's CDI devices of a kind (`nvidia.com/gpu`): which device the NVIDIA toolkit's spec names for each
GPU, resolved across the spec folders as the runtime's CDI library resolves them.

The shell reads the folders (`/etc/cdi`, `/var/run/cdi`) and passes each file's parsed document here, with
its folder's priority (its place in the list: a later folder wins, as in the CDI cache). A document that is
not a CDI spec is skipped with a warning naming it: the runtime would refuse it too, and a bad file must
not take the node's other GPUs down with it. Two files of one folder naming the same device are a conflict:
the CDI cache then drops that device, and so do we, with a warning naming both files.

    index([SpecFile("/var/run/cdi/nvidia.yaml", 1, {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
           "devices": [{"name": "0", ...}, {"name": "GPU-7f...", ...}, {"name": "all", ...}]})])
    -> Catalog(names={"0", "GPU-7f...", "all"}, ...)
    gpu_device(catalog, Gpu(0, "GPU-7f...", ...)) -> "nvidia.com/gpu=GPU-7f..."   (by UUID, else by index)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.core.node import cdi, devices

NVIDIA_KIND = "nvidia.com/gpu"
DEFAULT_FOLDERS = ("/etc/cdi", "/var/run/cdi")
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")


class SpecError(ValueError):
    """A document that is not a usable CDI spec; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class SpecFile:
    """One file of a CDI folder: its path, its folder's priority (higher wins) and its parsed document,
    or the reason it could not be read or parsed."""

    path: str
    priority: int
    document: object = None
    unreadable: str = ""


@dataclass(frozen=True, slots=True)
class Catalog:
    """The device names of one kind that the node's specs define, conflicts dropped, and what was skipped."""

    kind: str
    names: frozenset[str]
    folders: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def check_kind(kind: str) -> str:
    """`kind` itself when it is `<vendor>/<class>`; SpecError otherwise (a flag's value)."""
    vendor, _, cls = kind.partition("/")
    if not (cdi.QUALIFIER.match(vendor) and cdi.QUALIFIER.match(cls)):
        raise SpecError(f"{kind!r} is not a CDI kind <vendor>/<class>, e.g. {NVIDIA_KIND}")
    return kind


def spec_devices(document: object) -> tuple[str, tuple[str, ...]]:
    """(kind, device names) of a CDI spec document; SpecError naming the first thing the runtime would
    refuse: no version, a bad kind, a device without a valid name or with non-object edits, a name twice."""
    if not isinstance(document, Mapping):
        raise SpecError("not a CDI spec: the document is not an object")
    version = document.get("cdiVersion")
    if not isinstance(version, str) or not _VERSION.match(version):
        raise SpecError(f"cdiVersion {version!r} is not a version like 0.5.0")
    kind = document.get("kind")
    if not isinstance(kind, str):
        raise SpecError(f"kind {kind!r} is not a string")
    check_kind(kind)
    found = document.get("devices")
    if not isinstance(found, list) or not found:
        raise SpecError("devices is not a non-empty list")
    names: list[str] = []
    for number, device in enumerate(found):
        if not isinstance(device, Mapping):
            raise SpecError(f"devices[{number}] is not an object")
        name = device.get("name")
        if not isinstance(name, str) or not cdi.DEVICE_NAME.match(name):
            raise SpecError(f"devices[{number}].name {name!r} is not a CDI device name")
        if not isinstance(device.get("containerEdits"), Mapping):
            raise SpecError(f"device {name!r} has no containerEdits object")
        if name in names:
            raise SpecError(f"device {name!r} is defined twice")
        names.append(name)
    return kind, tuple(names)


def index(
    files: Sequence[SpecFile], kind: str = NVIDIA_KIND, folders: Sequence[str] = DEFAULT_FOLDERS
) -> Catalog:
    """The devices of `kind` that `files` define, resolved as the CDI cache resolves them: a device of a
    higher-priority folder shadows the same name in a lower one; two files of one priority that define the
    same name conflict and neither is used. Unusable files are skipped, each with one warning."""
    warnings: list[str] = []
    owners: dict[str, tuple[int, str]] = {}  # name -> (priority, path) of the file that defines it
    conflicts: dict[str, list[str]] = {}
    for spec in sorted(files, key=lambda f: (f.priority, f.path)):
        if spec.unreadable:
            warnings.append(f"skipped CDI spec {spec.path}: {spec.unreadable}")
            continue
        try:
            spec_kind, names = spec_devices(spec.document)
        except SpecError as err:
            warnings.append(f"skipped CDI spec {spec.path}: {err}")
            continue
        if spec_kind != kind:
            continue
        for name in names:
            held = owners.get(name)
            if held is not None and held[0] == spec.priority:
                conflicts.setdefault(name, [held[1]]).append(spec.path)
                continue
            owners[name] = (spec.priority, spec.path)
            conflicts.pop(name, None)  # a higher folder's definition ends a lower folder's conflict
    for name, paths in sorted(conflicts.items()):
        warnings.append(f"CDI device {kind}={name} is defined in both {' and '.join(paths)}: not used")
    return Catalog(kind, frozenset(n for n in owners if n not in conflicts), tuple(folders), tuple(warnings))


def gpu_name(catalog: Catalog, gpu: devices.Gpu) -> str | None:
    """The catalog's device name of `gpu`: its UUID when a device has that name, else its index, else None."""
    for name in (gpu.uuid, str(gpu.index)):
        if name in catalog.names:
            return name
    return None


def gpu_device(catalog: Catalog, gpu: devices.Gpu) -> str | None:
    """The fully qualified CDI device ID of `gpu` (`nvidia.com/gpu=GPU-...`), None when no spec names it."""
    name = gpu_name(catalog, gpu)
    return None if name is None else cdi.device_id(catalog.kind, name)
