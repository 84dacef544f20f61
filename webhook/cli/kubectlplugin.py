"""The kubectl plugins: `kubectl gpushare <command> [args]` runs `gpushare <command> [args]`, and
`kubectl inspect gpushare [args]`, the original gpushare's plugin, runs `gpushare inspect [args]`.

kubectl runs `kubectl-gpushare` or `kubectl-inspect-gpushare` from PATH (the package installs both beside
`gpushare`) with the words after the plugin's name and kubectl's own environment, so `inspect` finds the
cluster through $KUBECONFIG as it does without kubectl. Flags go after the plugin's name (`kubectl gpushare
inspect --context prod`): kubectl looks for no plugin past a flag. Nothing is decided here: the commands
are `gpushare`'s, their usage lines saying `kubectl gpushare` (`webhook.cli.progname`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from webhook.cli import main


def gpushare(argv: Sequence[str] | None = None) -> int:
    """`kubectl gpushare <command> [args]`: `gpushare <command> [args]`."""
    return main.main(argv)


def inspect_gpushare(argv: Sequence[str] | None = None) -> int:
    """`kubectl inspect gpushare [args]`: `gpushare inspect [args]`."""
    args = list(sys.argv[1:] if argv is None else argv)
    return main.main(["inspect", *args])
