"""Runs one container of a pod spec the chart renders with podman, as a kubelet would start it: the user and
group of its security contexts, a read-only root filesystem, dropped capabilities, no privilege escalation,
its volumes (emptyDir as tmpfs, Secrets, ConfigMaps and hostPaths from host folders the caller fills) and,
when given a token, the in-cluster ServiceAccount files and KUBERNETES_SERVICE_* env. Host network: what
it serves is reached on 127.0.0.1."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
PODMAN = ("podman", "--runtime", "runc")  # crun refuses this machine's hybrid cgroups
# This machine's sandbox refuses podman's default rlimits (nofile 1048576, nproc 32768).
LIMITS = ("--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def files(folder: Path, content: Mapping[str, str | bytes]) -> Path:
    """A volume's files as the kubelet writes a Secret or ConfigMap: readable by the pod's user (0644)."""
    folder.mkdir(parents=True, mode=0o755)
    folder.chmod(0o755)
    for name, data in content.items():
        path = folder / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        path.chmod(0o644)
    return folder


def _context(pod: Obj, container: Obj, key: str) -> Any:
    own = (container.get("securityContext") or {}).get(key)
    return own if own is not None else (pod.get("securityContext") or {}).get(key)


def argv(
    image: str,
    name: str,
    pod: Obj,
    container: Obj,
    *,
    volumes: Mapping[str, Path],
    args: Sequence[str],
    env: Mapping[str, str] = {},
    service_account: Path | None = None,
    api_port: int = 0,
) -> list[str]:
    """`podman run` for `container` of pod spec `pod`; `args` replace the container's (the caller's
    overrides of ports and addresses applied), `volumes` maps each non-emptyDir volume name to a folder."""
    out = [*PODMAN, "run", "-d", "--name", name, "--network", "host", *LIMITS]
    user, group = _context(pod, container, "runAsUser"), _context(pod, container, "runAsGroup")
    if user is not None:
        out += ["--user", f"{user}:{group if group is not None else user}"]
    security = container.get("securityContext") or {}
    if security.get("readOnlyRootFilesystem"):
        out += ["--read-only", "--read-only-tmpfs=false"]  # only the pod's own emptyDirs are writable
    if security.get("privileged"):
        out += ["--privileged"]
    if security.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    capabilities = security.get("capabilities") or {}
    for cap in capabilities.get("drop") or []:
        out += ["--cap-drop", cap]
    for cap in capabilities.get("add") or []:
        out += ["--cap-add", cap]
    kinds = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        if "emptyDir" in kinds[mount["name"]]:
            out += ["--tmpfs", f"{mount['mountPath']}:rw,mode=1777"]
        else:
            mode = "ro" if mount.get("readOnly") else "rw"
            out += ["--volume", f"{volumes[mount['name']]}:{mount['mountPath']}:{mode}"]
    for item in container.get("env") or []:
        if "value" in item:
            out += ["--env", f"{item['name']}={item['value']}"]
    for key, value in env.items():
        out += ["--env", f"{key}={value}"]
    if service_account is not None:
        out += ["--volume", f"{service_account}:{SA_DIR}:ro"]
        out += ["--env", "KUBERNETES_SERVICE_HOST=127.0.0.1", "--env", f"KUBERNETES_SERVICE_PORT={api_port}"]
    if container.get("command"):
        out += ["--entrypoint", container["command"][0], image, *container["command"][1:], *args]
    else:
        out += [image, *args]
    return out


def run(command: Sequence[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, check=False)


def logs(name: str) -> str:
    done = run([*PODMAN, "logs", name], timeout=30)
    return done.stdout + done.stderr


def remove(name: str) -> None:
    run([*PODMAN, "rm", "-f", "-t", "2", name], timeout=60)
