"""Every shell block of README.md and docs/*.md runs as written, against a real kube-apiserver.

A block that cannot run here says why in its fence (```sh no-run: <reason>). The others run in the
repository root with `bash -e`, KUBECONFIG pointing at a control plane started for this test (the bed's
`ControlPlane`, its own so the chart's default install cannot disturb the other end-to-end tests), and
the placeholders a reader replaces set to the values in PLACEHOLDERS. No kubelet runs: the chart's
certificate hook Jobs are run the way the bed runs our parts, on this host with the Job's own arguments
(`HookRunner`), then marked complete, so `helm install` and `helm upgrade` go through their hooks.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.devcluster import helm, objects, release
from webhook.devcluster.controlplane import ControlPlane
from webhook.kube import rest

ROOT = helm.ROOT
FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELLS = ("sh", "bash", "shell")
FENCE = re.compile(r"^```(\S*)[ \t]*([^\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
NAMESPACE = "gpushare-system"
PLACEHOLDERS = {
    "IMAGE_REPOSITORY": "ghcr.io/gpushare/gpushare-webhook",
    "IMAGE_TAG": "0.1.0",
    "GPU_NODE": "gpu-node-1",
    "KUBE_VERSION": "",  # the built kube-apiserver's, from the binaries' folder name
}


@dataclass(frozen=True)
class Block:
    file: Path
    line: int
    info: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"

    @property
    def no_run_reason(self) -> str | None:
        match = re.fullmatch(r"no-run:\s*(.*)", self.info)
        return match.group(1).strip() if match else None


def blocks() -> list[Block]:
    found = []
    for file in FILES:
        text = file.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            if match.group(1) in SHELLS:
                line = text.count("\n", 0, match.start()) + 1
                found.append(Block(file, line, match.group(2).strip(), match.group(3)))
    return found


def in_run_order(found: list[Block]) -> list[Block]:
    """docs/install.md first (it installs the release the other docs' blocks read), its uninstall last."""
    install = [b for b in found if b.file.name == "install.md"]
    uninstall = [b for b in install if "helm uninstall" in b.code]
    rest_ = [b for b in found if b.file.name != "install.md"]
    return [b for b in install if b not in uninstall] + rest_ + uninstall


def test_docs_have_shell_blocks_and_install_md_runs_its_install_path() -> None:
    runnable = [b for b in blocks() if b.no_run_reason is None]
    install = [b.code for b in runnable if b.file.name == "install.md"]
    assert any("helm install" in c for c in install) and any("helm uninstall" in c for c in install)


def test_every_block_that_does_not_run_says_why() -> None:
    for block in blocks():
        assert block.info in ("",) or block.no_run_reason, f"{block.where}: unknown fence info {block.info!r}"
        if block.no_run_reason is not None:
            assert len(block.no_run_reason.split()) >= 3, f"{block.where}: say why it cannot run here"


def test_every_placeholder_of_a_runnable_block_is_set_by_this_test() -> None:
    for block in blocks():
        if block.no_run_reason is None:
            defined = set(re.findall(r"\b([A-Za-z_]\w*)=", block.code))
            used = set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)", block.code))
            assert used - defined - set(PLACEHOLDERS) - {"KUBECONFIG"} == set(), block.where


def test_the_scheduler_configuration_has_one_copy_rendered_by_the_chart() -> None:
    copies = [b.where for b in _all_fences() if re.search(r"^\s*extenders:|managedResources:", b.code, re.M)]
    assert copies == [], f"copies of the scheduler configuration outside the chart: {copies}"
    assert not (ROOT / "deploy").exists()


def test_every_shell_block_runs_against_a_real_api_server(kube_bins: Path, tmp_path: Path) -> None:
    cp = ControlPlane(kube_bins, tmp_path / "cp").start()
    api = release.admin_api(cp)
    hooks = HookRunner(api, cp.admin_kubeconfig)
    try:
        objects.gpu_node(api, PLACEHOLDERS["GPU_NODE"], 2, 16)
        hooks.start()
        version = re.search(r"kubernetes-(v[\d.]+)", kube_bins.name)
        env = {
            **os.environ,
            **PLACEHOLDERS,
            "KUBE_VERSION": version.group(1) if version else "v1.36.3",
            "KUBECONFIG": str(cp.admin_kubeconfig),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), str(ROOT / ".tools" / "bin")])
            + os.pathsep
            + os.environ.get("PATH", ""),
        }
        failures = []
        ran = 0
        for block in in_run_order(blocks()):
            if block.no_run_reason is not None:
                continue
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", block.code],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
            ran += 1
            if result.returncode != 0:
                failures.append(
                    f"{block.where} exited {result.returncode}:\n{block.code}{result.stderr[-1500:]}"
                )
        assert ran >= 8
        assert failures == [], "\n\n".join(failures)
        assert hooks.errors == []
    finally:
        hooks.stop()
        api.close()
        cp.stop()


class HookRunner:
    """Plays the kubelet for the chart's hook Jobs: runs each container's `gpushare` arguments on this
    host (KUBECONFIG: admin) and marks the Job complete, or failed with the output."""

    def __init__(self, api: Any, kubeconfig: Path) -> None:
        self.api = api
        self.kubeconfig = kubeconfig
        self.errors: list[str] = []
        self._done: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        path = rest.path("jobs", namespace=NAMESPACE, group="batch")
        while not self._stop.wait(0.2):
            try:
                jobs = list(rest.list_all(self.api, path))
            except Exception:  # the namespace may not exist yet
                continue
            for job in jobs:
                uid = job["metadata"]["uid"]
                if uid not in self._done and not job.get("status", {}).get("conditions"):
                    self._done.add(uid)
                    self._run(job)

    def _run(self, job: dict[str, Any]) -> None:
        ok = True
        for container in job["spec"]["template"]["spec"]["containers"]:
            argv = container.get("command") or [release.GPUSHARE]
            env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "POD_NAMESPACE": NAMESPACE}
            result = subprocess.run(
                [*argv, *container.get("args", [])],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            if result.returncode != 0:
                ok = False
                self.errors.append(f"hook {job['metadata']['name']}/{container['name']}: {result.stderr}")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        kinds = ["SuccessCriteriaMet", "Complete"] if ok else ["FailureTarget", "Failed"]
        job["status"] = {
            "startTime": now,
            **({"completionTime": now, "succeeded": 1} if ok else {"failed": 1}),
            "conditions": [
                {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now}
                for kind in kinds
            ],
        }
        name = job["metadata"]["name"]
        try:
            rest.request(
                self.api, "PUT", rest.path("jobs", name, NAMESPACE, group="batch") + "/status", body=job
            )
        except Exception as err:
            self.errors.append(f"marking hook Job {name}: {err}")


@dataclass(frozen=True)
class _Fence:
    where: str
    code: str


def _all_fences() -> list[_Fence]:
    out = []
    for file in FILES:
        text = file.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            out.append(_Fence(f"{file.relative_to(ROOT)}:{line}", match.group(3)))
    return out
