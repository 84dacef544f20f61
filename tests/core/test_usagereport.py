"""The usage report's JSON: what the device plugin serves on /usage reads back the same, and an answer
that cannot be read names its field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from webhook.core.usage import usage, usagereport

REPORT = usage.NodeUsage(
    "n1",
    1767225600.5,
    (
        usage.GpuUsage(0, "GPU-a", 16 << 30, 4 << 30, 5 << 30, 0.5, True, {usage.HOST: 1 << 20}, "V100"),
        usage.GpuUsage(1, "GPU-b", 16 << 30, 0, None, None, False),
    ),
    (usage.ContainerUsage("ml", "train", "main", "u1", 0, 4 << 30, 5 << 30, 0.4, 2, True),),
)


def test_a_report_reads_back_as_it_was_written():
    assert usagereport.loads(usagereport.dumps(REPORT)) == REPORT


def _broken(path: tuple[str | int, ...], value: object) -> bytes:
    data = usagereport.encode(REPORT)
    target: Any = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"<html>", "the answer is not JSON"),
        (b"[]", "report is not an object"),
        (b"[" * 100000, "the answer is not JSON"),
        (_broken(("gpus",), {}), "report.gpus is not a list"),
        (_broken(("node",), 3), "report.node is not a string"),
        (_broken(("sampledAt",), "now"), "report.sampledAt is not a number"),
        (_broken(("gpus", 0, "totalBytes"), -1), "gpus[0].totalBytes is not a whole number"),
        (_broken(("gpus", 0, "usedBytes"), 2.5), "gpus[0].usedBytes is not a whole number"),
        (_broken(("gpus", 0, "utilization"), 1.5), "gpus[0].utilization is not a ratio"),
        (_broken(("gpus", 0, "healthy"), "yes"), "gpus[0].healthy is not true or false"),
        (_broken(("gpus", 0, "unattributed"), []), "gpus[0].unattributed is not an object"),
        (_broken(("gpus", 0, "unattributed", "host"), True), "gpus[0].unattributed.host is not a whole"),
        (_broken(("containers", 0), "x"), "containers[0] is not an object"),
        (_broken(("containers", 0, "shareBytes"), 1 << 70), "containers[0].shareBytes is not a whole"),
        (_broken(("containers", 0, "overShare"), 1), "containers[0].overShare is not true or false"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_an_answer_that_cannot_be_read_names_its_field(body, needle):
    with pytest.raises(usagereport.ReportError) as caught:
        usagereport.loads(body)
    assert needle in str(caught.value)
