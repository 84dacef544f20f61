"""`gpushare demo` on the real control plane (etcd, kube-apiserver and kube-scheduler from
scripts/kube-bins): the API server calls the webhook, which refuses the half GPU; kube-scheduler calls the
extender, which places the rest; Ctrl-C stops every process it started."""

from __future__ import annotations

import signal
from pathlib import Path

from tests.devcluster.demorun import Demo

REFUSAL = (
    'admission webhook "pods.mutate.gpushare.aliyun.com" denied the request: Pod has 1 problem with GPU '
    "resources:"
)


def test_demo_on_the_real_control_plane_refuses_places_shows_the_table_and_ctrl_c_stops_it_all(
    kube_bins: Path, tmp_path: Path
) -> None:
    demo = Demo("--workdir", str(tmp_path), env={"GPUSHARE_KUBE_BINS": str(kube_bins)})
    demo.wait_for("Ctrl-C stops it all.", timeout=240)
    out = demo.output
    assert "the real control plane: etcd, kube-apiserver and kube-scheduler" in out
    assert "STAND-IN" not in out
    assert "pod demo/half-gpu: nvidia.com/gpu: 0.5 REFUSED:" in out
    assert REFUSAL in out
    assert '"500m": only whole GPUs are possible with nvidia.com/gpu' in out  # as the API server sent it
    for pod in ("train-a", "train-b", "infer", "notebook"):
        assert f"pod {pod} -> gpu-node-" in out
    assert "Allocated/Total GPU Memory In Cluster (GiB):\n34/56 (60%)" in out
    assert demo.survivors(), "the demo's processes should be running before Ctrl-C"
    assert demo.finish(signal.SIGINT) == 130
    assert "gpushare demo: interrupted" in demo.err
    assert "Traceback" not in demo.err
    assert demo.survivors() == []
