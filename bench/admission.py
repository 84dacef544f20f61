"""Admission webhook throughput and latency against a no-op app on the same uvicorn settings, over HTTPS.

    .venv/bin/python bench/admission.py [--seconds 4] [--connections 16] [--rounds 2]

Starts two server processes (our webhook; a no-op Starlette app that returns a fixed allowed review) with
the same `webhook.serving.server` options and certificates, then a separate load-generator process
(raw asyncio + ssl, keep-alive, one request in flight per connection) that posts a realistic ~4 KB GPU
pod AdmissionReview to /validate and /mutate of each, interleaved. Prints req/s, p50, p99 and the ratios
(targets: >= 0.9x the no-op's req/s, p99 <= 1.2x the no-op's p99).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from webhook.admission import app as admission_app
from webhook.admission import settings as admission_settings
from webhook.serving import logs, probes, server, tls


def realistic_review() -> dict[str, Any]:
    """A Pod CREATE review as the API server sends it: two containers, one asking for 4 GiB of GPU memory."""
    env = [{"name": f"TRAIN_OPTION_{i}", "value": f"value-{i}-" + "x" * 16} for i in range(12)]
    mounts = [{"name": f"data-{i}", "mountPath": f"/mnt/data-{i}", "readOnly": i % 2 == 0} for i in range(6)]
    trainer = {
        "name": "trainer",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "command": ["torchrun", "--nproc-per-node=1", "train.py", "--epochs=10", "--batch-size=64"],
        "env": env,
        "resources": {
            "limits": {"aliyun.com/gpu-mem": "4", "cpu": "4", "memory": "16Gi"},
            "requests": {"aliyun.com/gpu-mem": "4", "cpu": "2", "memory": "8Gi"},
        },
        "volumeMounts": mounts,
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }
    sidecar = {
        "name": "metrics",
        "image": "prom/node-exporter:v1.8.1",
        "args": ["--web.listen-address=:9100"],
        "resources": {
            "limits": {"cpu": "100m", "memory": "64Mi"},
            "requests": {"cpu": "50m", "memory": "32Mi"},
        },
        "ports": [{"containerPort": 9100, "name": "metrics", "protocol": "TCP"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "resnet-train-",
            "namespace": "ml-team",
            "labels": {"app": "resnet", "team": "vision", "job-name": "resnet-train", "tier": "training"},
            "annotations": {
                "kubectl.kubernetes.io/default-container": "trainer",
                "owner": "alice@example.com",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "resnet-train",
                    "uid": "5f0c6a0e-1d0b-4f1a-9a4e-2f6f1b3c9d10",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "containers": [trainer, sidecar],
            "volumes": [
                {"name": f"data-{i}", "persistentVolumeClaim": {"claimName": f"pvc-{i}"}} for i in range(6)
            ],
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "trainer",
            "schedulerName": "default-scheduler",
            "securityContext": {"fsGroup": 1000},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
            ],
            "affinity": {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 50,
                            "preference": {
                                "matchExpressions": [
                                    {"key": "gpu-type", "operator": "In", "values": ["t4", "a10"]}
                                ]
                            },
                        }
                    ]
                }
            },
            "priority": 0,
            "enableServiceLinks": True,
        },
    }
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "0c9a6b0e-6c9f-4a51-b2b3-7f1d2e3c4b5a",
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "namespace": "ml-team",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:job-controller",
                "uid": "8d3f1a2b-0000-4000-8000-000000000001",
                "groups": [
                    "system:serviceaccounts",
                    "system:serviceaccounts:kube-system",
                    "system:authenticated",
                ],
            },
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def noop_app() -> Starlette:
    """Reads the body and answers a fixed allowed review: the floor any webhook on this stack pays."""
    fixed = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "x", "allowed": True},
        }
    ).encode()

    async def handle(request: Request) -> Response:
        await request.body()
        return Response(fixed, media_type="application/json")

    return Starlette(
        routes=[Route("/validate", handle, methods=["POST"]), Route("/mutate", handle, methods=["POST"])]
    )


def serve(kind: str, cert_dir: Path) -> None:
    """Server process: print the port on stdout, then serve until SIGTERM."""
    logs.configure("info", "json")  # production logging; the parent sends stderr to /dev/null
    readiness = probes.Readiness()
    if kind == "webhook":
        cfg = admission_settings.build(overrides={"host": "127.0.0.1", "port": 0, "cert_dir": cert_dir})
        asgi = admission_app.create_app(cfg, readiness)
    else:
        asgi = noop_app()
    options = server.ServeOptions(host="127.0.0.1", port=0, tls=tls.TlsFiles.in_dir(cert_dir))
    srv = server.AppServer(asgi, options, readiness)
    print(srv.port, flush=True)
    srv.run()


async def one_connection(
    port: int, ctx: ssl.SSLContext, request: bytes, deadline: float, latencies: list[float]
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="localhost")
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head[9:12]
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = await reader.readexactly(length)
            if status != b"200" or b'"allowed":true' not in body.replace(b" ", b""):
                raise RuntimeError(f"unexpected answer {status!r}: {body[:200]!r}")
            latencies.append(time.perf_counter() - start)
    finally:
        writer.close()
        await writer.wait_closed()


async def load(port: int, path: str, ca: Path, connections: int, seconds: float) -> dict[str, float]:
    ctx = ssl.create_default_context(cafile=str(ca))
    body = json.dumps(realistic_review()).encode()
    request = (
        f"POST {path}?timeout=10s HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, */*\r\nUser-Agent: kube-apiserver-admission\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    warm: list[float] = []
    await asyncio.gather(
        *(one_connection(port, ctx, request, time.perf_counter() + 0.5, warm) for _ in range(4))
    )
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(
        *(one_connection(port, ctx, request, deadline, latencies) for _ in range(connections))
    )
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {
        "rps": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
        "requests": len(latencies),
        "body_bytes": len(body),
    }


def run_load(port: int, path: str, ca: Path, connections: int, seconds: float) -> dict[str, float]:
    """The load generator in its own process, so it does not share a GIL with the server."""
    out = subprocess.run(
        [sys.executable, __file__, "--load", str(port), path, str(ca), str(connections), str(seconds)],
        check=True,
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    return dict(json.loads(out.stdout))


def start_server(kind: str, cert_dir: Path) -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, str(cert_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    return proc, port


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="measured seconds per run (default 4)")
    parser.add_argument("--connections", type=int, default=16, help="concurrent connections (default 16)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds; the median is shown")
    parser.add_argument("--serve", nargs=2, metavar=("KIND", "CERT_DIR"), help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve[0], Path(args.serve[1]))
        return 0
    if args.load:
        port, path, ca, conns, secs = args.load
        print(json.dumps(asyncio.run(load(int(port), path, Path(ca), int(conns), float(secs)))))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        cert_dir = tls.write_cert_dir(Path(tmp), datetime.now(UTC)).path
        servers = {kind: start_server(kind, cert_dir) for kind in ("noop", "webhook")}
        try:
            results: dict[tuple[str, str], list[dict[str, float]]] = {}
            for _ in range(args.rounds):
                for path in ("/validate", "/mutate"):
                    for kind in ("noop", "webhook"):
                        port = servers[kind][1]
                        result = run_load(port, path, cert_dir / "ca.crt", args.connections, args.seconds)
                        results.setdefault((kind, path), []).append(result)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=20)
                if proc.stdout is not None:
                    proc.stdout.close()

    body_bytes = next(iter(results.values()))[0]["body_bytes"]
    print(
        f"admission bench: {args.connections} connections, HTTPS (TLS, keep-alive), {body_bytes:.0f}-byte "
        f"GPU pod review, {args.rounds} x {args.seconds:.0f} s per cell, median shown, cpus={os.cpu_count()}"
    )
    print(f"{'endpoint':<10} {'server':<8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    ok = True
    for path in ("/validate", "/mutate"):
        cells = {}
        for kind in ("noop", "webhook"):
            runs = results[(kind, path)]
            cell = {k: statistics.median(r[k] for r in runs) for k in ("rps", "p50_ms", "p99_ms")}
            cells[kind] = cell
            print(f"{path:<10} {kind:<8} {cell['rps']:>9.0f} {cell['p50_ms']:>8.2f} {cell['p99_ms']:>8.2f}")
        rps_ratio = cells["webhook"]["rps"] / cells["noop"]["rps"]
        p99_ratio = cells["webhook"]["p99_ms"] / cells["noop"]["p99_ms"]
        verdict = "OK" if rps_ratio >= 0.9 and p99_ratio <= 1.2 else "BELOW TARGET"
        ok = ok and verdict == "OK"
        print(
            f"{path:<10} ratio    req/s {rps_ratio:.2f}x (target >= 0.90)  "
            f"p99 {p99_ratio:.2f}x (target <= 1.20)  {verdict}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
