"""The kubectl plugins through the real kubectl against the real API server: with the package's scripts on
PATH and only $KUBECONFIG to find the cluster, `kubectl gpushare inspect` and the original's
`kubectl inspect gpushare` print what `gpushare inspect --kubeconfig` prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.e2e import objects
from tests.e2e.bed import GPUSHARE, Bed
from webhook.kube import rest

GROUP = "kubectl-plugin"
SCRIPTS = Path(sys.executable).parent  # where pip put gpushare and the two plugin scripts


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr}"
    return done.stdout


def test_kubectl_runs_both_plugins_as_gpushare_inspect_on_the_same_cluster(bed: Bed, tmp_path: Path) -> None:
    for script in ("kubectl-gpushare", "kubectl-inspect-gpushare"):
        assert (SCRIPTS / script).is_file(), f"{SCRIPTS / script} is missing: reinstall the package"
    names = [f"{GROUP}-node-{i}" for i in range(2)]
    for name in names:
        bed.node(name, 2, 16, labels={"cgpu.disable.isolation": "false"}, group=GROUP)
    ns = bed.namespace("e2e-kubectl-plugin")
    for i, gib in enumerate((10, 6, 4)):
        body = objects.gpu_pod(f"k{i}", gib)
        objects.in_group(body, GROUP)
        bed.request("POST", rest.path("pods", namespace=ns), body=body)
    bed.wait("all bound", lambda: all(p["spec"].get("nodeName") for p in bed.pods(ns)) and bed.pods(ns))

    kubectl = str(bed.cp.bins / "kubectl")
    # kubectl finds kubectl-<name> on PATH and hands it kubectl's environment: KUBECONFIG alone says
    # where the cluster is. HOME keeps kubectl's cache out of the checkout and any ~/.kube/config unread.
    env = {
        **os.environ,
        "PATH": f"{SCRIPTS}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(bed.cp.admin_kubeconfig),
        "HOME": str(tmp_path),
    }
    # `plugin list` exits 1 on any warning about other plugins on this PATH: only its list is read.
    argv = [kubectl, "plugin", "list", "--name-only"]
    listed = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert {"kubectl-gpushare", "kubectl-inspect-gpushare"} <= set(listed.stdout.split()), listed.stderr

    for args in ([], ["-d"], ["-o", "json"]):
        direct = [GPUSHARE, "inspect", "--kubeconfig", str(bed.cp.admin_kubeconfig), *args, *names]
        expected = _run(direct, {**env, "KUBECONFIG": ""})
        assert names[0] in expected
        assert _run([kubectl, "gpushare", "inspect", *args, *names], env) == expected
        assert _run([kubectl, "inspect", "gpushare", *args, *names], env) == expected
