"""webhook.kube.client: an ApiClient from a host URL or a kubeconfig; bad configuration is a ConfigError."""

from __future__ import annotations

import pytest
import yaml

from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import client, pods


def kubeconfig(path, server: str, context: str = "standin") -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "secret-token"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}],
        "current-context": context,
    }
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_an_explicit_host_reaches_the_api(apiserver: ApiServer):
    apiserver.add_node("n1")
    api = client.connect(client.ClientSettings(host=apiserver.url + "/", token="t"))
    try:
        assert pods.get_node(api, "n1")["metadata"]["name"] == "n1"
        assert api.configuration.api_key == {"BearerToken": "t"}
    finally:
        api.close()


def test_a_kubeconfig_file_and_context_reach_the_api(apiserver: ApiServer, tmp_path, monkeypatch):
    monkeypatch.delenv(client.IN_CLUSTER_ENV, raising=False)
    apiserver.add_node("n1")
    path = kubeconfig(tmp_path / "config", apiserver.url, context="dev")
    api = client.connect(client.ClientSettings(kubeconfig=path, context="dev"))
    try:
        assert pods.get_node(api, "n1")["metadata"]["name"] == "n1"
    finally:
        api.close()


@pytest.mark.parametrize(
    "settings",
    [
        client.ClientSettings(kubeconfig="/nonexistent/kubeconfig", in_cluster=False),
        client.ClientSettings(in_cluster=True),
    ],
    ids=["missing-kubeconfig", "not-in-a-cluster"],
)
def test_unusable_configuration_is_a_config_error(settings):
    with pytest.raises(client.ConfigError, match="cannot configure the Kubernetes client"):
        client.connect(settings)


def test_a_kubeconfig_without_the_context_is_a_config_error(tmp_path):
    path = kubeconfig(tmp_path / "config", "http://127.0.0.1:1")
    with pytest.raises(client.ConfigError):
        client.configuration(client.ClientSettings(kubeconfig=path, context="absent", in_cluster=False))
