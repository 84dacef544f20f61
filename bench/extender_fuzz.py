"""Soak fuzz of the extender's HTTP API: 100,000 hypothesis cases on filter, prioritize and bind.

Run: .venv/bin/python bench/extender_fuzz.py [--examples N]
Pass: no reply is a 500, every reply keeps the extender contract (tests/extender/test_fuzz.py, which CI
runs with a few thousand cases), and nothing is logged as an error. Prints the outcome counts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.extender import test_fuzz


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=100_000, help="cases to send (100,000)")
    args = parser.parse_args()
    started = time.perf_counter()
    for post in test_fuzz.serve():
        counts = test_fuzz.fuzz(post, args.examples)
    elapsed = time.perf_counter() - started
    total = sum(counts.values())
    print(f"{total:,} cases in {elapsed:.0f} s, no 500, no logged error")
    for outcome, n in sorted(counts.items()):
        print(f"  {outcome:<18} {n:>8,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
