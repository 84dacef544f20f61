"""The webhook's latency as kube-apiserver waits for it, beside a no-op webhook on the same stack (issue 21).

    .venv/bin/python bench/admission_apiserver.py [--pods 1500] [--threads 8] [--baseline DIR]

Starts the real control plane (scripts/kube-bins), installs the chart and runs our webhook as the e2e bed
does. Beside it runs a no-op webhook served by the same stack: `webhook.serving.server` with the
webhook's own serving options (`admission.app.serve_options`: uvicorn, uvloop, httptools, one worker,
keep-alive), TLS with a pair signed by the same CA; it answers every review allowed, echoing the request's
uid, without decoding the rest. Its Mutating- and ValidatingWebhookConfiguration are copies of ours
(rules, matchConditions, timeout, failure policy), so the API server calls both for the same pods.

Our webhook logs as the chart runs it (JSON lines; the bed's text format costs ~8 us more per review).
With --baseline, the webhook of another checkout (e.g. an older commit's worktree) is a third webhook
beside them, registered the same way. Then creates GPU pods from several client threads (no scheduler runs: they stay Pending) and reads
`apiserver_admission_webhook_admission_duration_seconds` per webhook: the mean (sum / count, exact) and
the p99 interpolated in the histogram's buckets (5 ms, 25 ms, 100 ms ...: coarse, as Prometheus would
show it), plus the share of calls over 5 ms, ours beside the no-op's. Goal: ours <= 1.2x the no-op's
mean and p99. Also prints what each process spent in CPU during the load (the bed's contention), the
webhook's own handling time and how many connections each server holds.
"""
# ruff: noqa: E501  (report lines are kept whole)

from __future__ import annotations

import argparse
import copy
import os
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import realbed
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e import objects
from tests.e2e.bed import FULLNAME, Bed
from webhook.admission import app as admission_app
from webhook.admission import settings as admission_settings
from webhook.devcluster import pki as pkimod
from webhook.devcluster.controlplane import free_port
from webhook.devcluster.process import Process, ProcessError
from webhook.kube import rest
from webhook.serving import server, tls

METRIC = "apiserver_admission_webhook_admission_duration_seconds"
NOOP = "noop-bench."  # webhook names: ours with this in front
BASELINE = "baseline-bench."
ADMISSION = ("admissionregistration.k8s.io", "v1")


def serve_noop(port: int, cert: Path, key: Path) -> None:
    """The no-op server process (`--serve-noop`): the webhook's serving options, a no-op app."""
    settings = admission_settings.build(overrides={"host": "127.0.0.1", "port": port})
    options = admission_app.serve_options(settings, tls.TlsFiles(cert=cert, key=key))
    server.AppServer(NoopApp(), options).run()


