"""The chart installed as a user installs it, every part a pod of our image on a cluster whose node runs
containers (cluster.py). Only what this machine needs is set: the images (built here, never pulled:
`pullPolicy: Never`), simulated GPUs for the node agents (`simulation`, the chart's documented value for
clusters without GPUs), the second scheduler (mode b) and the DRA driver. Certificates are the chart's own
(selfManaged: its hook Job runs ensure-certs), and the API server and kube-scheduler reach the webhook
and the extender through their Services.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.devcluster import helm, release
from webhook.devcluster.cluster import Cluster

Obj = dict[str, Any]
RELEASE = release.RELEASE
NAMESPACE = release.NAMESPACE
FULLNAME = release.FULLNAME
# Three 16 GiB Volta cards: MPS needs a known compute capability of 7.0 or more.
FAKE_GPUS = ",".join(f"{i}:16:Tesla V100-SXM2-16GB:7.0" for i in range(3))


@dataclass(frozen=True, slots=True)
class ChartSource:
    """Where Helm takes the chart from: this checkout's folder (the default, with the image that
    scripts/node-images imported), or a release in an OCI registry, whose chart names its own image."""

    ref: str = str(helm.CHART)  # a folder, or oci://<registry>/gpushare
    version: str = ""  # an oci:// chart's --version
    plain_http: bool = False  # the registry speaks HTTP (the bed's)

    @property
    def released(self) -> bool:
        return self.ref.startswith("oci://")

    def args(self) -> list[str]:
        return [
            self.ref,
            *(["--version", self.version] if self.version else []),
            *(["--plain-http"] if self.plain_http else []),
        ]


def values(
    names: Mapping[str, str], fake_gpus: str = FAKE_GPUS, own_image: bool = False, **overrides: Any
) -> Obj:
    """The values of the install: the images of scripts/node-images (ours only unless `own_image`, a
    release's chart naming the image it was released with) and simulated GPUs, then `overrides`."""
    repository, tag = names["gpushare"].rsplit(":", 1)
    scheduler, scheduler_tag = names["kube-scheduler"].rsplit(":", 1)
    base: Obj = {
        "image": {} if own_image else {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "scheduler": {
            "mode": "second",
            "image": {"repository": scheduler, "tag": scheduler_tag, "pullPolicy": "Never"},
        },
        "dra": {"enabled": True},
        "simulation": {"enabled": True, "gpus": fake_gpus},
    }
    return release.merge(base, overrides)


@dataclass
class PodRelease:
    cluster: Cluster
    root: Path
    revisions: list[int] = field(default_factory=list)
    source: ChartSource = field(default_factory=ChartSource)
    _release: release.Release | None = None

    @property
    def api(self) -> release.Release:
        """The API helpers and Helm runner of the host bed, over this cluster's API server."""
        if self._release is None:
            assert self.cluster.cp is not None
            self._release = release.Release(self.cluster.cp, self.root, release.admin_api(self.cluster.cp))
        return self._release

    def helm(self, *args: str, major: int = 3, timeout: float = 420) -> str:
        done = self.api.helm(*args, major=major, timeout=timeout)
        return done.stdout

    def _values_file(self, overrides: Mapping[str, Any]) -> Path:
        path = self.root / f"values-{len(self.revisions) + 1}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        found = values(self.cluster.names, own_image=self.source.released, **overrides)
        path.write_text(json.dumps(found))
        return path

    def install(self, major: int = 3, timeout: float = 300, **overrides: Any) -> None:
        """helm install, waiting (as a user's --wait does) until every Deployment, DaemonSet and Job of
        the release is ready through its pods' own probes."""
        args = ["install", RELEASE, *self.source.args(), "--namespace", NAMESPACE, "--create-namespace"]
        self.helm(*args, *self._wait(timeout), "--values", str(self._values_file(overrides)), major=major)
        self.revisions.append(1)

    def upgrade(self, major: int = 3, timeout: float = 300, **overrides: Any) -> None:
        args = ["upgrade", RELEASE, *self.source.args(), "--namespace", NAMESPACE]
        self.helm(*args, *self._wait(timeout), "--values", str(self._values_file(overrides)), major=major)
        self.revisions.append(self.revisions[-1] + 1 if self.revisions else 1)

    def rollback(self, revision: int, major: int = 3, timeout: float = 300) -> None:
        self.helm(
            "rollback", RELEASE, str(revision), "--namespace", NAMESPACE, *self._wait(timeout), major=major
        )
        self.revisions.append(self.revisions[-1] + 1)

    def uninstall(self, major: int = 3, timeout: float = 300) -> None:
        self.helm(
            "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", f"--timeout={timeout:.0f}s", major=major
        )
        self.revisions.clear()

    @staticmethod
    def _wait(timeout: float) -> list[str]:
        return ["--wait", "--wait-for-jobs", f"--timeout={timeout:.0f}s"]
