"""`gpushare demo`: flags -> DemoSettings -> `webhook.devcluster.demo.show.run`.

Exit 0 after `--once` or SIGTERM, 130 on Ctrl-C (webhook.cli.main), 1 when a part or the cluster fails.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.cli import exitcodes, helpformat
from webhook.devcluster.demo import show
from webhook.devcluster.process import ProcessError
from webhook.kube import errors


def build_parser() -> argparse.ArgumentParser:
    p = helpformat.parser(
        "demo",
        "A GPU cluster on this machine: the real kube-apiserver, etcd, kube-controller-manager "
        "and kube-scheduler when `bash scripts/kube-bins` built them (else the API stand-in); as root with "
        "`bash scripts/runtime-bins` built, a node that runs containers with the chart's parts as pods of "
        "our image, else a real kubelet per node on a fake runtime (root) and our parts on this host; fake "
        "GPUs; GPU pods, one refused with the webhook's message, and the `gpushare inspect` table. Ctrl-C "
        "stops everything.",
    )
    p.add_argument("--once", action="store_true", help="exit after showing the table (scripts, tests)")
    p.add_argument(
        "--standin", action="store_true", help="use the API stand-in even when the real binaries are built"
    )
    p.add_argument(
        "--fake-runtime",
        action="store_true",
        help="kubelets on the CRI fake runtime and our parts on this host, even where a node could run "
        "containers",
    )
    p.add_argument(
        "--workdir",
        type=Path,
        help="folder for logs, certificates and kubeconfigs (default: a new folder under the system's temp)",
    )
    p.add_argument(
        "--timeout", type=float, default=90.0, metavar="SECONDS", help="longest wait for each step"
    )
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    settings = show.DemoSettings(
        once=args.once,
        standin=args.standin,
        fake_runtime=args.fake_runtime,
        workdir=args.workdir,
        timeout_s=args.timeout,
    )
    try:
        return show.run(settings)
    except (show.DemoError, ProcessError, errors.ApiError, RuntimeError) as err:
        print(f"gpushare demo: {err}", file=sys.stderr)
        return exitcodes.FAILURE
