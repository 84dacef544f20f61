"""Container Device Interface (CDI) spec documents: what a container runtime injects for a CDI device ID.

The DRA driver writes one spec file per prepared claim and returns its device IDs (`vendor/class=name`)
to the kubelet, which passes them to the runtime in the CRI `ContainerConfig.CDI_devices`; the runtime
(containerd with `enable_cdi`, CRI-O) finds the spec in its CDI folders (/etc/cdi, /var/run/cdi). Ours
carry env and bind mounts only: the NVIDIA runtime acts on NVIDIA_VISIBLE_DEVICES, as it does for the
device plugin's Allocate answer.

    spec("gpushare.aliyun.com/gpu", {"c1-gpu": Edits({"NVIDIA_VISIBLE_DEVICES": "GPU-a"})})
    -> {"cdiVersion": "0.5.0", "kind": "gpushare.aliyun.com/gpu",
        "devices": [{"name": "c1-gpu", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-a"]}}]}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.node import mps

# Env and mounts are in every version from 0.3.0; 0.5.0 is what containerd 1.7 and CRI-O 1.28 read.
CDI_VERSION = "0.5.0"
DEVICE_CLASS = "gpu"
# The CDI spec's name rules (tags.cncf.io/container-device-interface/pkg/parser): a kind's vendor and class
# share one rule, a device name has its own. Ours and the toolkit's specs (core/node/cdidevices.py) alike.
QUALIFIER = re.compile(r"^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$")
DEVICE_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


class CdiError(ValueError):
    """A kind or device name the CDI spec does not allow; the message says which."""


@dataclass(frozen=True, slots=True)
class Edits:
    """What one CDI device gives a container: env and host folders bind-mounted at the same paths."""

    env: Mapping[str, str]
    mounts: tuple[mps.Mount, ...] = field(default=())


def kind(driver: str) -> str:
    """`<driver>/gpu`: the driver name is the CDI vendor."""
    if not QUALIFIER.match(driver):
        raise CdiError(f"{driver!r} cannot be a CDI vendor name")
    return f"{driver}/{DEVICE_CLASS}"


def device_name(claim_uid: str, request: str) -> str:
    """One CDI device per claim request: `<claim UID>-<request>`."""
    name = f"{claim_uid}-{request}"
    if not DEVICE_NAME.match(name):
        raise CdiError(f"CDI device name {name!r} is not letters, digits, '_', '.', ':' and '-'")
    return name


def device_id(kind_: str, name: str) -> str:
    return f"{kind_}={name}"


def file_name(kind_: str, claim_uid: str) -> str:
    """The spec's file name in the CDI folder: `<vendor>-<class>_<claim UID>.json` (one per claim)."""
    return f"{kind_.replace('/', '-')}_{claim_uid}.json"


def _edits(edits: Edits) -> dict[str, Any]:
    out: dict[str, Any] = {"env": [f"{key}={value}" for key, value in sorted(edits.env.items())]}
    if edits.mounts:
        out["mounts"] = [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "options": ["ro" if m.read_only else "rw", "nosuid", "nodev", "rbind"],
            }
            for m in edits.mounts
        ]
    return out


def spec(kind_: str, devices: Mapping[str, Edits]) -> dict[str, Any]:
    """The spec document for `devices` ({CDI device name: edits}); CdiError when a device has no env
    (runtimes refuse a device whose containerEdits are empty)."""
    empty = [name for name, edits in devices.items() if not edits.env]
    if empty:
        raise CdiError(f"CDI devices {empty} would have empty containerEdits")
    return {
        "cdiVersion": CDI_VERSION,
        "kind": kind_,
        "devices": [{"name": name, "containerEdits": _edits(devices[name])} for name in sorted(devices)],
    }
