"""Every shell block of README.md and docs/*.md runs as written, against a real kube-apiserver.

A block that cannot run here says why in its fence (```sh no-run: <reason>); one that needs a cluster whose
pods run (Kueue's objects need Kueue) says so (```sh cluster: <reason>) and runs in tests/cluster
instead (tests/cluster/test_kueue.py). The others run in the
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
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.hookrunner import HookRunner
from webhook.devcluster import helm, objects, release
from webhook.devcluster.controlplane import ControlPlane

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

    @property
    def cluster_reason(self) -> str | None:
        """Why the block runs in tests/cluster, on a node that runs pods, rather than here."""
        match = re.fullmatch(r"cluster:\s*(.*)", self.info)
        return match.group(1).strip() if match else None

    @property
    def runs_here(self) -> bool:
        return self.no_run_reason is None and self.cluster_reason is None


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
    runnable = [b for b in blocks() if b.runs_here]
    install = [b.code for b in runnable if b.file.name == "install.md"]
    assert any("helm install" in c for c in install) and any("helm uninstall" in c for c in install)


def test_every_block_that_does_not_run_says_why() -> None:
    for block in blocks():
        why = block.no_run_reason or block.cluster_reason
        assert block.info in ("",) or why, f"{block.where}: unknown fence info {block.info!r}"
        if why is not None:
            assert len(why.split()) >= 3, f"{block.where}: say why it cannot run here"


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
    hooks = HookRunner(api, cp.admin_kubeconfig, NAMESPACE)
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
            if not block.runs_here:
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
