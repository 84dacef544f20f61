"""`gpushare inspect --usage`: each node's device plugin report beside the ledger, per GPU and per pod, in
text and JSON; nodes whose plugin cannot be asked say why. The real API server's pod proxy is in
tests/e2e/test_usage.py; here the proxy is replaced by the reports themselves."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cli.inspect.test_command import placed
from webhook.cli.inspect import command, counting, table
from webhook.cli.inspect import usage as inspect_usage
from webhook.core.usage import usage, usagereport
from webhook.devcluster.standin.apiserver import ApiServer, pod_manifest
from webhook.kube import errors

GIB = 1 << 30


def _cluster() -> table.ClusterUse:
    nodes = [
        {
            "metadata": {"name": "n1"},
            "status": {"capacity": {"aliyun.com/gpu-mem": "32", "aliyun.com/gpu-count": "2"}},
        },
        {
            "metadata": {"name": "n2"},
            "status": {"capacity": {"aliyun.com/gpu-mem": "16", "aliyun.com/gpu-count": "1"}},
        },
    ]
    pods = [
        pod_manifest(
            "train", "ml", gpu_mem=[4], node_name="n1", phase="Running", annotations=placed({0: {0: 4}})
        ),
        pod_manifest(
            "serve", "ml", gpu_mem=[2], node_name="n1", phase="Running", annotations=placed({0: {1: 2}})
        ),
        pod_manifest(
            "solo", "ml", gpu_mem=[8], node_name="n2", phase="Running", annotations=placed({0: {0: 8}})
        ),
    ]
    return counting.cluster_use(nodes, pods)


REPORT = usage.NodeUsage(
    "n1",
    0.0,
    (
        usage.GpuUsage(0, "GPU-a", 16 * GIB, 4 * GIB, int(6.5 * GIB), 0.75, True, {usage.HOST: GIB // 2}),
        usage.GpuUsage(1, "GPU-b", 16 * GIB, 2 * GIB, GIB, None, True),
    ),
    (
        usage.ContainerUsage("ml", "train", "c0", "u1", 0, 4 * GIB, 5 * GIB, 0.5, 1, True),
        usage.ContainerUsage("ml", "serve", "c0", "u2", 1, 2 * GIB, GIB, None, 1),
        usage.ContainerUsage("web", "sneaky", "c0", "u3", 0, 0, GIB, 0.25, 1, True),
    ),
)


def _pod(node: str, name: str = "", port: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name or f"plugin-{node}", "namespace": "gpushare-system"},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "device-plugin", "ports": [port or {"name": "health", "containerPort": 9400}]}
            ],
        },
        "status": {"phase": "Running"},
    }


def test_each_nodes_report_comes_through_its_plugin_pods_proxy_path():
    asked: list[str] = []

    def fetch(path: str) -> Any:
        asked.append(path)
        return usagereport.encode(REPORT)

    found = inspect_usage.reports(["n1"], [_pod("n1"), _pod("n2")], fetch)
    assert asked == ["/api/v1/namespaces/gpushare-system/pods/plugin-n1:9400/proxy/usage"]
    assert found == {"n1": REPORT}


def _failing(err: Exception) -> Any:
    def fetch(path: str) -> Any:
        raise err

    return fetch


@pytest.mark.parametrize(
    ("pods", "fetch", "needle"),
    [
        ([], _failing(AssertionError("not asked")), "usage: no gpushare device plugin pod on this node"),
        (
            [_pod("n1", port={"name": "metrics", "containerPort": 1})],
            _failing(AssertionError()),
            "has no port named health",
        ),
        (
            [_pod("n1")],
            _failing(
                errors.ForbiddenError(
                    403, "Forbidden", 'pods "plugin-n1" is forbidden: cannot get pods/proxy'
                )
            ),
            'refused the proxy to the device plugin (needs get on pods/proxy): pods "plugin-n1" is forbidden',
        ),
        (
            [_pod("n1")],
            _failing(errors.ApiError(503, "ServiceUnavailable", "GPU usage has not been sampled yet")),
            "usage: the device plugin could not be asked: GPU usage has not been sampled yet",
        ),
        ([_pod("n1")], lambda path: {"node": 1}, "usage: report.gpus is not a list"),
        (
            [_pod("n1")],
            lambda path: usagereport.encode(REPORT) | {"node": "n9"},
            "the device plugin asked for node n1 answered for node 'n9'",
        ),
    ],
    ids=["no-plugin", "no-port", "forbidden", "not-sampled", "not-a-report", "another-node"],
)
def test_a_node_whose_plugin_cannot_be_asked_says_why(pods, fetch, needle):
    found = inspect_usage.reports(["n1"], pods, fetch)
    assert isinstance(found["n1"], str) and needle in found["n1"]


def test_a_running_plugin_pod_is_asked_before_one_that_is_leaving():
    leaving = {**_pod("n1", "old"), "status": {"phase": "Failed"}}
    assert inspect_usage.agents([_pod("n1", "new"), leaving])["n1"]["metadata"]["name"] == "new"
    assert inspect_usage.agents([leaving, _pod("n1", "new")])["n1"]["metadata"]["name"] == "new"


def test_the_summary_shows_used_beside_allocated_per_gpu_and_in_the_cluster():
    merged = inspect_usage.merge(
        _cluster(), {"n1": REPORT, "n2": "usage: no gpushare device plugin pod on this node"}
    )
    text = table.render_text(merged)
    n1 = next(line for line in text.splitlines() if line.startswith("n1"))
    assert "4/16 (used 6.5)" in n1 and "2/16 (used 1.0)" in n1
    assert "Used/Total GPU Memory In Cluster (GiB):\n7.5/48 (16%)" in text
    assert "warning: n2: usage: no gpushare device plugin pod on this node" in text


def test_details_show_each_pods_use_its_over_share_and_pods_using_a_gpu_without_a_share():
    merged = inspect_usage.merge(_cluster(), {"n1": REPORT})
    text = table.render_text(merged, details=True)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("NAME ") and "GPU0(Used)" in line)
    assert header.split() == [
        "NAME",
        "NAMESPACE",
        "GPU0(Allocated)",
        "GPU0(Used)",
        "GPU1(Allocated)",
        "GPU1(Used)",
        "ASSIGNED",
        "OVER",
        "SHARE",
    ]
    assert next(line for line in lines if line.startswith("train")).split() == [
        "train",
        "ml",
        "4",
        "5.0",
        "0",
        "-",
        "true",
        "GPU0",
    ]
    assert next(line for line in lines if line.startswith("serve")).split() == [
        "serve",
        "ml",
        "0",
        "-",
        "2",
        "1.0",
        "true",
    ]
    assert next(line for line in lines if line.startswith("sneaky")).split() == [
        "sneaky",
        "web",
        "0",
        "1.0",
        "0",
        "-",
        "true",
        "GPU0",
    ]
    assert "Used GPU0:        6.5 of 16, busy 75%; in no pod: host 0.5" in text
    assert "Used GPU1:        1.0 of 16" in text


def test_json_carries_bytes_utilisation_and_over_share_only_with_usage():
    plain = table.to_json(_cluster())
    assert "usedBytes" not in json.dumps(plain)
    data = table.to_json(inspect_usage.merge(_cluster(), {"n1": REPORT}))
    gpu0 = data["nodes"][0]["gpus"][0]
    assert (gpu0["usedBytes"], gpu0["utilization"], gpu0["unattributedBytes"]) == (
        int(6.5 * GIB),
        0.75,
        {"host": GIB // 2},
    )
    pods = {p["name"]: p for p in gpu0["pods"]}
    assert (pods["train"]["usedBytes"], pods["train"]["overShare"]) == (5 * GIB, True)
    assert (pods["sneaky"]["allocated"], pods["sneaky"]["usedBytes"]) == (0, GIB)


def test_mib_clusters_show_whole_mib():
    assert table.amount(1536 * (1 << 20), "MiB") == "1536"
    assert table.amount(1536 * (1 << 20), "128MiB") == "12.0"
    assert table.amount(None, "GiB") == "-"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--usage", "--extender", "http://x"], "--usage asks the device plugins through the API server"),
        (["--agent-namespace", "gs"], "--agent-namespace and --agent-selector go with --usage"),
        (["--usage", "--agent-selector", " "], "--agent-selector must not be empty"),
    ],
    ids=["with-extender", "namespace-alone", "empty-selector"],
)
def test_bad_usage_arguments_exit_2(capsys, argv, needle):
    with pytest.raises(SystemExit) as caught:
        command.main(argv)
    assert caught.value.code == 2
    assert needle in capsys.readouterr().err


def test_through_the_api_a_node_without_a_plugin_pod_is_a_warning_not_a_failure(apiserver: ApiServer, capsys):
    apiserver.add_node("n1", gpus=1, gpu_mem=16)
    apiserver.add_pod("train", gpu_mem=[4], node_name="n1", phase="Running", annotations=placed({0: {0: 4}}))
    assert command.main(["--server", apiserver.url, "--usage"]) == 0
    out = capsys.readouterr().out
    assert "4/16 (used -)" in out
    assert "warning: n1: usage: no gpushare device plugin pod on this node" in out