class NoopApp:
    """Reads the body and answers "allowed" with the request's uid (the API server checks it): the
    first `"uid":"…"` of an AdmissionReview from the API server is request.uid (Go writes fields in
    struct order: kind, apiVersion, request{uid, …})."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        start = body.find(b'"uid":"') + 7
        uid = body[start : body.find(b'"', start)]
        content = (
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"'
            + uid
            + b'","allowed":true}}'
        )
        headers = [(b"content-length", b"%d" % len(content)), (b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def start_noop(bed: Bed) -> tuple[Process, int]:
    assert bed.cp.pki is not None
    cert, key = pkimod.serving(bed.cp.pki, "noop-webhook", ("localhost",), ("127.0.0.1",))
    port = free_port()
    process = bed.spawn(
        "noop-webhook", [sys.executable, __file__, "--serve-noop", str(port), str(cert), str(key)]
    )
    process.wait_until(lambda: _listening(port), 30, "listening")
    return process, port


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def restart_with_json_logs(
    bed: Bed, process: Process, name: str, env: dict[str, str] | None = None
) -> Process:
    """The webhook `process` again, logging JSON lines as the chart runs it (the bed logs text)."""
    argv = list(process.argv)
    argv[argv.index("--log-format") + 1] = "json"
    process.stop()
    bed.processes.remove(process)
    again = bed.spawn(name, argv, env=env)
    again.wait_until(lambda: _listening(int(argv[argv.index("--port") + 1])), 30, "listening")
    return again


def start_baseline(bed: Bed, ours: Process, checkout: Path) -> tuple[Process, int]:
    """The webhook of another checkout, with our webhook's arguments but its own port; config keys that
    an older checkout does not know (added since) are left out of its copy of the config file."""
    argv = list(ours.argv)
    port = free_port()
    argv[argv.index("--port") + 1] = str(port)
    config = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text())
    copy_path = bed.root / "baseline-config.yaml"
    argv[argv.index("--config") + 1] = str(copy_path)
    for _ in range(5):
        copy_path.write_text(yaml.safe_dump(config))
        process = bed.spawn("baseline-webhook", argv, env={"PYTHONPATH": str(checkout)})
        try:
            process.wait_until(lambda: _listening(port), 30, "listening")
            return process, port
        except ProcessError as exc:
            bed.processes.remove(process)
            unknown = re.search(r"unknown key\(s\) ([\w, ]+?);", str(exc))
            if unknown is None:
                raise
            for key in unknown.group(1).split(", "):
                config.pop(key, None)
    raise SystemExit("the baseline webhook does not start")


def register_copy(bed: Bed, port: int, prefix: str) -> None:
    """Copies of our two webhook configurations, each webhook renamed (`prefix` in front) and pointed at
    the server on `port`."""
    group, version = ADMISSION
    for kind, plural in (
        ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
        ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
    ):
        suffix = "mutating" if kind.startswith("Mutating") else "validating"
        ours = bed.request("GET", rest.path(plural, f"{FULLNAME}-{suffix}", group=group, version=version))
        hooks = []
        for theirs in ours["webhooks"]:
            hook = copy.deepcopy(theirs)
            hook["name"] = prefix + hook["name"]
            path = re.sub(r"^https://[^/]+", "", hook["clientConfig"]["url"])
            hook["clientConfig"]["url"] = f"https://127.0.0.1:{port}{path}"
            hooks.append(hook)
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": kind,
            "metadata": {"name": f"{prefix.rstrip('.')}-{suffix}"},
            "webhooks": hooks,
        }
        bed.request("POST", rest.path(plural, group=group, version=version), body=body)


def histogram(text: str, name: str) -> tuple[list[tuple[float, float]], float, float]:
    """Cumulative (le, count) buckets, sum and count of METRIC for webhook `name`, over all its labels."""
    buckets: dict[float, float] = {}
    total = count = 0.0
    label = f'name="{name}"'
    for line in text.splitlines():
        if not line.startswith(METRIC) or label not in line:
            continue
        value = float(line.rsplit(" ", 1)[1])
        if line.startswith(METRIC + "_bucket"):
            le = re.search(r'le="([^"]+)"', line)
            assert le is not None
            bound = float("inf") if le.group(1) == "+Inf" else float(le.group(1))
            buckets[bound] = buckets.get(bound, 0.0) + value
        elif line.startswith(METRIC + "_sum"):
            total += value
        elif line.startswith(METRIC + "_count"):
            count += value
    return sorted(buckets.items()), total, count


def quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """histogram_quantile: linear within the bucket that holds the q-th observation."""
    total = buckets[-1][1] if buckets else 0.0
    if not total:
        return float("nan")
    rank, lower, below = q * total, 0.0, 0.0
    for bound, cumulative in buckets:
        if cumulative >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cumulative - below, 1e-12)
        lower, below = bound, cumulative
    return lower


def over(buckets: list[tuple[float, float]], bound: float) -> float:
    total = buckets[-1][1] if buckets else 0.0
    within = next((c for b, c in buckets if b == bound), 0.0)
    return (total - within) / total if total else float("nan")


def delta(
    after: tuple[list[tuple[float, float]], float, float],
    before: tuple[list[tuple[float, float]], float, float],
) -> tuple[list[tuple[float, float]], float, float]:
    earlier = dict(before[0])
    return [(b, c - earlier.get(b, 0.0)) for b, c in after[0]], after[1] - before[1], after[2] - before[2]


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process and its waited-for children, from /proc (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _sockets(state: str, selector: str) -> int:
    """TCP sockets in `state` that `ss` lists for `selector` (e.g. "( sport = :8443 )")."""
    out = subprocess.run(
        ["ss", "-Htn", "state", state, selector], capture_output=True, text=True, check=False
    )
    return len([line for line in out.stdout.splitlines() if line.strip()])


def connections(port: int) -> int:
    return _sockets("established", f"( sport = :{port} )")


def create(bed: Bed, namespace: str, count: int, threads: int, prefix: str) -> float:
    def one(i: int) -> None:
        bed.request("POST", rest.path("pods", namespace=namespace), body=objects.gpu_pod(f"{prefix}{i}", 4))

    start = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, range(count)))
    return time.monotonic() - start


def time_waits(port: int) -> int:
    """Connections to `port` closed by the client (its side waits in TIME_WAIT): connection churn."""
    return _sockets("time-wait", f"( dport = :{port} )")


def own_handling(bed: Bed) -> dict[str, tuple[float, float]]:
    """The webhook's own request duration histogram (its /metrics): endpoint -> (sum s, count)."""
    own = realbed.webhook_metrics(bed)
    found = {}
    for endpoint in ("mutate", "validate"):
        sums = re.findall(
            rf'^gpushare_webhook_request_duration_seconds_sum{{endpoint="{endpoint}"}} (\S+)', own, re.M
        )
        counts = re.findall(
            rf'^gpushare_webhook_request_duration_seconds_count{{endpoint="{endpoint}"}} (\S+)', own, re.M
        )
        found[endpoint] = (sum(map(float, sums)), sum(map(float, counts)))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pods", type=int, default=1500, help="pods created under load (default 1500)")
    parser.add_argument("--threads", type=int, default=8, help="client threads creating them (default 8)")
    parser.add_argument("--baseline", type=Path, help="also run the webhook of this checkout, as 'baseline'")
    parser.add_argument("--serve-noop", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_noop:
        port, cert, key = args.serve_noop
        serve_noop(int(port), Path(cert), Path(key))
        return
    with realbed.started("gpushare-bench-") as bed:
        cp = bed.cp
        ours = restart_with_json_logs(bed, bed.start_webhook(), "webhook")
        noop, noop_port = start_noop(bed)
        register_copy(bed, noop_port, NOOP)
        servers = {"ours": (ours, bed.webhook_port, ""), "no-op": (noop, noop_port, NOOP)}
        if args.baseline is not None:
            baseline, baseline_port = start_baseline(bed, ours, args.baseline)
            register_copy(bed, baseline_port, BASELINE)
            servers["baseline"] = (baseline, baseline_port, BASELINE)
        namespace = bed.namespace("bench-admission")
        time.sleep(2)  # the API server's webhook configuration informer
        create(bed, namespace, 50, args.threads, "warm-")  # connections opened, code paths warm
        hooks = {
            "mutating": "pods.mutate.gpushare.aliyun.com",
            "validating": "pods.validate.gpushare.aliyun.com",
        }
        text = cp.get_raw("/metrics").decode()
        before = {
            (s, k): histogram(text, prefix + hook)
            for s, (_, _, prefix) in servers.items()
            for k, hook in hooks.items()
        }
        own_before = own_handling(bed)
        watched = {p.name: p.pid for p in cp.processes if p.name in ("kube-apiserver", "etcd")}
        watched.update({f"{s} webhook": process.pid for s, (process, _, _) in servers.items()})
        watched["this client"] = os.getpid()
        cpu = {k: cpu_seconds(pid) for k, pid in watched.items()}
        churn = {s: time_waits(port) for s, (_, port, _) in servers.items()}
        load = os.getloadavg()[0]
        elapsed = create(bed, namespace, args.pods, args.threads, "p-")
        used = {k: cpu_seconds(pid) - cpu[k] for k, pid in watched.items()}
        held = {s: connections(port) for s, (_, port, _) in servers.items()}
        churn = {s: time_waits(port) - churn[s] for s, (_, port, _) in servers.items()}
        own_after = own_handling(bed)
        text = cp.get_raw("/metrics").decode()
        print(
            f"kube-apiserver {bed.cp.bins.name}; {args.pods} GPU pods created by {args.threads} threads in {elapsed:.1f} s "
            f"({args.pods / elapsed:.0f} pods/s); load average {load:.1f} before, {os.getloadavg()[0]:.1f} after, "
            f"{os.cpu_count()} cpus"
        )
        print(
            f"{'kind':<11} {'webhook':<9} {'calls':>6} {'mean ms':>8} {'p99 ms':>7} {'> 5 ms':>7}  (as kube-apiserver waits for it)"
        )
        ok = True
        calls: dict[str, float] = {}
        for kind, hook in hooks.items():
            cells = {}
            for server, (_, _, prefix) in servers.items():
                buckets, total, count = delta(histogram(text, prefix + hook), before[(server, kind)])
                calls[server] = calls.get(server, 0.0) + count
                cells[server] = (
                    total / count * 1000 if count else float("nan"),
                    quantile(buckets, 0.99) * 1000,
                )
                print(
                    f"{kind:<11} {server:<9} {count:>6.0f} {cells[server][0]:>8.2f} {cells[server][1]:>7.2f} {over(buckets, 0.005):>7.1%}"
                )
            for server in (s for s in servers if s != "no-op"):
                mean_ratio = cells[server][0] / cells["no-op"][0]
                p99_ratio = cells[server][1] / cells["no-op"][1]
                met = mean_ratio <= 1.2 and p99_ratio <= 1.2
                if server == "ours":
                    ok = ok and met
                verdict = ("OK" if met else "ABOVE GOAL") if server == "ours" else ""
                print(
                    f"  {kind}: {server} / no-op: mean {mean_ratio:.2f}x, p99 {p99_ratio:.2f}x (goal <= 1.2x) {verdict}"
                )
        print(
            f"CPU seconds during the load ({elapsed * (os.cpu_count() or 1):.1f} available): "
            + ", ".join(f"{k} {v:.1f}" for k, v in used.items())
        )
        print(
            "webhook CPU per call: "
            + ", ".join(
                f"{s} {used[f'{s} webhook'] / calls[s] * 1e3:.2f} ms" for s in servers if calls.get(s)
            )
        )
        print("connections held after the load: " + ", ".join(f"{k} {v}" for k, v in held.items()))
        print(
            "connections closed by the API server during the load: "
            + ", ".join(f"{k} {v}" for k, v in churn.items())
        )
        for endpoint in ("mutate", "validate"):
            total = own_after[endpoint][0] - own_before[endpoint][0]
            count = own_after[endpoint][1] - own_before[endpoint][1]
            print(
                f"our webhook's own handling of /{endpoint}: mean {total / count * 1000 if count else float('nan'):.3f} ms over {count:.0f}"
            )
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
