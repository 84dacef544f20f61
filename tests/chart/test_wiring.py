"""The rendered chart matches the code: flags parse, paths and ports are the servers' routes, config loads."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart import render
from tests.extender.factory import FakeApi
from webhook.admission import app as admission_app
from webhook.admission import settings as admission_settings
from webhook.cli.serve import device_plugin as serve_device_plugin
from webhook.cli.serve import extender as serve_extender
from webhook.core.node import devices
from webhook.core.wire import resources
from webhook.extender import app as extender_app
from webhook.extender.bind.binder import Binder
from webhook.extender.cache import Cache
from webhook.serving import fastpath, probes, server

pytestmark = pytest.mark.skipif(
    render.helm_binary() is None, reason="helm missing: bash scripts/install-helm"
)

# subcommand -> the CLI module whose parser must accept the chart's args
CLI_MODULES = {
    "webhook": "serve.webhook",
    "extender": "serve.extender",
    "device-plugin": "serve.device_plugin",
    "ensure-certs": "ensure_certs",
    "dra-driver": "serve.dra_driver",
}


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return render.render({"scheduler": {"mode": "second"}})


def _container(objects: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    obj = render.find(objects, kind, suffix)
    return obj["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("kind", "suffix"),
    [
        ("Deployment", "-webhook"),
        ("Deployment", "-extender"),
        ("DaemonSet", "-device-plugin"),
        ("Job", "-certgen"),
    ],
)
def test_every_rendered_command_line_parses_with_the_real_cli(
    objects: list[dict[str, Any]], kind: str, suffix: str
) -> None:
    args = _container(objects, kind, suffix)["args"]
    module = importlib.import_module(f"webhook.cli.{CLI_MODULES[args[0]]}")
    module.build_parser().parse_args(args[1:])  # SystemExit(2) on an unknown flag fails the test


@pytest.mark.parametrize("suffix", ["-webhook", "-extender"])
def test_the_servers_listen_on_every_address_of_both_families(
    objects: list[dict[str, Any]], suffix: str
) -> None:
    # The API server and kube-scheduler call the pod's IP: IPv6 in IPv6-only clusters.
    args = _container(objects, "Deployment", suffix)["args"]
    module = importlib.import_module(f"webhook.cli.{CLI_MODULES[args[0]]}")
    assert module.build_parser().parse_args(args[1:]).host == server.ANY_ADDRESS


def test_webhook_configurations_call_the_servers_routes_through_the_service(
    objects: list[dict[str, Any]],
) -> None:
    service = render.find(objects, "Service", "-webhook")
    container = _container(objects, "Deployment", "-webhook")
    (port,) = service["spec"]["ports"]
    (container_port,) = container["ports"]
    assert port["port"] == 443
    assert port["targetPort"] == container_port["name"]
    assert f"--port={container_port['containerPort']}" in container["args"]
    mutating = render.find(objects, "MutatingWebhookConfiguration")
    validating = render.find(objects, "ValidatingWebhookConfiguration")
    for config, path in ((mutating, admission_app.MUTATE_PATH), (validating, admission_app.VALIDATE_PATH)):
        for hook in config["webhooks"]:
            svc = hook["clientConfig"]["service"]
            assert (svc["name"], svc["namespace"], svc["path"], svc["port"]) == (
                service["metadata"]["name"],
                render.NAMESPACE,
                path,
                443,
            )
            assert hook["sideEffects"] == "None"
            assert hook["admissionReviewVersions"] == ["v1"]
            assert hook["timeoutSeconds"] == 5
            # Claims are checked fail-open: DRA must not depend on our webhook (docs/dra.md).
            claims = hook["name"].startswith("resourceclaim")
            assert hook["failurePolicy"] == ("Ignore" if claims else "Fail")
            assert len(hook["name"].split(".")) >= 3
            excluded = hook["namespaceSelector"]["matchExpressions"][0]["values"]
            assert {"kube-system", render.NAMESPACE} <= set(excluded)


def test_webhook_rules_cover_pods_and_every_workload_kind(objects: list[dict[str, Any]]) -> None:
    (mutating,) = render.find(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert [(r["operations"], r["resources"]) for r in mutating["rules"]] == [(["CREATE"], ["pods"])]
    covered = set()
    for hook in render.find(objects, "ValidatingWebhookConfiguration")["webhooks"]:
        for rule in hook["rules"]:
            # A claim's spec is immutable: only its CREATE can bring a problem.
            claims = rule["apiGroups"] == ["resource.k8s.io"]
            assert rule["operations"] == (["CREATE"] if claims else ["CREATE", "UPDATE"])
            covered |= set(rule["resources"])
    assert covered == {
        "pods", "deployments", "replicasets", "statefulsets", "daemonsets", "jobs", "cronjobs",
        "replicationcontrollers", "podtemplates", "resourceclaims", "resourceclaimtemplates",
    }  # fmt: skip


def test_probes_use_the_servers_probe_paths(objects: list[dict[str, Any]]) -> None:
    # The extender's probes use its plain probe port over HTTP/2 (tests/chart/test_extender_tls.py).
    for suffix, scheme in (("-webhook", "HTTPS"), ("-extender", "HTTP")):
        container = _container(objects, "Deployment", suffix)
        assert container["livenessProbe"]["httpGet"]["path"] == probes.HEALTHZ
        assert container["readinessProbe"]["httpGet"]["path"] == probes.READYZ
        assert container["readinessProbe"]["httpGet"].get("scheme", "HTTP") == scheme


def test_webhook_config_file_loads_with_the_webhooks_own_loader(
    objects: list[dict[str, Any]], tmp_path: Path
) -> None:
    config_map = render.find(objects, "ConfigMap", "-webhook")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    settings = admission_settings.build(admission_settings.load_config(path))
    assert settings.policy.names.memory == resources.GPU_MEMORY
    assert settings.policy.scheduler_name == "gpushare-scheduler"  # mode (b)
    assert {"kube-system", render.NAMESPACE} <= settings.excluded_namespaces
    container = _container(objects, "Deployment", "-webhook")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert f"--config={mounts['config']}/config.yaml" in container["args"]
    assert f"--cert-dir={mounts['tls']}" in container["args"]


def test_the_least_share_value_reaches_the_webhooks_rules() -> None:
    for values, least in (
        ({}, 512),
        ({"webhook": {"minShareMiB": 0}}, 0),
        ({"webhook": {"minShareMiB": 1024}}, 1024),
    ):
        config_map = render.find(render.render(values), "ConfigMap", "-webhook")
        config = yaml.safe_load(config_map["data"]["config.yaml"])
        assert admission_settings.policy_from_config(config).min_share_mib == least
    for bad in (-1, "512", 0.5):
        assert "minShareMiB" in render.render_error({"webhook": {"minShareMiB": bad}})


def test_scheduler_name_is_set_only_in_mode_b(tmp_path: Path) -> None:
    config_map = render.find(render.render(), "ConfigMap", "-webhook")
    assert "schedulerName" not in yaml.safe_load(config_map["data"]["config.yaml"])


def test_scheduler_configurations_call_the_extenders_routes(objects: list[dict[str, Any]]) -> None:
    from webhook.extender import settings as ext_settings  # noqa: PLC0415 - the extender may be absent

    service = render.find(objects, "Service", "-extender")
    second = yaml.safe_load(render.find(objects, "ConfigMap", "-scheduler")["data"]["config.yaml"])
    snippet = yaml.safe_load(
        render.find(objects, "ConfigMap", "-scheduler-extender")["data"]["kube-scheduler-config.yaml"]
    )
    assert second["profiles"] == [{"schedulerName": "gpushare-scheduler"}]
    assert snippet["extenders"] == second["extenders"]
    (extender,) = second["extenders"]
    host = (
        f"https://{service['metadata']['name']}.{render.NAMESPACE}.svc:{service['spec']['ports'][0]['port']}"
    )
    assert extender["urlPrefix"] == host + ext_settings.URL_PREFIX
    assert extender["nodeCacheCapable"] is True
    assert extender["managedResources"] == [
        {"name": resources.GPU_MEMORY, "ignoredByScheduler": False},
        {"name": resources.NVIDIA_GPU, "ignoredByScheduler": False},  # whole cards beside shares
    ]
    settings, cache = ext_settings.ExtenderSettings(), Cache()
    binder = Binder(cache, FakeApi(), settings)
    app = extender_app.build_app(extender_app.ExtenderApp(cache, binder, settings))
    assert isinstance(app, fastpath.FastPathApp)
    for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
        path = f"{ext_settings.URL_PREFIX}/{extender[verb]}"
        assert path in app.endpoints, f"no route for {verb}={extender[verb]}"


def test_device_plugin_daemonset_meets_the_kubelet_contract(objects: list[dict[str, Any]]) -> None:
    ds = render.find(objects, "DaemonSet", "-device-plugin")
    spec = ds["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec  # the mode affinity chooses the nodes (test_deviceplugin_modes.py)
    host_paths = {v["name"]: v["hostPath"] for v in spec["volumes"] if "hostPath" in v}
    # The device-plugin folder, the PodResources folder (test_deviceplugin_modes.py), the node's /proc
    # for GPU usage (read-only: NVML's PIDs are the host's) and the runtime's CDI spec folders (read-only:
    # which CDI device each GPU is, test_cdi.py); nothing else.
    assert host_paths == {
        "device-plugins": {"path": "/var/lib/kubelet/device-plugins", "type": "Directory"},
        "pod-resources": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
        "host-proc": {"path": "/proc", "type": "Directory"},
        "cdi-spec-0": {"path": "/etc/cdi", "type": "DirectoryOrCreate"},
        "cdi-spec-1": {"path": "/var/run/cdi", "type": "DirectoryOrCreate"},
    }
    container = spec["containers"][0]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["host-proc"] == {"name": "host-proc", "mountPath": "/host/proc", "readOnly": True}
    assert "--proc-root=/host/proc" in container["args"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "--device-plugin-dir=/var/lib/kubelet/device-plugins" in container["args"]
    assert container["securityContext"]["privileged"] is False
    with_runtime = render.render({"devicePlugin": {"runtimeClassName": "nvidia"}})
    ds_spec = render.find(with_runtime, "DaemonSet")["spec"]["template"]["spec"]
    assert ds_spec["runtimeClassName"] == "nvidia"


def test_extender_leader_election_lease_matches_its_role(objects: list[dict[str, Any]]) -> None:
    args = _container(objects, "Deployment", "-extender")["args"]
    assert "--leader-elect" in args
    lease = next(a.split("=", 1)[1] for a in args if a.startswith("--lease-name="))
    role = next(o for o in objects if o["kind"] == "Role" and o["metadata"]["name"].endswith("-extender"))
    assert any(lease in r.get("resourceNames", []) for r in role["rules"])
    env = {e["name"] for e in _container(objects, "Deployment", "-extender")["env"]}
    assert "POD_NAME" in env


def test_extender_advertises_its_pod_ip_and_container_port_for_forwarded_binds(
    objects: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from webhook.extender import settings as ext_settings  # noqa: PLC0415 - the extender may be absent

    container = _container(objects, "Deployment", "-extender")
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    (port,) = [p for p in container["ports"] if p["name"] == "https"]
    # The kubelet expands $(POD_IP) in args from the container's env (a variable it defines).
    expanded = [a.replace("$(POD_IP)", "10.244.1.7") for a in container["args"][1:]]
    assert expanded != container["args"][1:]
    monkeypatch.delenv("POD_IP", raising=False)
    settings = serve_extender.settings_from(serve_extender.build_parser().parse_args(expanded))
    assert settings.advertise_url == f"https://10.244.1.7:{port['containerPort']}"
    assert settings.port == port["containerPort"]
    assert settings.tls_cert is not None  # the chart serves the extender over HTTPS, hence https://
    v6 = [a.replace("$(POD_IP)", "fd00:10:244::7") for a in container["args"][1:]]
    v6_settings = serve_extender.settings_from(serve_extender.build_parser().parse_args(v6))
    assert v6_settings.advertise_url == f"https://[fd00:10:244::7]:{port['containerPort']}"
    assert ext_settings.advertise_url(settings.advertise_url) == settings.advertise_url


def test_extender_on_another_port_advertises_that_port() -> None:
    container = _container(render.render({"extender": {"port": 40123}}), "Deployment", "-extender")
    assert container["ports"][0]["containerPort"] == 40123
    assert "--advertise-url=https://$(POD_IP):40123" in container["args"]


@pytest.mark.parametrize(
    ("gpu_memory", "unit"),
    [
        ({"unit": "GiB"}, "GiB"),
        ({"unit": "MiB", "mibPerDevice": 128}, "128MiB"),
        ({"unit": "MiB", "mibPerDevice": 1}, "MiB"),
    ],
    ids=["GiB", "MiB-blocks", "MiB"],
)
def test_extender_and_device_plugin_count_gpu_memory_in_the_same_unit(
    gpu_memory: dict[str, Any], unit: str
) -> None:
    objects = render.render({"gpuMemory": gpu_memory})
    extender = serve_extender.build_parser().parse_args(
        _container(objects, "Deployment", "-extender")["args"][1:]
    )
    plugin = serve_device_plugin.build_parser().parse_args(
        _container(objects, "DaemonSet", "-device-plugin")["args"][1:]
    )
    assert extender.memory_unit == unit
    assert devices.Granularity.parse(plugin.memory_unit, plugin.mib_per_device).label == unit
    # The webhook words its messages in that unit too (issue 12: "the configured unit everywhere").
    webhook_config = yaml.safe_load(render.find(objects, "ConfigMap", "-webhook")["data"]["config.yaml"])
    assert admission_settings.policy_from_config(webhook_config).memory_unit == unit


@pytest.mark.parametrize(("value", "expected"), [(True, True), (False, False)], ids=["on", "off"])
def test_best_fit_filter_value_reaches_the_extender_and_every_node_reaches_its_filter(
    value: bool, expected: bool
) -> None:
    objects = render.render({"extender": {"bestFitFilter": value}, "scheduler": {"mode": "second"}})
    args = _container(objects, "Deployment", "-extender")["args"]
    assert serve_extender.build_parser().parse_args(args[1:]).best_fit_filter is expected
    second = yaml.safe_load(render.find(objects, "ConfigMap", "-scheduler")["data"]["config.yaml"])
    assert second["percentageOfNodesToScore"] == 100
    # Filter's nominations live in one replica's memory: kube-scheduler's connections all go to one.
    assert render.find(objects, "Service", "-extender")["spec"]["sessionAffinity"] == "ClientIP"


def test_best_fit_filter_set_to_null_keeps_the_default() -> None:
    objects = render.render(None, "--set", "extender.bestFitFilter=null")
    args = _container(objects, "Deployment", "-extender")["args"]
    assert "--best-fit-filter" in args


def test_claims_failure_policy_is_its_own_value() -> None:
    objects = render.render({"webhook": {"claimsFailurePolicy": "Fail", "failurePolicy": "Ignore"}})
    hooks = render.find(objects, "ValidatingWebhookConfiguration")["webhooks"]
    policies = {hook["name"].split(".")[0]: hook["failurePolicy"] for hook in hooks}
    assert policies["resourceclaims"] == policies["resourceclaimtemplates"] == "Fail"
    assert policies["pods"] == "Ignore"


def test_webhook_and_extender_replicas_keep_serving_while_their_endpoint_goes() -> None:
    for part in ("-webhook", "-extender"):
        (container,) = render.find(render.render(), "Deployment", part)["spec"]["template"]["spec"][
            "containers"
        ]
        assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}, part
    off = render.render({"webhook": {"shutdownDelaySeconds": 0}, "extender": {"shutdownDelaySeconds": 0}})
    for part in ("-webhook", "-extender"):
        (container,) = render.find(off, "Deployment", part)["spec"]["template"]["spec"]["containers"]
        assert "lifecycle" not in container, part
