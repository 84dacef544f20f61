"""Soak the webhook's review fuzz property with many more cases than CI runs (not part of CI).

    .venv/bin/python bench/admission_fuzz.py [--examples 100000] [--seed N] [--processes 1]

Runs tests/admission/test_fuzz_reviews.py (any review -> 200 or 400, bounded answer, no traceback) under
pytest with GPUSHARE_FUZZ_EXAMPLES per process and a random seed each, and prints the Hypothesis
statistics (status and verdict mix). Exit status is pytest's: 0 when no case broke the property.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/admission/test_fuzz_reviews.py"
PASSING = re.compile(r"(\d+) passing examples")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--examples", type=int, default=100_000, help="cases in all (default 100,000)")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: random)")
    parser.add_argument("--processes", type=int, default=1, help="pytest processes, each its own seed")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    start = time.monotonic()
    procs = []
    for i in range(args.processes):
        env = dict(
            os.environ,
            GPUSHARE_FUZZ_EXAMPLES=str(args.examples // args.processes),
            GPUSHARE_FUZZ_SEED=str(seed + i),
        )
        cmd = [sys.executable, "-m", "pytest", TEST, "-q", "-p", "no:cacheprovider"]
        cmd += ["--hypothesis-show-statistics", f"--hypothesis-seed={seed + i}"]
        # A file, not a pipe: a full pipe would stall a process; closed once read below.
        log = tempfile.TemporaryFile("w+")  # noqa: SIM115
        procs.append((subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), log))
    codes, ran = [], 0
    for proc, log in procs:
        codes.append(proc.wait())
        log.seek(0)
        text = log.read()
        log.close()
        print(text, end="")
        # The count Hypothesis ran, not the one asked for: the soak's claim rests on it.
        ran += sum(int(n) for n in PASSING.findall(text))
    seeds = f"{seed}..{seed + args.processes - 1}"
    elapsed = time.monotonic() - start
    print(f"{ran:,} cases run and passed ({args.examples:,} asked), seeds {seeds}, {elapsed:.0f} s")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
