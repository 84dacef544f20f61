"""The small cluster the extender's service tests run against, in the API stand-in."""

from __future__ import annotations

import pytest

from tests.extender.factory import node, pod
from webhook.devcluster.standin.apiserver import ApiServer


@pytest.fixture
def cluster(apiserver: ApiServer) -> ApiServer:
    """n1 (16 + 8 GiB) with a running pod holding 6 GiB of GPU 0, and an empty n2 (16 GiB)."""
    apiserver.put(node("n1", 16, 8))
    apiserver.put(node("n2", 16))
    apiserver.put(pod("running", 6, node_name="n1", placed={0: {0: 6}}, phase="Running"))
    return apiserver
