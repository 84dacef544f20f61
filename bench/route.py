"""The route one request takes through our code: every function of `webhook/` it enters, in order.

Two routes: an AdmissionReview through `admission/review.review` (bench/admission_review.py's Pod) and
an `ExtenderArgs` through `extender/scheduling.filter_nodes` (3 nodes of 2 GPUs with some placed pods,
as bench/extender.py builds a bigger cache). For each: the stops (functions entered, comprehensions
left out), the files, how often the route returns to a file it already left, and how often it climbs
from core back to a shell. Run: `.venv/bin/python bench/route.py [--list]` (--list prints each stop).
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from admission_review import realistic_review  # noqa: E402

from tests.extender.factory import node, pod  # noqa: E402
from webhook.admission import review  # noqa: E402
from webhook.core.admission import verdict  # noqa: E402
from webhook.core.placement import allocator  # noqa: E402
from webhook.extender import scheduling, wire  # noqa: E402
from webhook.extender.cache import Cache  # noqa: E402

PACKAGE = ROOT / "webhook"
NODES = 3  # few, so the route shows each step once per node rather than a long repeat
SKIPPED = {"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>"}


def trace(call: Callable[[], Any]) -> list[tuple[str, str]]:
    """(file relative to webhook/, function) for every call into webhook/ while `call` runs."""
    stops: list[tuple[str, str]] = []

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        code = frame.f_code
        path = Path(code.co_filename)
        if code.co_name in SKIPPED or not path.is_relative_to(PACKAGE):
            return
        stops.append((str(path.relative_to(PACKAGE)), code.co_qualname))

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return stops


def summary(name: str, stops: list[tuple[str, str]], show: bool) -> None:
    files: list[str] = []
    returns = climbs = 0
    previous = ""
    for file, _ in stops:
        if file != previous:
            if file in files:
                returns += 1
            else:
                files.append(file)
            if previous.startswith("core/") and not file.startswith("core/"):
                climbs += 1
        previous = file
    print(
        f"{name}: {len(stops)} stops in {len(files)} files, {returns} returns to a file already left, "
        f"{climbs} climbs from core back to a shell"
    )
    if show:
        for file, function in stops:
            print(f"    {file}:{function}")


def review_route() -> list[tuple[str, str]]:
    body = realistic_review()
    policy = review.Policy(rules=verdict.Policy())
    review.review(
        body, "validate", policy
    )  # warm caches (lru_cache'd parsers) so the route is the steady one
    return trace(lambda: review.review(body, "validate", policy))


def filter_route() -> list[tuple[str, str]]:
    rng = random.Random(1)
    cache = Cache()
    cache.nodes_resync(node(f"node-{i}", 16, 16) for i in range(20))
    cache.pods_resync(
        pod(
            f"placed-{i}",
            rng.randint(1, 3),
            node_name=f"node-{i % 20}",
            placed={0: {i % 2: 2}},
            phase="Running",
        )
        for i in range(30)
    )
    args = wire.ExtenderArgs(pod=pod("new", 4), node_names=tuple(f"node-{i}" for i in range(20)))
    scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK)
    return trace(lambda: scheduling.filter_nodes(cache, args, allocator.Policy.BINPACK))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true", help="print every stop")
    show = parser.parse_args().list
    summary("review (validate, one Pod)", review_route(), show)
    summary(f"filter ({NODES} nodes)", filter_route(), show)


if __name__ == "__main__":
    main()
