"""Exit codes of every `gpushare` command, defined once; docs/cli.md ("Exit codes") is the table users read.

Scripts branch on them: 1 is an answer (something is wrong with the manifests or the cluster could not be
read), 2 means the command line or a configuration it names must be fixed first.
"""

from __future__ import annotations

OK = 0
# check: an object would be denied; inspect: the cluster or extender could not be read (unreachable,
# 401/403/404, bad answer); servers and certs: could not start (certificate, address in use).
FAILURE = 1
# Bad arguments (argparse exits 2 as well), a bad --config file, an unusable kubeconfig; bare `gpushare`.
USAGE = 2
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, what a shell reports for a process killed by it
BROKEN_PIPE = 141  # the reader went away (`gpushare inspect | head`): 128 + SIGPIPE, as `yes | head`
