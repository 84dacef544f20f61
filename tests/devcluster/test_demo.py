"""`gpushare demo` on the API stand-in (no control-plane binaries needed): it says it is a stand-in,
prints the webhook's refusal and the inspect table, and leaves no process behind, however it ends.
The same run on the real control plane is tests/e2e/test_demo.py."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.devcluster.demorun import Demo
from webhook.devcluster import helm
from webhook.devcluster.demo import show as demo_mod

TABLE = "Allocated/Total GPU Memory In Cluster (GiB):\n34/56 (60%)"
REFUSAL = "only whole GPUs are possible with nvidia.com/gpu"


def test_without_binaries_the_demo_runs_on_the_standin_says_so_and_shows_the_refusal_and_table(
    tmp_path: Path,
) -> None:
    demo = Demo("--once", "--workdir", str(tmp_path / "demo"), env={"GPUSHARE_KUBE_BINS": str(tmp_path)})
    assert demo.finish(timeout=120) == 0, demo.err
    out = demo.output
    assert "the API STAND-IN" in out
    assert "no\n  kube-scheduler runs" in out
    assert (
        "For the real control plane it needs the control-plane binaries (build them: bash scripts/kube-bins"
        in out
    )
    assert "pod demo/half-gpu: nvidia.com/gpu: 0.5 REFUSED:" in out
    assert REFUSAL in out
    assert "GPU0(Allocated/Total)" in out
    assert TABLE in out
    assert demo.survivors() == []


def test_ctrl_c_stops_every_process_and_exits_130_without_a_traceback(tmp_path: Path) -> None:
    demo = Demo("--standin", "--workdir", str(tmp_path))
    demo.wait_for("Ctrl-C stops it all.", timeout=120)
    assert demo.survivors(), "the demo's processes should be running before Ctrl-C"
    assert demo.finish(signal.SIGINT) == 130
    err = demo.err
    assert "gpushare demo: interrupted" in err
    assert "Traceback" not in err
    assert demo.survivors() == []


def test_sigterm_stops_every_process_and_exits_0(tmp_path: Path) -> None:
    demo = Demo("--standin", "--workdir", str(tmp_path))
    demo.wait_for("Ctrl-C stops it all.", timeout=120)
    assert demo.finish(signal.SIGTERM) == 0
    assert "Traceback" not in demo.err
    assert demo.survivors() == []


def test_a_copy_installed_without_the_chart_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `pip install .` copies the package without charts/ beside it: say how to install from the checkout.
    monkeypatch.setattr(helm, "CHART", tmp_path / "site-packages" / "charts" / "gpushare")
    said: list[str] = []
    cluster = demo_mod.choose(demo_mod.DemoSettings(), tmp_path, said.append)
    assert type(cluster).__name__ == "StandinCluster"
    assert any(
        f"the chart (not at {tmp_path}/site-packages/charts/gpushare): install the package from the checkout "
        "with pip install -e ., as bash scripts/test does" in line
        for line in said
    ), said
