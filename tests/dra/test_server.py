"""NodePrepareResources / NodeUnprepareResources over the real gRPC on a unix socket (v1 and v1beta1),
the preparer behind them: CDI specs and answers, idempotence, a restart between the two calls, and a
claim that cannot be prepared failing alone."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from tests.dra import kubelet
from tests.dra.conftest import DRIVER, NODE, Claims, claim, result
from webhook.core.node import cdi, devices, mps
from webhook.core.wire import resources
from webhook.dra import checkpoint, preparer, server
from webhook.dra.cdispecs import SpecFiles
from webhook.kube import errors

GPUS = (devices.Gpu(0, "GPU-a", 16384), devices.Gpu(1, "GPU-b", 16384))
KIND = cdi.kind(DRIVER)

Make = Callable[..., preparer.Preparer]


@pytest.fixture
def serve(short_root: Path) -> Iterator[Callable[[preparer.Preparer], Path]]:
    """Serve a preparer's services on a unix socket; the socket's path."""
    servers: list[grpc.Server] = []

    def start(prep: preparer.Preparer) -> Path:
        socket = short_root / f"dra{len(servers)}.sock"
        srv = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_services(srv, prep)
        srv.add_insecure_port(f"unix://{socket}")
        srv.start()
        servers.append(srv)
        return socket

    try:
        yield start
    finally:
        for srv in servers:
            srv.stop(0).wait()


@pytest.fixture
def make(tmp_path: Path) -> Make:
    def build(claims: Claims, mps_dirs: mps.MpsDirs | None = None) -> preparer.Preparer:
        return preparer.Preparer(
            driver=DRIVER,
            node=NODE,
            gpus=GPUS,
            granularity=devices.Granularity(),
            claims=claims,
            store=checkpoint.Checkpoint(tmp_path / "plugin" / "checkpoint.json"),
            specs=SpecFiles(tmp_path / "cdi", KIND),
            mps_dirs=lambda: mps_dirs,
        )

    (tmp_path / "plugin").mkdir()
    return build


def spec_env(tmp_path: Path, uid: str) -> dict[str, dict[str, str]]:
    """{CDI device name: env} of the spec written for claim `uid`."""
    doc = json.loads((tmp_path / "cdi" / cdi.file_name(KIND, uid)).read_text())
    assert (doc["cdiVersion"], doc["kind"]) == (cdi.CDI_VERSION, KIND)
    return {d["name"]: dict(e.split("=", 1) for e in d["containerEdits"]["env"]) for d in doc["devices"]}


def test_a_share_is_prepared_with_its_cdi_device_share_id_and_gpushare_env(make, serve, tmp_path):
    socket = serve(make(Claims(claim("u1", "c1", result("gpu-1", "3Gi", share="s-1")))))
    answer = kubelet.prepare(socket, [("u1", "ns", "c1")]).claims["u1"]
    assert answer.error == ""
    (device,) = answer.devices
    assert list(device.request_names) == ["gpu"]
    assert (device.pool_name, device.device_name, device.share_id) == (NODE, "gpu-1", "s-1")
    assert list(device.cdi_device_ids) == [f"{KIND}=u1-gpu"]
    env = spec_env(tmp_path, "u1")["u1-gpu"]
    assert env[resources.ENV_VISIBLE_DEVICES] == "GPU-b"
    assert (env[resources.ENV_MEM_IDX], env[resources.ENV_MEM_CONTAINER], env[resources.ENV_MEM_DEV]) == (
        "1",
        "3",
        "16",
    )


def test_v1beta1_answers_the_same_without_a_share_id(make, serve):
    socket = serve(make(Claims(claim("u1", "c1", result("gpu-0", share="s-1")))))
    (device,) = kubelet.prepare(socket, [("u1", "ns", "c1")], version="v1beta1").claims["u1"].devices
    assert device.device_name == "gpu-0"
    assert list(device.cdi_device_ids) == [f"{KIND}=u1-gpu"]
    assert not hasattr(device, "share_id")


def test_a_request_on_two_gpus_names_its_cdi_device_once(make, serve, tmp_path):
    found = claim("u1", "c1", result("gpu-0", "4Gi"), result("gpu-1", "4Gi"), result("gpu-1", "2Gi", "other"))
    socket = serve(make(Claims(found)))
    got = kubelet.prepare(socket, [("u1", "ns", "c1")]).claims["u1"].devices
    assert [(d.device_name, list(d.cdi_device_ids)) for d in got] == [
        ("gpu-0", [f"{KIND}=u1-gpu"]),
        ("gpu-1", []),
        ("gpu-1", [f"{KIND}=u1-other"]),
    ]
    env = spec_env(tmp_path, "u1")
    assert env["u1-gpu"][resources.ENV_VISIBLE_DEVICES] == "GPU-a,GPU-b"
    assert env["u1-other"][resources.ENV_MEM_POD] == "10"  # the claim's whole memory


def test_prepare_twice_answers_the_same_without_reading_the_claim_again(make, serve):
    claims = Claims(claim("u1", "c1", result("gpu-0")))
    socket = serve(make(claims))
    first = kubelet.prepare(socket, [("u1", "ns", "c1")])
    second = kubelet.prepare(socket, [("u1", "ns", "c1")])
    assert first == second
    assert claims.gets == 1


def test_unprepare_removes_the_spec_and_is_idempotent(make, serve, tmp_path):
    socket = serve(make(Claims(claim("u1", "c1", result("gpu-0")))))
    kubelet.prepare(socket, [("u1", "ns", "c1")])
    spec = tmp_path / "cdi" / cdi.file_name(KIND, "u1")
    assert spec.exists()
    for _ in range(2):
        assert kubelet.unprepare(socket, [("u1", "ns", "c1")]).claims["u1"].error == ""
        assert not spec.exists()
    assert kubelet.unprepare(socket, [("never", "ns", "x")]).claims["never"].error == ""


def test_a_restart_between_prepare_and_unprepare_loses_nothing(make, serve, tmp_path):
    first = make(Claims(claim("u1", "c1", result("gpu-0"))))
    kubelet.prepare(serve(first), [("u1", "ns", "c1")])
    # A new process: only the checkpoint file is left; the claim is gone from the API.
    restarted = make(Claims())
    socket = serve(restarted)
    again = kubelet.prepare(socket, [("u1", "ns", "c1")]).claims["u1"]
    assert again.error == "" and again.devices[0].device_name == "gpu-0"
    assert kubelet.unprepare(socket, [("u1", "ns", "c1")]).claims["u1"].error == ""
    assert not list((tmp_path / "cdi").iterdir())
    assert restarted.store.all() == ()


def test_a_spec_lost_with_the_cdi_folder_is_written_again_on_the_next_prepare(make, serve, tmp_path):
    socket = serve(make(Claims(claim("u1", "c1", result("gpu-0")))))
    kubelet.prepare(socket, [("u1", "ns", "c1")])
    spec = tmp_path / "cdi" / cdi.file_name(KIND, "u1")
    before = spec.read_text()
    spec.unlink()  # a reboot empties /var/run/cdi
    kubelet.prepare(socket, [("u1", "ns", "c1")])
    assert spec.read_text() == before


def test_an_mps_node_puts_the_limit_and_the_mps_folders_in_the_spec(make, serve, tmp_path):
    dirs = mps.MpsDirs("/run/mps", "/var/log/mps")
    socket = serve(make(Claims(claim("u1", "c1", result("gpu-0", "5Gi"))), mps_dirs=dirs))
    kubelet.prepare(socket, [("u1", "ns", "c1")])
    doc = json.loads((tmp_path / "cdi" / cdi.file_name(KIND, "u1")).read_text())
    edits = doc["devices"][0]["containerEdits"]
    assert f"{mps.ENV_MEM_LIMIT}=0=5120MB" in edits["env"]
    assert [m["hostPath"] for m in edits["mounts"]] == ["/run/mps", "/var/log/mps"]


@pytest.mark.parametrize(
    ("asked", "needle"),
    [
        (("u9", "ns", "gone"), "ResourceClaim ns/gone not found"),
        (("u2", "ns", "idle"), "ResourceClaim ns/idle is not allocated"),
        (("u3", "ns", "odd"), "is not a whole number of 1 GiB units"),
        (("uX", "ns", "c1"), "has UID 'u1', not 'uX'"),
        (("", "ns", "c1"), "the claim needs a uid, namespace and name"),
        (("u4", "", "c1"), "the claim needs a uid, namespace and name"),
        (("../etc", "ns", "c1"), "UID '../etc' is not a Kubernetes UID"),
    ],
    ids=["missing", "unallocated", "not-a-unit", "replaced", "no-uid", "no-namespace", "path-uid"],
)
def test_a_claim_that_cannot_be_prepared_fails_alone_with_the_reason(make, serve, tmp_path, asked, needle):
    claims = Claims(
        claim("u1", "c1", result("gpu-0")),
        claim("u2", "idle"),
        claim("u3", "odd", result("gpu-0", "2500Mi")),
    )
    reply = kubelet.prepare(serve(make(claims)), [asked, ("u1", "ns", "c1")])
    assert needle in reply.claims[asked[0]].error
    assert not reply.claims[asked[0]].devices
    assert reply.claims["u1"].error == "" and reply.claims["u1"].devices


def test_an_api_error_reading_the_claim_is_the_claims_error(make, serve):
    claims = Claims(claim("u1", "c1", result("gpu-0")))
    claims.failing = errors.ForbiddenError(403, "Forbidden", "resourceclaims is forbidden")
    reply = kubelet.prepare(serve(make(claims)), [("u1", "ns", "c1")])
    assert (
        "reading ResourceClaim ns/c1: HTTP 403 Forbidden: resourceclaims is forbidden"
        in reply.claims["u1"].error
    )


def test_a_claim_of_other_drivers_only_prepares_to_no_devices_and_writes_nothing(make, serve, tmp_path):
    other = {"request": "nic", "driver": "nic.example.com", "pool": NODE, "device": "eth0"}
    socket = serve(make(Claims(claim("u1", "c1", other))))
    answer = kubelet.prepare(socket, [("u1", "ns", "c1")]).claims["u1"]
    assert (answer.error, list(answer.devices)) == ("", [])
    assert not (tmp_path / "cdi").exists()


def test_unprepare_refuses_a_uid_that_is_no_uid_and_keeps_the_others(make, serve):
    socket = serve(make(Claims()))
    reply = kubelet.unprepare(socket, [("a/b", "ns", "c"), ("u1", "ns", "c1")])
    assert "is not a Kubernetes UID" in reply.claims["a/b"].error
    assert reply.claims["u1"].error == ""
