"""The image, built by scripts/image from the Dockerfile with Debian's podman and runc, runs every entry point
as the chart starts it (tests/e2e/podrun.py: the pod spec's user, read-only root filesystem, dropped
capabilities, volumes, in-cluster ServiceAccount token): the webhook and the extender answer over TLS from
inside it, the device plugin registers with the kubelet (emulator) through the chart's hostPath folder, and
ensure-certs writes its Secret through the real API server. The image stays small and carries no build
tools. Needs root (podman, runc and the base image are installed by scripts/image)."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e import podrun
from tests.e2e.bed import FULLNAME, NAMESPACE, Bed
from tests.standins.kubelet import Kubelet
from webhook.cli import main as cli_main
from webhook.core.wire import resources
from webhook.devcluster import helm, release
from webhook.devcluster import pki as pkimod
from webhook.devcluster.controlplane import free_port
from webhook.kube import rest

MiB = 1 << 20
MAX_IMAGE = 320 * MiB  # measured 2026-11-26: see docs/install.md, "The image"
MAX_OWN = 185 * MiB  # what the Dockerfile adds to its base (the virtualenv; granian 22 MiB of it)


@pytest.fixture(scope="module")
def image() -> str:
    if os.geteuid() != 0:
        pytest.skip("podman, runc and the image's base need root (scripts/image)")
    root = Path(helm.ROOT)
    done = subprocess.run(
        ["bash", str(root / "scripts" / "image")], capture_output=True, text=True, timeout=1500, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture
def running() -> Iterator[Callable[[list[str]], str]]:
    """Starts containers from `podrun.argv` lists; each is removed afterwards, its log shown on failure."""
    names: list[str] = []

    def start(argv: list[str]) -> str:
        name = argv[argv.index("--name") + 1]
        names.append(name)
        podrun.remove(name)
        done = podrun.run(argv)
        assert done.returncode == 0, done.stderr
        return name

    yield start
    for name in names:
        print(f"--- {name}\n{podrun.logs(name)[-3000:]}")
        podrun.remove(name)


def _rendered(bed: Bed, kind: str, name: str, *values: str) -> dict[str, Any]:
    """The pod spec the chart renders for `kind/name` with the default values (and `values`)."""
    args = ["template", "gs", str(helm.CHART), "--namespace", NAMESPACE, "--kube-version"]
    args += [release.kube_version(bed.cp.bins), *values]
    out = bed.helm(*args).stdout
    for doc in yaml.safe_load_all(out):
        if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
            spec: dict[str, Any] = doc["spec"]["template"]["spec"]
            return spec
    raise AssertionError(f"{kind}/{name} not rendered")


def _args(container: dict[str, Any], **flags: str) -> list[str]:
    """The container's args with `--flag=value` entries replaced (flag names with _ for -)."""
    values = {f"--{k.replace('_', '-')}": v for k, v in flags.items()}
    args: list[str] = container["args"]
    return [
        f"{a.split('=', 1)[0]}={values[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in values else a
        for a in args
    ]


def _service_account(
    bed: Bed, folder: Path, name: str, bound_pod: dict[str, Any] | None = None, namespace: str = NAMESPACE
) -> Path:
    """What the kubelet projects for ServiceAccount `name`: a bound token, the cluster CA, the namespace."""
    assert bed.cp.pki is not None
    token = bed.token(name, namespace=namespace, bound_pod=bound_pod)
    content: dict[str, str | bytes] = {"token": token, "ca.crt": bed.cp.pki.ca_crt.read_bytes()}
    content["namespace"] = namespace
    return podrun.files(folder, content)


