"""Soak of the extender's promise (issue 11): no shared GPU is ever over-committed, whatever binds arrive.

Run: .venv/bin/python bench/extender_invariant.py [--binds 10000] [--seed 1] [--latency 0.3]
Against a real API server instead of the stand-in: add --kubeconfig FILE, or --server URL [--token T]
[--ca-file F], or --devcluster (starts etcd and kube-apiserver from `scripts/kube-bins` in a temporary
folder, as the end-to-end tests do); the run creates cordoned nodes `gpushare-inv-*` and pods in
namespace `gpushare-invariant`, and deletes them afterwards.

Randomized concurrent binds (duplicates of one pod to the same and to other nodes, older UIDs), deletes
and re-creations under the same names, extender restarts, cut watches and compaction (stand-in only), and
injected API latency, 409 and 500 (tests/extender/chaos.py), checked after every change of the API's
stored pods (tests/extender/storm.py). Exit status 1 when any violation was seen.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import realbed  # the script's directory is on sys.path when it runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.extender import chaos, storm
from webhook.devcluster.standin.apiserver import ApiServer
from webhook.kube import client as kube_client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binds", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--callers", type=int, default=12, help="concurrent scheduler threads")
    parser.add_argument("--restarts", type=int, default=10)
    parser.add_argument("--disturbances", type=int, default=10, help="cut watches + compact (stand-in)")
    parser.add_argument("--latency", type=float, default=0.3, help="most injected latency, seconds")
    parser.add_argument("--slow", type=float, default=0.5, help="share of API calls delayed")
    parser.add_argument("--conflict", type=float, default=0.04, help="share of Bindings answered 409")
    parser.add_argument("--error", type=float, default=0.04, help="share of Bindings answered 500")
    parser.add_argument("--lost-reply", type=float, default=0.04, help="share landing but answered 500")
    parser.add_argument("--get-error", type=float, default=0.1, help="share of GETs answered 500")
    parser.add_argument("--kubeconfig", default="", help="a real API server, from this kubeconfig")
    parser.add_argument("--server", default="", help="a real API server URL")
    parser.add_argument("--token", default="")
    parser.add_argument("--ca-file", default="")
    parser.add_argument(
        "--devcluster", action="store_true", help="start a real etcd + kube-apiserver (scripts/kube-bins)"
    )
    args = parser.parse_args()
    if args.devcluster and (args.kubeconfig or args.server):
        parser.error("--devcluster starts its own API server: leave out --kubeconfig and --server")
    with contextlib.ExitStack() as stack:
        if args.devcluster:
            plane = stack.enter_context(realbed.control_plane("gpushare-soak-", keep=False))
            args.kubeconfig = str(plane.admin_kubeconfig)
        return soak(args)


def soak(args: argparse.Namespace) -> int:

    workload = storm.Workload(
        binds=args.binds,
        seed=args.seed,
        callers=args.callers,
        restarts=args.restarts,
        disturbances=args.disturbances,
    )
    faults = chaos.Faults(
        latency_s=args.latency,
        slow=args.slow,
        conflict=args.conflict,
        error=args.error,
        lost_reply=args.lost_reply,
        get_error=args.get_error,
    )
    standin: ApiServer | None = None
    disturb: Callable[[], None] | None = None
    if args.kubeconfig or args.server:
        settings = kube_client.ClientSettings(
            host=args.server, kubeconfig=args.kubeconfig, token=args.token, ca_file=args.ca_file
        )

        def connect() -> Any:
            return kube_client.connect(settings)

        where = args.server or args.kubeconfig
    else:
        standin = ApiServer(bookmark_interval=0.2).start()
        connect = standin.new_client
        where = "the API stand-in"

        def disturb() -> None:
            assert standin is not None
            standin.drop_watches()
            standin.compact()

    print(f"soak against {where}: {workload}\nfaults: {faults}", flush=True)
    try:
        report = storm.run(connect, workload, faults, disturb=disturb)
    finally:
        if standin is not None:
            standin.stop()
    print(report.summary())
    print("errors answered, by kind:")
    for shape, count in report.errors.most_common():
        print(f"  {count:6d}  {shape}")
    for line in report.leaked:
        print(f"leaked: {line}")
    for line in report.violations:
        print(f"VIOLATION: {line}")
    return 1 if report.violations else 0


if __name__ == "__main__":
    sys.exit(main())
