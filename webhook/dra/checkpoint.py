"""The claims this driver prepared, kept in a file beside its socket so a restart between
NodePrepareResources and NodeUnprepareResources loses nothing: unprepare still finds the CDI spec to
remove, and a prepare asked again answers the same devices (rewriting the spec should a reboot have
emptied the CDI folder). Every change is written to a temporary file and renamed over the old one.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VERSION = 1


class CheckpointError(Exception):
    """The checkpoint file cannot be read or written; the message names it and says what to do."""


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a NodePrepareResources answer."""

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]
    share_id: str = ""


@dataclass(frozen=True, slots=True)
class Prepared:
    """A prepared claim: its identity, the answer given, and the CDI spec written for it."""

    uid: str
    namespace: str
    name: str
    devices: tuple[Device, ...]
    spec_file: str  # a file name in the CDI folder
    spec: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "devices": [
                {
                    "requests": list(d.requests),
                    "pool": d.pool,
                    "device": d.device,
                    "cdiIDs": list(d.cdi_ids),
                    "shareID": d.share_id,
                }
                for d in self.devices
            ],
            "specFile": self.spec_file,
            "spec": dict(self.spec),
        }

    @classmethod
    def from_json(cls, uid: str, data: Mapping[str, Any]) -> Prepared:
        return cls(
            uid=uid,
            namespace=str(data["namespace"]),
            name=str(data["name"]),
            devices=tuple(
                Device(
                    tuple(str(r) for r in d["requests"]),
                    str(d["pool"]),
                    str(d["device"]),
                    tuple(str(i) for i in d["cdiIDs"]),
                    str(d.get("shareID", "")),
                )
                for d in data["devices"]
            ),
            spec_file=str(data["specFile"]),
            spec=dict(data["spec"]),
        )


class Checkpoint:
    """The prepared claims by UID, loaded from `path` (none when it does not exist yet)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._claims = self._load()

    def _load(self) -> dict[str, Prepared]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        except OSError as err:
            raise CheckpointError(f"checkpoint {self.path}: {err.strerror or err}") from None
        try:
            data = json.loads(text)
            if data.get("version") != VERSION:
                raise ValueError(f"version {data.get('version')!r}, expected {VERSION}")
            return {uid: Prepared.from_json(uid, item) for uid, item in data["claims"].items()}
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(
                f"checkpoint {self.path} is unreadable ({err}); drain the node, remove the file and the "
                "driver's CDI specs, then restart the driver"
            ) from None

    def reload(self) -> None:
        """Read the file again: what another instance prepared before this one took the instance lock."""
        with self._lock:
            self._claims = self._load()

    def get(self, uid: str) -> Prepared | None:
        with self._lock:
            return self._claims.get(uid)

    def all(self) -> tuple[Prepared, ...]:
        with self._lock:
            return tuple(self._claims.values())

    def put(self, prepared: Prepared) -> None:
        with self._lock:
            claims = {**self._claims, prepared.uid: prepared}
            self._write(claims)
            self._claims = claims

    def remove(self, uid: str) -> None:
        with self._lock:
            if uid not in self._claims:
                return
            claims = {k: v for k, v in self._claims.items() if k != uid}
            self._write(claims)
            self._claims = claims

    def _write(self, claims: Mapping[str, Prepared]) -> None:
        data = {"version": VERSION, "claims": {uid: p.to_json() for uid, p in claims.items()}}
        try:
            write_atomically(self.path, json.dumps(data, sort_keys=True).encode(), mode=0o600)
        except OSError as err:
            raise CheckpointError(f"checkpoint {self.path}: {err.strerror or err}") from None


def write_atomically(path: Path, data: bytes, mode: int) -> None:
    """`path` holds `data` or its old content, never a part: a synced temporary file renamed over it."""
    temp = path.with_name(f".{path.name}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(temp, mode)
    os.replace(temp, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # the rename itself survives a crash
    finally:
        os.close(folder)
