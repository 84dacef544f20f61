"""A chart pod's Secret volumes written on this host, so a part run here reads the files the kubelet
would mount into its pod, under the same names; and the extender's certificates for provided mode.

    mounts = write_mounts(api, pod_spec, "gpu-system", root / "extender")   # mountPath -> folder
    on_host("/etc/gpushare/extender-tls/tls.crt", mounts)                   # -> <folder>/tls.crt
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from webhook.core.pki import certificates
from webhook.devcluster import pki as pkimod
from webhook.kube import rest

Obj = dict[str, Any]


def write_mounts(api: Any, pod_spec: Obj, namespace: str, root: Path) -> dict[str, Path]:
    """Write every secret and projected-secret volume mounted in the pod's first container under
    `root/<volume>/`, items renamed as the volume says; returns mountPath -> folder."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
    out: dict[str, Path] = {}
    for mount in pod_spec["containers"][0].get("volumeMounts") or []:
        volume = volumes.get(mount["name"]) or {}
        sources = [s["secret"] for s in (volume.get("projected") or {}).get("sources") or [] if "secret" in s]
        if "secret" in volume:
            sources.append({"name": volume["secret"]["secretName"], **volume["secret"]})
        if not sources:
            continue
        folder = root / mount["name"]
        folder.mkdir(parents=True, exist_ok=True)
        for source in sources:
            data = rest.request(api, "GET", rest.path("secrets", source["name"], namespace)).get("data") or {}
            items = source.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                _write(folder / item["path"], base64.b64decode(data[item["key"]]))
        out[mount["mountPath"]] = folder
    return out


def on_host(value: str, mounts: Mapping[str, Path]) -> str:
    """`value` with a mounted path replaced by where that file lies on this host."""
    for mount_path, folder in mounts.items():
        if value == mount_path or value.startswith(mount_path.rstrip("/") + "/"):
            return str(folder) + value[len(mount_path.rstrip("/")) :]
    return value


def extender_pems(
    pki: pkimod.Pki, dns_names: Sequence[str], ips: Sequence[str], client_name: str
) -> dict[str, str]:
    """certificates.provided.extender for the chart: a serving pair for the names and kube-scheduler's
    client pair, both signed by the cluster CA (the chart's caCrt)."""
    now = datetime.now(UTC)
    serving = certificates.generate_serving(pki.ca(), dns_names, ips, now)
    client = certificates.generate_client(pki.ca(), client_name, (), now)
    return {
        "tlsCrt": serving.cert_pem.decode(),
        "tlsKey": serving.key_pem.decode(),
        "clientCrt": client.cert_pem.decode(),
        "clientKey": client.key_pem.decode(),
    }


def _write(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
