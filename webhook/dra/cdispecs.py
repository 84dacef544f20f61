"""The CDI spec files of prepared claims in the runtime's CDI folder: written whole (a runtime never reads
half a spec), removed at unprepare, and any of ours that no checkpointed claim owns removed at start.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from webhook.dra import checkpoint

log = logging.getLogger(__name__)


class SpecFiles:
    """The spec files of CDI kind `kind` in `folder`."""

    def __init__(self, folder: Path, kind: str) -> None:
        self.folder = folder
        self.prefix = f"{kind.replace('/', '-')}_"

    def path(self, name: str) -> Path:
        if not name.startswith(self.prefix) or "/" in name:
            raise ValueError(f"{name!r} is not one of our CDI spec files")
        return self.folder / name

    def write(self, name: str, spec: Mapping[str, Any]) -> None:
        """Write the spec (OSError on failure); readable by the runtime."""
        self.folder.mkdir(parents=True, exist_ok=True)
        data = json.dumps(spec, indent=2, sort_keys=True).encode()
        checkpoint.write_atomically(self.path(name), data, mode=0o644)

    def exists(self, name: str) -> bool:
        return self.path(name).is_file()

    def remove(self, name: str) -> None:
        """Remove the spec; gone already is fine (OSError for any other failure)."""
        self.path(name).unlink(missing_ok=True)

    def remove_others(self, keep: Iterable[str]) -> list[str]:
        """Remove our spec files that are not in `keep` (left by a crash between writing a spec and the
        checkpoint: the kubelet asks again and gets a new one); the names removed."""
        kept = set(keep)
        removed = []
        for found in sorted(self.folder.glob(f"{self.prefix}*.json")):
            if found.name not in kept:
                found.unlink(missing_ok=True)
                removed.append(found.name)
        if removed:
            log.info("removed CDI specs no prepared claim owns: %s", ", ".join(removed))
        return removed