def _status(url: str, context: ssl.SSLContext | None, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as err:
        return err.code
    except (urllib.error.URLError, OSError):
        return 0


def _wait(what: str, predicate: Callable[[], Any], container: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; log:\n{podrun.logs(container)[-3000:]}")


def test_the_image_is_small_and_holds_no_build_tools(image: str) -> None:
    sizes = {}
    for name in (image, "localhost/gpushare-base:bookworm"):
        done = podrun.run([*podrun.PODMAN, "image", "inspect", "--format", "{{.Size}}", name])
        sizes[name] = int(done.stdout.strip())
    own = sizes[image] - sizes["localhost/gpushare-base:bookworm"]
    print(f"image {sizes[image] / MiB:.0f} MiB, of which the virtualenv {own / MiB:.0f} MiB")
    assert sizes[image] <= MAX_IMAGE and own <= MAX_OWN
    probe = "for t in gcc cc g++ make pip pip3 protoc; do command -v $t; done; python -c 'import grpc_tools'"
    done = podrun.run(
        [
            *podrun.PODMAN,
            "run",
            "--rm",
            "--network",
            "none",
            *podrun.LIMITS,
            "--entrypoint",
            "sh",
            image,
            "-c",
            probe,
        ]
    )
    assert done.stdout == "" and "No module named 'grpc_tools'" in done.stderr


def test_every_command_starts_as_the_chart_runs_it(image: str) -> None:
    """Non-root, read-only root filesystem, no capabilities: every command loads and answers --help."""
    commands = [c for c in cli_main.COMMANDS if c != "demo"]  # the demo needs the checkout's chart
    probe = 'for c in "$@"; do gpushare "$c" --help >/dev/null 2>&1 || echo "$c failed"; done'
    flags = ["--user", "65532:65532", "--read-only", "--read-only-tmpfs=false", "--tmpfs", "/tmp"]
    flags += ["--cap-drop", "ALL"]
    argv = [*podrun.PODMAN, "run", "--rm", "--network", "none", *podrun.LIMITS, *flags, "--entrypoint", "sh"]
    done = podrun.run([*argv, image, "-c", probe, "sh", *commands])
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_the_webhook_answers_over_tls_from_the_image(
    bed: Bed, image: str, tmp_path: Path, running: Callable[[list[str]], str]
) -> None:
    assert bed.cp.pki is not None
    pod = _rendered(bed, "Deployment", "gs-gpushare-webhook")
    (container,) = pod["containers"]
    cert, key = pkimod.serving(bed.cp.pki, "image-webhook", ("localhost",), ("127.0.0.1",))
    tls = {
        "tls.crt": cert.read_bytes(),
        "tls.key": key.read_bytes(),
        "ca.crt": bed.cp.pki.ca_crt.read_bytes(),
    }
    config = bed.configmap(f"{FULLNAME}-webhook", "config.yaml")
    volumes = {
        "tls": podrun.files(tmp_path / "tls", tls),
        "config": podrun.files(tmp_path / "config", {"config.yaml": config}),
    }
    port = free_port()
    args = _args(container, host="127.0.0.1", port=str(port))
    name = running(podrun.argv(image, "gpushare-image-webhook", pod, container, volumes=volumes, args=args))
    context = ssl.create_default_context(cafile=str(bed.cp.pki.ca_crt))
    _wait("/readyz over TLS", lambda: _status(f"https://127.0.0.1:{port}/readyz", context) == 200, name)
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "image-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": "default",
            "object": {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "half"},
                "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "500m"}}}]},
            },
        },
    }
    request = urllib.request.Request(
        f"https://127.0.0.1:{port}/validate",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, context=context, timeout=10) as reply:
        answer = json.load(reply)["response"]
    assert answer["allowed"] is False and answer["status"]["message"]


def test_the_extender_answers_over_tls_from_the_image(
    bed: Bed, image: str, tmp_path: Path, running: Callable[[list[str]], str]
) -> None:
    assert bed.cp.pki is not None
    pod = bed.pod_spec("deployments", f"{FULLNAME}-extender")  # as the bed's release installed it
    (container,) = pod["containers"]
    mounted = bed.mounts(f"{FULLNAME}-extender")  # mountPath -> folder with the Secret's files
    by_path = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {
        by_path[path]: podrun.files(
            tmp_path / by_path[path], {f.name: f.read_bytes() for f in folder.iterdir()}
        )
        for path, folder in mounted.items()
    }
    port, health = free_port(), free_port()
    args = _args(
        container,
        host="127.0.0.1",
        port=str(port),
        advertise_url=f"https://127.0.0.1:{port}",
        health_port=str(health),
    )
    account = _service_account(bed, tmp_path / "sa", f"{FULLNAME}-extender")
    env = {"POD_NAME": "extender-image", "POD_NAMESPACE": NAMESPACE, "POD_IP": "127.0.0.1"}
    argv = podrun.argv(
        image,
        "gpushare-image-extender",
        pod,
        container,
        volumes=volumes,
        args=args,
        env=env,
        service_account=account,
        api_port=bed.cp.port,
    )
    name = running(argv)
    # The bed's release serves HTTP/2 as a default install does: the kubelet probes the plain port.
    assert "--http2" in args
    probe = f"http://127.0.0.1:{health}/healthz"
    _wait("/healthz on the probe port", lambda: _status(probe, None) == 200, name)
    context = ssl.create_default_context(cafile=str(bed.cp.pki.ca_crt))
    base = f"https://127.0.0.1:{port}"
    # A client certificate of the extender's CA is required at the handshake, inside the image too.
    assert _status(f"{base}/gpushare-scheduler/filter", context, b"{}") == 0
    (tls_dir,) = [folder for folder in mounted.values() if (folder / "client.crt").exists()]
    context.load_cert_chain(tls_dir / "client.crt", tls_dir / "client.key")
    assert _status(f"{base}/gpushare-scheduler/filter", context, b"{}") == 200


