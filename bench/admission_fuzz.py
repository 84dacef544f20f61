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
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/admission/test_fuzz_reviews.py"


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
        procs.append(subprocess.Popen(cmd, cwd=ROOT, env=env))
    codes = [proc.wait() for proc in procs]
    seeds = f"{seed}..{seed + args.processes - 1}"
    print(f"{args.examples} cases, seeds {seeds}, {time.monotonic() - start:.0f} s")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
