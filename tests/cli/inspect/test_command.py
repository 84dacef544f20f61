"""`gpushare inspect` against the API stand-in with a populated cluster, and an extender's /inspect.

Failures of the API (unreachable, 401/403/404, kubeconfig) are in test_errors.py.
"""

from __future__ import annotations

import http.server
import io
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from webhook.cli.inspect import command
from webhook.cli.inspect import table as inspect_table
from webhook.cli.inspect.settings import InspectSettings
from webhook.core.placement import accounting, modes
from webhook.core.placement import annotations as ann
from webhook.core.wire import resources
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.extender import app as extender_app
from webhook.extender import cache as extender_cache


def placed(gpus: dict[int, dict[int, int]], assigned: bool = True, dev: int = 16) -> dict[str, str]:
    """The annotations the extender writes: container index -> {GPU index: units}."""
    return ann.encode(ann.Placement(ann.Allocation(gpus), dev, 1_700_000_000_000_000_000, assigned))


def populate(server: ApiServer) -> None:
    # n1: two equal 16 GiB GPUs known only from capacity, as the original device plugin reports them.
    server.add_node("n1", gpus=2, gpu_mem=32)
    server.edit("nodes", "n1", {"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}})
    # n2: mixed sizes published per GPU, one of them unhealthy.
    devices = ann.NodeDevices(
        "GiB",
        (
            ann.GpuDevice(0, "GPU-aaa", 16, model="Tesla V100"),
            ann.GpuDevice(1, "GPU-bbb", 24, healthy=False, model="A10"),
            ann.GpuDevice(2, "GPU-ccc", 80, model="A100"),
        ),
    )
    server.add_node(
        "n2", gpus=3, gpu_mem=120, annotations={resources.NODE_DEVICES_ANNOTATION: devices.to_json()}
    )
    server.add_node("cpu-only")
    server.add_pod(
        "train", "ml", gpu_mem=[4], node_name="n1", phase="Running", annotations=placed({0: {0: 4}})
    )
    # Placed by the original extender: only the five ALIYUN_COM_* keys.
    server.add_pod(
        "legacy",
        gpu_mem=[6],
        node_name="n1",
        phase="Running",
        annotations={
            resources.ANN_MEM_IDX: "1",
            resources.ANN_MEM_POD: "6",
            resources.ANN_MEM_DEV: "16",
            resources.ANN_MEM_ASSIGNED: "true",
            resources.ANN_MEM_ASSUME_TIME: "1",
        },
    )
    # A multi-GPU pod (label gpu-count 2), placed but not allocated yet.
    server.add_pod(
        "split",
        "ml",
        gpu_mem=[20],
        node_name="n2",
        labels={resources.GPU_COUNT_LABEL: "2"},
        annotations=placed({0: {0: 10, 2: 10}}, assigned=False),
    )
    # Two containers on two GPUs.
    server.add_pod(
        "pair",
        "ml",
        gpu_mem=[3, 30],
        node_name="n2",
        phase="Running",
        annotations=placed({0: {0: 3}, 1: {2: 30}}),
    )
    # Being deleted, still counted: its containers hold the memory until the pod is gone.
    server.add_pod("leaving", gpu_mem=[8], node_name="n1", phase="Running", annotations=placed({0: {1: 8}}))
    server.mark_deleting("leaving")
    # Not counted: finished, and one that bypassed the extender.
    server.add_pod("done", gpu_mem=[8], node_name="n1", phase="Succeeded", annotations=placed({0: {0: 8}}))
    server.add_pod("rogue", gpu_mem=[2], node_name="n2", phase="Pending")
    server.add_pod("web", node_name="cpu-only", phase="Running")


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    populate(apiserver)
    return apiserver


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = command.main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_json_counts_every_gpu_of_mixed_sizes_and_multi_gpu_pods(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--server", cluster.url, "-o", "json")
    assert code == 0
    found = json.loads(out)
    assert (found["unit"], found["allocated"], found["total"], found["percent"]) == ("GiB", 71, 152, 46.7)
    n1, n2 = found["nodes"]  # cpu-only has no GPUs and is left out
    assert (n1["name"], n1["address"], n1["allocated"], n1["total"], n1["pending"]) == (
        "n1",
        "10.0.0.1",
        18,
        32,
        0,
    )
    assert [(g["index"], g["allocated"], g["total"]) for g in n1["gpus"]] == [(0, 4, 16), (1, 14, 16)]
    assert [(g["index"], g["allocated"], g["total"], g["healthy"]) for g in n2["gpus"]] == [
        (0, 13, 16, True),
        (1, 0, 24, False),
        (2, 40, 80, True),
    ]
    assert n2["pending"] == 20
    assert n2["gpus"][2]["pods"] == [
        {"namespace": "ml", "name": "pair", "allocated": 30, "assigned": True},
        {"namespace": "ml", "name": "split", "allocated": 10, "assigned": False},
    ]
    assert n2["problems"] == ["pod default/rogue: asks for GPU memory but was not placed by the extender"]


def test_text_summary_has_the_gpushare_inspect_columns_and_cluster_total(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--server", cluster.url)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [
        "NAME",
        "IPADDRESS",
        "GPU0(Allocated/Total)",
        "GPU1(Allocated/Total)",
        "GPU2(Allocated/Total)",
        "PENDING(Allocated)",
        "GPU",
        "Memory(GiB)",
        "MODE",
        "MODEL",
    ]
    # Unlabelled nodes are the original gpushare nodes: mode share. n2 has GPUs of three models.
    assert lines[1].split() == ["n1", "10.0.0.1", "4/16", "14/16", "18/32", "share", "-"]
    assert lines[2].split() == [
        "n2", "-", "13/16", "0/24", "(unhealthy)", "40/80", "20", "53/120", "share", "mixed"
    ]  # fmt: skip
    assert "Allocated/Total GPU Memory In Cluster (GiB):" in lines
    assert "71/152 (46%)" in lines
    assert "warning: n2: pod default/rogue: asks for GPU memory but was not placed by the extender" in lines


def test_details_list_the_pods_of_each_gpu_with_assigned(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--server", cluster.url, "-d", "n2")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "NAME:       n2"
    header = lines.index(next(line for line in lines if line.startswith("NAME ")))
    assert lines[header].split() == [
        "NAME",
        "NAMESPACE",
        "GPU0(Allocated)",
        "GPU1(Allocated)",
        "GPU2(Allocated)",
        "ASSIGNED",
    ]
    assert lines[header + 1].split() == ["pair", "ml", "3", "0", "30", "true"]
    assert lines[header + 2].split() == ["split", "ml", "10", "0", "10", "false"]
    assert "Allocated:        53 (44%)" in lines
    assert "Pending:          20 (placed, ASSIGNED=false)" in lines
    assert "53/120 (44%)" in lines


def test_mib_cluster_converts_gpus_published_in_gib(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    # --unit is the cluster's gpu-mem unit (the extender's --memory-unit): capacity and pod annotations
    # are already in it; GPUs the device plugin published in another unit are converted.
    code, out, _ = run(capsys, "--server", cluster.url, "--unit", "MiB", "-o", "json", "n1", "n2")
    assert code == 0
    n1, n2 = json.loads(out)["nodes"]
    assert (n1["allocated"], n1["total"]) == (18, 32)
    assert [g["total"] for g in n2["gpus"]] == [16 * 1024, 24 * 1024, 80 * 1024]
    code, out, _ = run(capsys, "--server", cluster.url, "--unit", "MiB", "n1")
    assert "GPU Memory(MiB)" in out.splitlines()[0]


def test_many_pods_are_listed_page_by_page(apiserver: ApiServer, capsys: pytest.CaptureFixture[str]) -> None:
    apiserver.add_node("big", gpus=8, gpu_mem=8 * 80)
    for i in range(command.PAGE_SIZE + 100):
        apiserver.add_pod(
            f"p{i}", gpu_mem=[1], node_name="big", phase="Running", annotations=placed({0: {i % 8: 1}})
        )
    code, out, _ = run(capsys, "--server", apiserver.url, "-o", "json")
    assert code == 0
    assert json.loads(out)["allocated"] == command.PAGE_SIZE + 100
    assert apiserver.requests[("list", "pods")] >= 1


@pytest.mark.parametrize(
    "argv",
    [
        ["--extender", "http://x", "--server", "http://y"],
        ["--timeout", "0"],
        ["--timeout", "nan"],
        ["--timeout", "inf"],
        ["--timeout", "-1"],
        ["--server", "notaurl"],
        ["--server", "127.0.0.1:8080"],
        ["--unit", "TiB"],
        ["-o", "yaml"],
    ],
    ids=[
        "extender-and-server",
        "zero-timeout",
        "nan-timeout",
        "inf-timeout",
        "negative-timeout",
        "server-without-scheme",
        "server-host-port",
        "bad-unit",
        "bad-output",
    ],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    assert "usage: gpushare inspect" in capsys.readouterr().err


def test_a_node_named_twice_is_shown_and_counted_once(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "--server", cluster.url, "-o", "json", "n2", "n1", "n2")
    assert code == 0
    found = json.loads(out)
    assert [n["name"] for n in found["nodes"]] == ["n1", "n2"]
    assert (found["allocated"], found["total"]) == (71, 152)
    assert InspectSettings(nodes=("b", "a", "b")).nodes == ("b", "a")


# --- --extender -------------------------------------------------------------------------------------


class FakeExtender(http.server.ThreadingHTTPServer):
    """A stand-in for the extender's GET <prefix>/inspect[/<node>], answering with `pages[path]`."""

    pages: dict[str, tuple[int, bytes]]


class _Handler(http.server.BaseHTTPRequestHandler):
    server: FakeExtender

    def do_GET(self) -> None:
        status, body = self.server.pages.get(self.path, (404, b'{"nodes": [], "error": "not found"}'))
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def extender() -> Iterator[FakeExtender]:
    server = FakeExtender(("127.0.0.1", 0), _Handler)
    server.pages = {}
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def extender_answer(server: ApiServer) -> bytes:
    """What the real extender's inspect route writes for the stand-in's nodes (its own `inspect_json`)."""
    pods = server.objects("pods")
    views = []
    for node in server.objects("nodes"):
        ledger, _ = accounting.build(node, pods)
        views.append(
            extender_app.inspect_json(
                extender_cache.NodeView(
                    ledger.node,
                    ledger.unit,
                    ledger.gpus(),
                    ledger.shares(),
                    ledger.problems(),
                    modes.node_mode(node["metadata"].get("labels")).value,
                )
            )
        )
    return json.dumps({"nodes": views}).encode()


def test_extender_view_matches_the_cluster_view(
    cluster: ApiServer, extender: FakeExtender, capsys: pytest.CaptureFixture[str]
) -> None:
    extender.pages["/gpushare-scheduler/inspect"] = (200, extender_answer(cluster))
    url = f"http://127.0.0.1:{extender.server_port}/gpushare-scheduler"
    code, out, _ = run(capsys, "--extender", url, "-o", "json")
    assert code == 0
    from_extender = json.loads(out)
    _, out, _ = run(capsys, "--server", cluster.url, "-o", "json")
    from_cluster = json.loads(out)
    for node in from_cluster["nodes"]:
        node["address"] = ""  # the extender does not report addresses
        node["problems"] = [p for p in node["problems"] if "not placed" not in p]  # nor skipped pods
    from_extender["nodes"] = [n for n in from_extender["nodes"] if n["total"] or n["gpus"]]
    assert from_extender == from_cluster


def test_extender_unknown_node_and_bad_answers_exit_1(
    extender: FakeExtender, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{extender.server_port}/gpushare-scheduler"
    code, _, err = run(capsys, "--extender", url, "ghost")
    assert code == 1
    assert err.strip().endswith("answered HTTP 404: not found")
    extender.pages["/gpushare-scheduler/inspect"] = (200, b"<html>")
    code, _, err = run(capsys, "--extender", url)
    assert (code, "is not JSON" in err) == (1, True)
    extender.pages["/gpushare-scheduler/inspect"] = (
        200,
        b'{"nodes": [{"name": "n", "devs": [{"id": 0, "totalGPU": -1}]}]}',
    )
    code, _, err = run(capsys, "--extender", url + "/inspect")
    assert (code, "cannot be read" in err) == (1, True)


def test_unreachable_extender_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--extender", "http://127.0.0.1:9/gpushare-scheduler", "--timeout", "2")
    assert code == 1
    assert err == (
        "gpushare inspect: cannot reach the extender at "
        "http://127.0.0.1:9/gpushare-scheduler/inspect: connection refused\n"
    )


def test_empty_cluster_prints_zero_percent() -> None:
    out = io.StringIO()
    text = inspect_table.render_text(inspect_table.ClusterUse("GiB", ()))
    out.write(text)
    assert out.getvalue().splitlines()[-1] == "0/0 (0%)"


def test_mode_and_model_columns_follow_the_node_labels_and_gpus(
    apiserver: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    one_model = ann.NodeDevices("GiB", (ann.GpuDevice(0, "GPU-t4", 15, model="Tesla T4"),))
    notes = {resources.NODE_DEVICES_ANNOTATION: one_model.to_json()}
    apiserver.add_node("whole", gpus=1, gpu_mem=15, labels={modes.MODE_LABEL: "default"}, annotations=notes)
    apiserver.add_node("typo", gpus=1, gpu_mem=15, labels={modes.MODE_LABEL: "shared"}, annotations=notes)
    code, out, _ = run(capsys, "--server", apiserver.url, "-o", "json")
    assert code == 0
    typo, whole = json.loads(out)["nodes"]
    # The model as the aliyun.accelerator/nvidia_name label spells it: what a nodeSelector names.
    assert (whole["mode"], whole["model"]) == ("default", "Tesla-T4")
    assert typo["mode"] == "invalid"
    assert typo["problems"] == [
        "node label ack.node.gpu.schedule='shared' is not a known mode; use one of default, topology, "
        "share, cgpu, mps, dra, dra-mps"
    ]
    _, out, _ = run(capsys, "--server", apiserver.url, "-d", "whole")
    assert "MODE:       default" in out.splitlines()
    assert "MODEL:      Tesla-T4" in out.splitlines()


def test_how_each_node_hands_its_gpus_out_shows_once_its_device_plugin_published_it(
    apiserver: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    devices_ = ann.NodeDevices("GiB", (ann.GpuDevice(0, "GPU-t4", 15, model="Tesla T4"),)).to_json()
    share = {modes.MODE_LABEL: "share"}
    apiserver.add_node(
        "before", gpus=1, gpu_mem=15, labels=share, annotations={resources.NODE_DEVICES_ANNOTATION: devices_}
    )
    _, out, _ = run(capsys, "--server", apiserver.url)
    assert "DEVICE LIST" not in out  # no node says yet: the table stays the original's
    notes = {resources.NODE_DEVICES_ANNOTATION: devices_, resources.NODE_DEVICE_LIST_ANNOTATION: "cdi-cri"}
    apiserver.add_node("cdi", gpus=1, gpu_mem=15, labels=share, annotations=notes)
    _, out, _ = run(capsys, "--server", apiserver.url)
    header, *rows = out.splitlines()[:3]
    assert header.split()[-2:] == ["DEVICE", "LIST"]
    assert rows[0].split()[0] == "before" and rows[0].split()[-1] == "-"
    assert rows[1].split()[0] == "cdi" and rows[1].split()[-1] == "cdi-cri"
    _, out, _ = run(capsys, "--server", apiserver.url, "-d", "cdi")
    assert "DEVICE LIST: cdi-cri" in out.splitlines()
    _, out, _ = run(capsys, "--server", apiserver.url, "-o", "json")
    assert [n["deviceList"] for n in json.loads(out)["nodes"]] == ["", "cdi-cri"]


def _quota(name: str, namespace: str, hard: dict[str, str], used: dict[str, str] | None) -> dict[str, Any]:
    quota: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"hard": hard},
    }
    if used is not None:
        quota["status"] = {"hard": hard, "used": used}
    return quota


def test_namespaces_show_the_memory_placed_beside_the_gpu_lines_of_their_quotas(
    cluster: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    hard = {"requests.aliyun.com/gpu-mem": "64", "requests.nvidia.com/gpu": "2", "requests.cpu": "8"}
    cluster.put(
        _quota("gpu", "ml", hard, {"requests.aliyun.com/gpu-mem": "57", "requests.nvidia.com/gpu": "0"})
    )
    cluster.put(_quota("fresh", "new-team", {"requests.aliyun.com/gpu-mem": "8"}, None))  # not counted yet
    cluster.put(_quota("cpu", "default", {"limits.aliyun.com/gpu-mem": "8"}, None))  # counts nothing
    code, out, _ = run(capsys, "--server", cluster.url, "--namespaces")
    assert code == 0
    rows = [line.split() for line in out.splitlines()]
    assert rows == [
        ["NAMESPACE", "PLACED(GiB)", "QUOTA", "RESOURCE", "USED/HARD"],
        ["default", "14", "-", "(no", "GPU", "quota)"],  # legacy 6 + leaving 8; rogue never placed
        ["ml", "57", "gpu", "requests.aliyun.com/gpu-mem", "57/64"],
        ["gpu", "requests.nvidia.com/gpu", "0/2"],
        ["new-team", "0", "fresh", "requests.aliyun.com/gpu-mem", "?/8"],
    ]
    code, out, _ = run(capsys, "--server", cluster.url, "--namespaces", "-o", "json")
    found = json.loads(out)
    assert found["unit"] == "GiB"
    assert [n["namespace"] for n in found["namespaces"]] == ["default", "ml", "new-team"]
    assert found["namespaces"][1]["quotas"][0] == {
        "quota": "gpu",
        "resource": "requests.aliyun.com/gpu-mem",
        "used": "57",
        "hard": "64",
    }


@pytest.mark.parametrize("other", [["--usage"], ["-d"], ["--extender", "https://x:1/p"]])
def test_namespaces_do_not_combine_with_the_node_views(
    other: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        command.main(["--namespaces", *other])
    assert caught.value.code == 2
    assert "--namespaces reads the cluster's pods and quotas" in capsys.readouterr().err


def test_a_node_whose_kubelet_stopped_posting_is_shown_not_ready_with_its_memory_still_counted(
    apiserver: ApiServer, capsys: pytest.CaptureFixture[str]
) -> None:
    devices_ = ann.NodeDevices("GiB", (ann.GpuDevice(0, "GPU-a", 16),)).to_json()
    share = {modes.MODE_LABEL: "share"}
    notes = {resources.NODE_DEVICES_ANNOTATION: devices_}
    apiserver.add_node("up", gpus=1, gpu_mem=16, labels=share, annotations=notes)
    lost = apiserver.add_node("lost", gpus=1, gpu_mem=16, labels=share, annotations=notes)
    lost["status"]["conditions"] = [{"type": "Ready", "status": "Unknown"}]
    apiserver.put(lost)
    _, out, _ = run(capsys, "--server", apiserver.url)
    assert out.splitlines()[-1] == (
        "warning: lost: node not Ready (Unknown): its pods keep their GPU memory until they are deleted "
        "(docs/operations.md)"
    )
    _, out, _ = run(capsys, "--server", apiserver.url, "-o", "json")
    assert {n["name"]: n["ready"] for n in json.loads(out)["nodes"]} == {"lost": False, "up": True}