def test_the_device_plugin_registers_from_the_image(
    bed: Bed, image: str, tmp_path: Path, running: Callable[[list[str]], str]
) -> None:
    node = "image-node-0"
    bed.node(node, 2, 16, group="image")
    pod = bed.pod_spec("daemonsets", f"{FULLNAME}-device-plugin")
    (container,) = pod["containers"]
    # A short host path: the kubelet dials <folder>/aliyun-gpushare-wholecard.sock, and a unix socket's
    # path holds at most 107 bytes (pytest's tmp_path is too deep).
    plugin_dir = Path(tempfile.mkdtemp(prefix="gs-image-dp-"))
    volumes = {
        "device-plugins": plugin_dir,
        "pod-resources": podrun.files(tmp_path / "pod-resources", {}),
        "host-proc": Path("/proc"),
        # The node's CDI spec folders (/etc/cdi, /var/run/cdi): empty here, so GPUs go out as env.
        "cdi-spec-0": podrun.files(tmp_path / "etc-cdi", {}),
        "cdi-spec-1": podrun.files(tmp_path / "run-cdi", {}),
    }
    health = free_port()
    args = [*_args(container, health_port=str(health)), "--fake-gpus", "0:16,1:16"]
    account = _service_account(bed, tmp_path / "sa", f"{FULLNAME}-device-plugin", bed.device_plugin_pod(node))
    env = {"NODE_NAME": node, "POD_NAMESPACE": NAMESPACE}
    # The kubelet's two sockets, in the folders the chart mounts from the host.
    pod_resources = volumes["pod-resources"] / "kubelet.sock"
    kubelet = Kubelet(plugin_dir, pod_resources=pod_resources, also=(resources.NVIDIA_GPU,)).start()
    try:
        argv = podrun.argv(
            image,
            "gpushare-image-device-plugin",
            pod,
            container,
            volumes=volumes,
            args=args,
            env=env,
            service_account=account,
            api_port=bed.cp.port,
        )
        name = running(argv)
        cards = kubelet.resource(resources.NVIDIA_GPU)
        healthy = lambda: len(kubelet.healthy()) == 32 and len(cards.healthy()) == 2  # noqa: E731
        _wait("32 GiB and 2 cards healthy at the kubelet", healthy, name)
        url = f"http://127.0.0.1:{health}/healthz"
        _wait("/healthz 200", lambda: _status(url, ssl.create_default_context()) == 200, name)
    finally:
        kubelet.stop()
        shutil.rmtree(plugin_dir, ignore_errors=True)


def test_ensure_certs_writes_its_secret_from_the_image(
    bed: Bed, image: str, tmp_path: Path, running: Callable[[list[str]], str]
) -> None:
    """The certificate hook's container (selfManaged mode) in a namespace of its own, as a ServiceAccount
    bound to the built-in `admin` role there (the chart's own certgen RBAC: test_cert_upgrade.py)."""
    namespace = bed.namespace("e2e-image-certs")
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "certgen"}}
    bed.request("POST", rest.path("serviceaccounts", namespace=namespace), body=sa)
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "certgen"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "certgen", "namespace": namespace}],
    }
    bed.request(
        "POST",
        rest.path("rolebindings", namespace=namespace, group="rbac.authorization.k8s.io"),
        body=binding,
    )
    pod = _rendered(bed, "Job", "gs-gpushare-certgen")
    container = pod["containers"][0]
    args = _args(container, namespace=namespace, secret="image-webhook-tls")
    args = [a for a in args if not a.startswith(("--mutating-", "--validating-"))]
    account = _service_account(bed, tmp_path / "sa", "certgen", namespace=namespace)
    argv = podrun.argv(
        image,
        "gpushare-image-ensure-certs",
        pod,
        container,
        volumes={},
        args=args,
        service_account=account,
        api_port=bed.cp.port,
    )
    name = running(argv)
    done = podrun.run([*podrun.PODMAN, "wait", name], timeout=120)
    assert done.stdout.strip() == "0", podrun.logs(name)
    secret = bed.request("GET", rest.path("secrets", "image-webhook-tls", namespace))
    assert {"tls.crt", "tls.key", "ca.crt"} <= set(secret["data"])
