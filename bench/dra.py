"""DRA shares through the real kube-scheduler (issue 24): throughput with our driver against the same claims
with no driver, plain whole-card pods and the extender's path; NodePrepareResources over the driver's real
gRPC socket; packing of DRA shares against online best fit, with the slice's devices in two orders.

Run: .venv/bin/python bench/dra.py [--sizes 1500,5000] [--nodes 200] [--drivers 8] [--seeds 2]

Speed, per size (pods per run), four runs side by side in one control plane, each on `--nodes` nodes of its
own (taints keep the others off), every run's pods created while no scheduler runs, the scheduler started
with its client's rate limit lifted, pods/s from 10 % to 90 % bound and CPU ms per pod of every process in
that window (bench/placement.py's `speed`):
- cards: `nvidia.com/gpu: 1` pods, kube-scheduler's default profile (the reference of placement.py);
- extender: 2 GiB `aliyun.com/gpu-mem` pods, the chart's profile + our extender;
- dra, no driver: 2 GiB ResourceClaims on nodes of 8 x 16 GiB GPUs whose ResourceSlices the bench wrote
  exactly as the driver's core builds them (webhook/core/node/draslice.py), default profile;
- dra + driver: the same, with `--drivers` real `gpushare dra-driver` processes publishing their nodes'
  slices (200 driver processes do not fit 2 cores; the others' slices written as above). No kubelet runs.
Claims are made before the pods (resourceClaimName), not from templates: kube-controller-manager would
make them at its client's 20 requests/s (`--kube-api-qps`), which would time it, not the scheduler. It
still runs and watches pods and claims, so its CPU shows. Every run's pods and claims are deleted before
the next size: kube-scheduler sums every allocated claim of the cluster for each pod.

Prepare: after the driver run, NodePrepareResources then NodeUnprepareResources for allocated claims
of the drivers' nodes, one claim per call over the driver's unix socket (tests/dra/kubelet.py).

Packing: 24 nodes x 4 GPUs; each node's GPUs of one size (as bench/placement.py) or of mixed sizes (16,
24, 32, 80 GiB); claims that fill every GPU exactly in a seeded order; the default profile places them
until nothing more fits. GiB allocated (read from the claims; over-committed GPUs must be 0) against online
best fit over every GPU in the same order; on mixed nodes the slice in GPU index order and smallest first.
"""
# ruff: noqa: E501  (report lines are kept whole)

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import placement  # the script's directory is on sys.path when it runs
import realbed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.dra import kubelet as standin_kubelet
from tests.e2e import dra, objects
from tests.e2e.bed import Bed
from webhook.core.node import devices, draslice
from webhook.core.placement import modes
from webhook.core.wire import resources
from webhook.devcluster.process import Process
from webhook.gpus import inventory
from webhook.kube import errors, rest

PLAIN = placement.PLAIN
GPUS = 8
GIB = 1 << 30


# -- slices, claims, pods --------------------------------------------------------------------------------
def fake_spec(sizes: list[int]) -> str:
    return ",".join(f"{i}:{gib}" for i, gib in enumerate(sizes))


def slice_devices(sizes: list[int], order: str = "driver") -> list[dict[str, Any]]:
    """The devices the driver's core publishes for these GPUs (the driver's inventory of `--fake-gpus`);
    `order` "index" or "smallest" re-sorts them (by GPU index, or memory then index)."""
    gpus = inventory.discover(fake_spec(sizes)).gpus()
    found = draslice.devices_of(gpus, devices.Granularity())
    if order == "index":
        found.sort(key=lambda d: d["attributes"]["index"]["int"])
    elif order == "smallest":
        found.sort(key=lambda d: (d["attributes"]["memoryMiB"]["int"], d["attributes"]["index"]["int"]))
    return found


def dra_nodes(bed: Bed, group: str, layout: dict[str, list[int]], order: str, driven: set[str]) -> None:
    """DRA nodes of `layout` (node -> GiB per GPU); a slice written for each node not in `driven`."""

    def one(name: str) -> None:
        sizes = layout[name]
        node = bed.node(name, len(sizes), sizes[0], {modes.MODE_LABEL: "dra"}, group=group)
        if name in driven:
            return
        body = draslice.resource_slice(
            name, dra.DRIVER, 1, slice_devices(sizes, order), node["metadata"]["uid"]
        )
        bed.request("POST", rest.path("resourceslices", group=dra.GROUP), body=body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, layout))


