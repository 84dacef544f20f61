"""The NVIDIA toolkit's CDI specs on this node, read for the node agents (device plugin, DRA driver): which
CDI device each GPU is, and so how GPUs are handed to containers (core/node/devicelist.py).

The folders are those the runtime reads (`/etc/cdi`, `/var/run/cdi`; the chart mounts them read-only). A
file is parsed again only when it changes (the toolkit writes its spec at boot, maybe after we start, and
again after a driver upgrade; the DRA driver writes its own claims' specs beside it), told by the
folders' listing and each file's mtime and size: a few stat calls per Allocate. A file that cannot be
read or parsed is skipped with one warning naming it. Every change of what is handed out is logged in
one line and passed to `on_change` (metrics, the Node).
"""

from __future__ import annotations

import json
import logging
import stat
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import prometheus_client
import yaml

from webhook.core.node import cdidevices, devicelist, devices

log = logging.getLogger(__name__)

# The extensions the CDI library reads; a spec is a few KiB, so a file far larger is not one.
_SUFFIXES = (".json", ".yaml", ".yml")
MAX_SPEC_BYTES = 4 * 1024 * 1024

Entry = tuple[int, str, int, int]  # (folder priority, path, mtime ns, size) of one spec file
DEFAULT_FOLDERS = tuple(Path(f) for f in cdidevices.DEFAULT_FOLDERS)


def _listing(folders: Sequence[Path]) -> tuple[Entry, ...]:
    """Every spec file of `folders` with what tells a change: a few stat calls, no read."""
    found: list[Entry] = []
    for priority, folder in enumerate(folders):
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue  # no such folder: no specs there, as for the runtime
        for path in entries:
            if path.suffix not in _SUFFIXES:
                continue
            try:
                st = path.stat()
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.append((priority, str(path), st.st_mtime_ns, st.st_size))
    return tuple(found)


def _load(path: Path) -> tuple[object, str]:
    """The parsed document, or the reason it cannot be read."""
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            return None, f"{size} bytes, larger than any CDI spec ({MAX_SPEC_BYTES} at most)"
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return None, f"cannot be read ({err})"
    try:
        if path.suffix == ".json":
            return json.loads(text), ""
        return yaml.safe_load(text), ""
    except (ValueError, yaml.YAMLError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return None, f"is not valid {'JSON' if path.suffix == '.json' else 'YAML'} ({first})"


def _spec_file(entry: Entry) -> cdidevices.SpecFile:
    priority, path, _, _ = entry
    document, unreadable = _load(Path(path))
    return cdidevices.SpecFile(path, priority, document, unreadable)


class ToolkitSpecs:
    """The current `Delivery` of this node's GPUs, re-decided when the spec folders change."""

    def __init__(
        self,
        strategy: devicelist.Strategy,
        gpus: Sequence[devices.Gpu],
        folders: Sequence[Path] = DEFAULT_FOLDERS,
        kind: str = cdidevices.NVIDIA_KIND,
        on_change: Callable[[devicelist.Delivery], None] = lambda _: None,
    ) -> None:
        self.strategy = strategy
        self.gpus = tuple(gpus)
        self.folders = tuple(folders)
        self.kind = kind
        self.on_change = on_change
        self._lock = threading.Lock()
        self._listing: tuple[Entry, ...] | None = None
        self._parsed: dict[Entry, cdidevices.SpecFile] = {}  # each file parsed once per version of it
        self._current: devicelist.Delivery | None = None
        self._warned: tuple[str, ...] = ()

    def delivery(self) -> devicelist.Delivery:
        """What this node hands out now; the folders are read again only when they changed."""
        if self.strategy is devicelist.Strategy.ENVVAR:
            # The env alone: no spec is ever read, so none can fail an Allocate.
            with self._lock:
                if self._current is None:
                    self._current = devicelist.env_only(self.gpus)
                    self._announce(self._current, None)
                return self._current
        listing = _listing(self.folders)
        with self._lock:
            if self._current is not None and listing == self._listing:
                return self._current
            self._parsed = {entry: self._parsed.get(entry) or _spec_file(entry) for entry in listing}
            catalog = cdidevices.index(list(self._parsed.values()), self.kind, [str(f) for f in self.folders])
            found = devicelist.decide(self.strategy, self.gpus, catalog)
            before, self._current, self._listing = self._current, found, listing
            if catalog.warnings != self._warned:
                self._warned = catalog.warnings
                for warning in catalog.warnings:
                    log.warning("%s", warning)
            self._announce(found, before)
            return found

    def _announce(self, found: devicelist.Delivery, before: devicelist.Delivery | None) -> None:
        if before is not None and (before.mode, dict(before.cdi)) == (found.mode, dict(found.cdi)):
            return
        log.info("%s", found.describe())
        self.on_change(found)


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    """The node agents' flags for it: --device-list-strategy, --cdi-spec-dirs, --cdi-kind."""

    strategy: str = devicelist.Strategy.AUTO.value
    folders: tuple[Path, ...] = DEFAULT_FOLDERS
    kind: str = cdidevices.NVIDIA_KIND

    def check(self) -> DeliverySettings:
        """Itself, or ValueError naming the flag."""
        if self.strategy not in {s.value for s in devicelist.Strategy}:
            choices = ", ".join(s.value for s in devicelist.Strategy)
            raise ValueError(f"--device-list-strategy {self.strategy!r} is not one of {choices}")
        if not self.folders or not all(f.is_absolute() for f in self.folders):
            raise ValueError("--cdi-spec-dirs must be absolute folders, e.g. /etc/cdi,/var/run/cdi")
        try:
            cdidevices.check_kind(self.kind)
        except cdidevices.SpecError as err:
            raise ValueError(f"--cdi-kind: {err}") from None
        return self

    def specs(
        self,
        gpus: Sequence[devices.Gpu],
        on_change: Callable[[devicelist.Delivery], None] = lambda _: None,
    ) -> ToolkitSpecs:
        return ToolkitSpecs(devicelist.Strategy(self.strategy), gpus, self.folders, self.kind, on_change)


def delivery_gauge(registry: prometheus_client.CollectorRegistry) -> Callable[[devicelist.Delivery], None]:
    """`gpushare_device_list{mode}`: 1 for how GPUs are handed out now (envvar, cdi-cri, both), 0 for the
    others; and the count of GPUs a spec does not name while CDI is on. Returns the setter."""
    modes = prometheus_client.Gauge(
        "gpushare_device_list",
        "How this node's GPUs reach containers: 1 for the mode in use (envvar, cdi-cri, both)",
        ["mode"],
        registry=registry,
    )
    unnamed = prometheus_client.Gauge(
        "gpushare_device_list_unnamed_gpus",
        "GPUs of this node that no CDI spec names while CDI devices are handed out (Allocate refuses them)",
        registry=registry,
    )
    names = (devicelist.Strategy.ENVVAR, devicelist.Strategy.CDI_CRI, devicelist.Strategy.BOTH)

    def observe(delivery: devicelist.Delivery) -> None:
        for name in names:
            modes.labels(name.value).set(1 if delivery.mode == name.value else 0)
        unnamed.set(len(delivery.unnamed) if delivery.uses_cdi else 0)

    return observe
