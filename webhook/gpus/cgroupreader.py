"""Reads `<proc root>/<pid>/cgroup` for the PIDs NVML reports and hands the text to core/usage/cgroups.py.

NVML reports PIDs of the host's PID namespace, so the proc root must be the host's: the chart mounts the
node's /proc read-only at /host/proc (`--proc-root`), which shows host PIDs without the pod joining the
host's PID namespace. Tests point it at a folder of fixture files.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from webhook.core.usage import cgroups

log = logging.getLogger(__name__)
MAX_CGROUP_BYTES = 64 * 1024  # a cgroup file is a few lines; never read more of one


class CgroupReader:
    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root
        self._warned = False

    def origins(self, pids: Iterable[int]) -> dict[int, cgroups.ContainerRef | None]:
        """PID -> its pod and container (None: in no pod); PIDs whose file cannot be read are left out."""
        found: dict[int, cgroups.ContainerRef | None] = {}
        for pid in pids:
            text = self.read(pid)
            if text is not None:
                found[pid] = cgroups.container_of(text)
        return found

    def read(self, pid: int) -> str | None:
        path = self.proc_root / str(pid) / "cgroup"
        try:
            with path.open("rb") as f:
                return f.read(MAX_CGROUP_BYTES).decode("utf-8", "replace")
        except FileNotFoundError:
            if not self._warned and not self.proc_root.is_dir():
                self._warned = True
                log.warning(
                    "%s is not a folder: GPU processes cannot be matched to pods (--proc-root must be the "
                    "host's /proc, e.g. mounted at /host/proc)",
                    self.proc_root,
                )
            return None  # the process ended between NVML's list and now
        except OSError as err:
            log.debug("reading %s failed: %s", path, err)
            return None