def claim_pods(bed: Bed, ns: str, group: str, sizes: list[int]) -> list[dict[str, Any]]:
    """Claims of `sizes` GiB made now, in order; the pods naming them (to create), named in that order."""
    names = [f"p{i:05d}" for i in range(len(sizes))]
    path = rest.path("resourceclaims", namespace=ns, group=dra.GROUP)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n, gib: bed.request("POST", path, body=dra.claim(n, f"{gib}Gi")), names, sizes))
    bodies = [dra.pod(n, n, group) for n in names]
    for body in bodies:
        body["spec"]["schedulerName"] = PLAIN
    return bodies


def clear(bed: Bed, ns: str) -> None:
    """Every pod and claim of `ns` gone: the scheduler's delete-protection finalizers taken off first (no
    kubelet confirms these pods stopped; kube-controller-manager would take them off at 20 requests/s)."""
    claims_path = rest.path("resourceclaims", namespace=ns, group=dra.GROUP)
    found = dra.claims(bed, ns)

    def unprotect(claim: dict[str, Any]) -> None:
        path = rest.path("resourceclaims", claim["metadata"]["name"], ns, group=dra.GROUP)
        body = {"metadata": {"finalizers": None}}
        with contextlib.suppress(errors.NotFoundError):
            bed.request("PATCH", path, body=body, content_type=rest.MERGE_PATCH)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(unprotect, [c for c in found if c["metadata"].get("finalizers")]))
    if found:
        bed.request("DELETE", claims_path)
    bed.request("DELETE", rest.path("pods", namespace=ns), query={"gracePeriodSeconds": 0})
    bed.wait(f"{ns} empty", lambda: not bed.pods(ns) and not dra.claims(bed, ns), timeout=300)


