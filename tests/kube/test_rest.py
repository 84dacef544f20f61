"""Raw JSON requests: paths, paged lists, and errors that arrive as ApiError only."""

from __future__ import annotations

import pytest

from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import errors, rest


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("pods",), "/api/v1/pods"),
        (("pods", "p", "ns"), "/api/v1/namespaces/ns/pods/p"),
        (
            ("leases", "l", "kube-system", "coordination.k8s.io"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        ),
        (("nodes", "a/b"), "/api/v1/nodes/a%2Fb"),
    ],
    ids=["collection", "namespaced", "group", "escaped-name"],
)
def test_paths_follow_the_api_layout(args, expected):
    assert rest.path(*args) == expected


def test_list_all_follows_continue_tokens_across_pages(apiserver: ApiServer):
    for i in range(7):
        apiserver.add_node(f"n{i}", gpus=1, gpu_mem=16)
    apiserver.reset_counts()
    names = [n["metadata"]["name"] for n in rest.list_all(apiserver.api, rest.path("nodes"), page_size=3)]
    assert sorted(names) == [f"n{i}" for i in range(7)]
    assert apiserver.requests[("list", "nodes")] == 3


def test_list_all_passes_selectors(apiserver: ApiServer):
    apiserver.add_node("a", gpus=1, gpu_mem=16)
    apiserver.add_pod("on-a", "default", gpu_mem=[1], node_name="a")
    apiserver.add_pod("elsewhere", "default", gpu_mem=[1])
    pods = list(rest.list_all(apiserver.api, rest.path("pods"), query={"fieldSelector": "spec.nodeName=a"}))
    assert [p["metadata"]["name"] for p in pods] == ["on-a"]


def test_list_all_errors_are_api_errors(apiserver: ApiServer):
    apiserver.fail_next("list", "nodes", status=500, count=1)
    with pytest.raises(errors.ApiError) as err:
        list(rest.list_all(apiserver.api, rest.path("nodes")))
    assert err.value.status == 500
