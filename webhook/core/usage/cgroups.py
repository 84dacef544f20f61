"""Which pod and container a process belongs to, from its `/proc/<pid>/cgroup` text.

The kubelet puts each pod in a cgroup named after its UID, and the runtime puts each container in a
cgroup named after its ID below it. The shapes (all handled, cgroup v1 and v2 alike):

    systemd driver  /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/<c>.scope
                    <c> = cri-containerd-<id> (containerd), crio-<id> (CRI-O), docker-<id> (cri-dockerd)
    cgroupfs driver /kubepods/burstable/pod<uid>/<id>   (crio-<id> for CRI-O); Guaranteed pods sit
                    directly under kubepods(.slice), without a QoS level

A reader in its own cgroup namespace (a container on cgroup v2) sees other processes' paths relative to
its root (`/../../kubepods-...`), a kind node nests the tree (`/docker/<id>/kubepods/...`) or roots it
elsewhere (`kubelet-kubepods-...slice`): the pod is found anywhere in the path. Static pods are named by
their config hash (32 hex digits). Pure: text in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# pod<uid>: a UUID with dashes (cgroupfs) or underscores (systemd escapes dashes), or a static pod's
# 32-hex config hash; in a systemd slice name after kubepods[-<qos>]-.
_UUID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
_POD = re.compile(rf"^(?:[a-z0-9-]*kubepods(?:-[a-z]+)?-)?pod({_UUID})(?:\.slice)?$")
# What runtimes put before and after a container ID in its cgroup's name.
_RUNTIME_PREFIXES = ("cri-containerd-", "crio-", "docker-", "containerd-")
_SCOPE = ".scope"
_CONTAINER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A process's pod (its UID as the kubelet names the cgroup, with dashes) and container ID as the
    runtime reports it in the pod's status; `container_id` is "" for a process in the pod's own cgroup."""

    pod_uid: str
    container_id: str


def container_of(text: str) -> ContainerRef | None:
    """The pod and container of the process whose cgroup file reads `text`; None when it is in no pod
    (a host process, a system service). Every line is tried: v1 lists one per hierarchy, v2 one (`0::`)."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = _in_path(parts[2].strip())
        if found is not None:
            return found
    return None


def _in_path(path: str) -> ContainerRef | None:
    components = [c for c in path.split("/") if c]
    relative = bool(components) and components[0] == ".."
    for i, component in enumerate(components):
        match = _POD.match(component.lower())
        if match is None:
            continue
        # "pod<uuid>" alone is trusted only below a kubepods cgroup, or in a path relative to a cgroup
        # namespace root (whose kubepods ancestors the reader cannot see).
        if not (relative or any("kubepods" in c for c in components[: i + 1])):
            continue
        uid = match.group(1).replace("_", "-")
        container = container_id(components[i + 1]) if i + 1 < len(components) else ""
        return ContainerRef(uid, container)
    return None


def container_id(name: str) -> str:
    """The container ID in a container cgroup's name (`cri-containerd-<id>.scope` -> `<id>`); "" when the
    name is not one (conmon's `crio-conmon-<id>.scope` holds no container process)."""
    name = name.removesuffix(_SCOPE)
    for prefix in _RUNTIME_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
            break
    if name.startswith("conmon-") or not _CONTAINER_ID.match(name):
        return ""
    return name


def runtime_container_id(status_id: str) -> str:
    """The ID in a pod status' `containerID` (`containerd://<id>`, `cri-o://<id>`, `docker://<id>`)."""
    return status_id.partition("://")[2] if "://" in status_id else status_id