def allocated(claims: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
    """(node, device) -> GiB the claims' allocations consume there, each share once."""
    return {key: size // GIB for key, size in dra.consumed(claims).items()}


# -- drivers -------------------------------------------------------------------------------------------
class Drivers:
    """`gpushare dra-driver` for each of `nodes` (the DaemonSet's flags and resync period, no kubelet)."""

    def __init__(self, bed: Bed, nodes: list[str], sizes: list[int]) -> None:
        self.bed, self.nodes = bed, nodes
        self.root = Path(tempfile.mkdtemp(prefix="gsdra-", dir="/tmp"))  # short: unix socket paths
        self.processes: list[Process] = []
        for node in nodes:
            # The driver's own default resync (the e2e helper sets 5 s for its tests).
            extra = ("--resync-period", "60", "--log-format", "json")
            self.processes.append(
                dra.start_driver(bed, node, fake_spec(sizes), self.root / node, extra=extra)
            )
        want = len(nodes) * len(sizes)
        bed.wait("the drivers' slices", lambda: len(dra.capacities(bed, nodes)) == want, timeout=180)

    def socket(self, node: str) -> Path:
        return self.root / node / "plugins" / dra.DRIVER / "dra.sock"

    def prepare_times(self, ns: str, limit: int) -> str:
        """ms per NodePrepareResources and NodeUnprepareResources call (one claim each) on the drivers'
        nodes, and the drivers' CPU per claim prepared and unprepared."""
        mine = [
            (c, r["pool"])
            for c in dra.claims(self.bed, ns)
            for r in dra.results(c)[:1]
            if r["pool"] in self.nodes
        ][:limit]
        if not mine:
            return "no claim allocated on the drivers' nodes"
        cpu0 = sum(placement.cpu_seconds(self.processes).values())
        took: dict[str, list[float]] = {"prepare": [], "unprepare": []}
        for claim, node in mine:
            meta = claim["metadata"]
            ident = (meta["uid"], ns, meta["name"])
            for call, fn in (("prepare", standin_kubelet.prepare), ("unprepare", standin_kubelet.unprepare)):
                t0 = time.perf_counter()
                reply = fn(self.socket(node), [ident])
                took[call].append(1000 * (time.perf_counter() - t0))
                errors_ = [c.error for c in reply.claims.values() if c.error]
                if errors_:
                    raise SystemExit(f"{call} of {meta['name']} on {node} failed: {errors_[0]}")
        cpu = 1000 * (sum(placement.cpu_seconds(self.processes).values()) - cpu0) / len(mine)
        shown = ", ".join(
            f"{call} median {statistics.median(ms):.1f} ms, p90 {sorted(ms)[int(0.9 * (len(ms) - 1))]:.1f} ms"
            for call, ms in took.items()
        )
        return (
            f"{len(mine)} claims, one per call: {shown}; the drivers' CPU {cpu:.1f} ms per claim (both calls)"
        )

    def stop(self) -> None:
        for process in self.processes:
            process.stop()
            self.bed.processes.remove(process)
        dra.forget_slices(self.bed, self.nodes)
        shutil.rmtree(self.root, ignore_errors=True)


# -- runs ------------------------------------------------------------------------------------------------
def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def speed(bed: Bed, args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    nodes = args.nodes
    print(f"speed: {nodes} nodes per run, 10% -> 90% bound; sizes {sizes}; {load()}")
    placement.gpu_nodes(bed, "dspeed-share", [16] * nodes, GPUS)
    placement.card_nodes(bed, "dspeed-cards", nodes, cards=max(8, -(-max(sizes) // nodes)))
    layout = {f"dspeed-dra-{i}": [16] * GPUS for i in range(nodes)}
    dra_nodes(bed, "dspeed-dra", layout, "driver", set())
    driven_layout = {f"dspeed-drv-{i}": [16] * GPUS for i in range(nodes)}
    sample = sorted(driven_layout)[: args.drivers]
    dra_nodes(bed, "dspeed-drv", driven_layout, "driver", set(sample))
    for size in sizes:
        results, spaces = speed_size(bed, size, sample, args.prepare if size == sizes[0] else 0)
        summary(size, results, len(sample), nodes)
        for ns in spaces:
            clear(bed, ns)


def speed_size(
    bed: Bed, size: int, sample: list[str], prepare: int
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The four runs of `size` pods; their results and namespaces. The drivers run only around their
    run (started before its idle rates are read), so no other run carries their cost."""
    results: dict[str, dict[str, Any]] = {}
    spaces: list[str] = []

    def plain() -> Process:
        return bed.start_scheduler(plain=PLAIN, qps=1000)

    def run(key: str, label: str, group: str, bodies: Any, start: Any) -> None:
        ns = f"{group}-{size}"
        spaces.append(ns)
        bed.namespace(ns)
        made = bodies(ns)
        idle = placement.idle_cpu(bed)
        print(f"  [{label}, {size} pods; {load()}]")
        results[key] = placement.speed(bed, label, ns, made, start=start, idle=idle)
        results[key]["idle"] = idle

    def cards(ns: str) -> list[dict[str, Any]]:
        out = [
            objects.pod(f"w{i:05d}", objects.container(limits={resources.NVIDIA_GPU: "1"}))
            for i in range(size)
        ]
        for body in out:
            body["spec"].update(nodeSelector={"e2e-group": "dspeed-cards"}, schedulerName=PLAIN)
        return out

    def dra_claims(ns: str, group: str) -> list[dict[str, Any]]:
        return claim_pods(bed, ns, group, [2] * size)

    def shares(ns: str) -> list[dict[str, Any]]:
        return [objects.in_group(objects.gpu_pod(f"s{i:05d}", 2), "dspeed-share") for i in range(size)]

    run("cards", "nvidia.com/gpu pods, default profile", "dspeed-cards", cards, plain)
    run(
        "extender",
        "gpu-mem 2 GiB pods, chart profile + extender",
        "dspeed-share",
        shares,
        lambda: bed.start_scheduler(qps=1000),
    )
    run("none", "DRA 2 GiB claims, no driver", "dspeed-dra", lambda ns: dra_claims(ns, "dspeed-dra"), plain)
    drivers = Drivers(bed, sample, [16] * GPUS)
    try:
        label = f"DRA 2 GiB claims, {len(sample)} real drivers"
        run("driver", label, "dspeed-drv", lambda ns: dra_claims(ns, "dspeed-drv"), plain)
        if prepare:
            print("  prepare: " + drivers.prepare_times(f"dspeed-drv-{size}", prepare))
    finally:
        drivers.stop()
    return results, spaces


def summary(size: int, results: dict[str, dict[str, Any]], sample: int, nodes: int) -> None:
    rate = {k: r["rate"] for k, r in results.items()}
    run = results["driver"]
    ours = [name for name in run["cpu"] if name.startswith("dra-driver-")]
    gross = sum(run["cpu"][n] for n in ours)
    net = sum(run["net"][n] for n in ours)
    idle = 1000 * sum(run["idle"].get(n, 0.0) for n in ours) / max(len(ours), 1)
    print(
        f"  {size} pods: DRA with drivers {rate['driver']:.1f} pods/s = {rate['driver'] / rate['none']:.3f}x DRA without "
        f"({rate['none']:.1f}; goal >= 0.95x); DRA without {rate['none'] / rate['cards']:.2f}x whole cards ({rate['cards']:.1f}), "
        f"{rate['none'] / rate['extender']:.2f}x the extender ({rate['extender']:.1f}); the {sample} drivers' CPU "
        f"{gross:.3f} ms per pod, {net:.3f} net of idle; idle {idle:.2f} ms per s per driver (on its own node; {nodes} nodes)"
    )
    for name in ("kube-scheduler", PLAIN, "kube-apiserver", "etcd", "kube-controller-manager"):
        row = {k: r["cpu"].get(name) for k, r in results.items()}
        if any(row.values()):
            print(
                f"    {name} CPU ms per pod: "
                + ", ".join(f"{k} {v:.2f}" for k, v in row.items() if v is not None)
            )


def packing(bed: Bed, args: argparse.Namespace) -> None:
    count, per = args.pack_nodes, 4
    print(f"packing: {count} nodes x {per} GPUs of {'/'.join(map(str, placement.SIZES))} GiB; {load()}")
    for seed in range(1, args.seeds + 1):
        rng = random.Random(seed)
        uniform = [placement.SIZES[i % len(placement.SIZES)] for i in range(count)]
        rng.shuffle(uniform)
        layouts = {
            "uniform": [[s] * per for s in uniform],
            "mixed": [[rng.choice(placement.SIZES) for _ in range(per)] for _ in range(count)],
        }
        for kind, orders in (("uniform", ("index",)), ("mixed", ("index", "smallest"))):
            gpus = layouts[kind]
            workload = placement.exact_workload([g for node in gpus for g in node], random.Random(seed))
            for order in orders:
                pack_one(bed, f"dpack-{kind}-{order}-{seed}", order, gpus, workload)


def pack_one(bed: Bed, group: str, order: str, gpus: list[list[int]], workload: list[int]) -> None:
    layout = {f"{group}-{i}": sizes for i, sizes in enumerate(gpus)}
    dra_nodes(bed, group, layout, order, set())
    ns = bed.namespace(group)
    bodies = claim_pods(bed, ns, group, workload)
    placement.create(bed, ns, bodies)
    t0 = time.monotonic()
    # Under a load of 10+ on 2 cores a pause of 8 s (placement.py's default) is no sign of the end.
    start = lambda: bed.start_scheduler(plain=PLAIN)  # noqa: E731
    placement.stop(bed, placement.saturate(bed, ns, len(bodies), start, quiet_s=30))
    elapsed = time.monotonic() - t0
    used = allocated(dra.claims(bed, ns))
    capacity = {
        (node, draslice.device_name(i)): gib for node, sizes in layout.items() for i, gib in enumerate(sizes)
    }
    over = sum(1 for key, gib in used.items() if gib > capacity[key])
    all_gpus = [g for sizes in gpus for g in sizes]
    placed = sum(used.values())
    reference, _ = placement.online(all_gpus, workload)
    bfd = placement.best_fit_decreasing(all_gpus, workload)
    print(
        f"  {group}: slice in {order} order, {len(workload)} claims, {sum(all_gpus)} GiB; "
        f"placed {placed} GiB = {placed / reference:.4f}x online best fit ({reference}), "
        f"{placed / bfd:.4f}x best-fit-decreasing ({bfd}); over-committed GPUs: {over}; {elapsed:.1f} s"
    )
    clear(bed, ns)
    dra.forget_slices(bed, list(layout))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1500,5000", help="pods per speed run, comma-separated")
    parser.add_argument("--nodes", type=int, default=200, help="nodes per speed run (8 GPUs each)")
    parser.add_argument("--drivers", type=int, default=8, help="real driver processes (speed)")
    parser.add_argument("--prepare", type=int, default=40, help="claims prepared over gRPC (0: none)")
    parser.add_argument("--seeds", type=int, default=2, help="packing workloads")
    parser.add_argument("--pack-nodes", type=int, default=24, help="nodes per packing workload")
    parser.add_argument("--skip-packing", action="store_true")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    with realbed.started("gpushare-dra-bench-") as bed:
        bed.start_webhook()
        bed.start_extender()
        dra.install(bed)
        print(f"binaries {bed.cp.bins.name}; {os.cpu_count()} CPUs; {load()}")
        if not args.skip_packing:
            packing(bed, args)
        if not args.skip_speed:
            speed(bed, args)


if __name__ == "__main__":
    main()
