"""`gpushare check` on ResourceClaims and ResourceClaimTemplates: the webhook's messages, at their lines."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from webhook.admission import app as admission_app
from webhook.admission import settings as admission_settings
from webhook.cli import check, manifests, report

CLAIMS = Path(__file__).parent.parent / "data" / "check" / "dra" / "claims.yaml"


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = check.main(["-o", "json", *args, str(CLAIMS)])
    return code, json.loads(capsys.readouterr().out)


def _review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview the API server sends for a claim (v1, resource.k8s.io)."""
    version = obj["apiVersion"].rpartition("/")[2]
    gvk = {"group": "resource.k8s.io", "version": version, "kind": obj["kind"]}
    gvr = {"group": "resource.k8s.io", "version": version, "resource": obj["kind"].lower() + "s"}
    request = {
        "uid": uid,
        "kind": gvk,
        "resource": gvr,
        "requestKind": gvk,
        "requestResource": gvr,
        "name": obj["metadata"]["name"],
        "namespace": obj["metadata"]["namespace"],
        "operation": "CREATE",
        "userInfo": {"username": "dev"},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def test_claims_are_denied_at_the_line_of_the_field(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _check(capsys)
    assert code == report.VIOLATIONS
    found = {r["name"]: r for r in out["results"]}
    assert sorted(found) == ["counted", "gpu-three", "rounded"]  # "fine" has nothing to say
    three = found["gpu-three"]
    assert not three["allowed"]
    ((line, path),) = [(v["line"], v["path"]) for v in three["violations"]]
    assert path == "spec.spec.devices.requests[0].exactly.capacity.requests.memory"
    assert CLAIMS.read_text().splitlines()[line - 1].strip() == 'memory: "3"'
    assert three["message"].endswith(
        '"3": is read as 3 bytes: memory is a size in bytes '
        "(aliyun.com/gpu-mem counts GiB, a claim does not); fix: write 3Gi"
    )
    assert [v["path"] for v in found["counted"]["violations"]] == [
        "spec.devices.requests[0].exactly.count",
        "spec.devices.requests[1].exactly.capacity.requests.memory",
    ]
    assert found["rounded"]["allowed"]
    assert found["rounded"]["warnings"] == [
        "request gpu/small: memory 2500Mi is rounded up to 3Gi (steps of 1Gi); ask 3Gi"
    ]


def test_the_config_files_dra_section_sets_classes_step_and_largest_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "webhook.yaml"
    config.write_text("dra: {memoryStep: 256Mi, maxMemory: 3Gi, wholeGpuClass: other}\n")
    code, out = _check(capsys, "--config", str(config))
    assert code == report.VIOLATIONS
    found = {r["name"]: r for r in out["results"]}
    assert found["rounded"]["warnings"] == [
        "request gpu/small: memory 2500Mi is rounded up to 2560Mi (steps of 256Mi); ask 2560Mi"
    ]
    assert "more than the largest GPU has (3Gi)" in found["fine"]["message"]
    # The whole-GPU class is another one now: its memory request is not ours to judge.
    assert [v["path"] for v in found["counted"]["violations"]] == ["spec.devices.requests[0].exactly.count"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("dra: {maxMemory: lots}", "dra.maxMemory must be a size such as 80Gi"),
        ("dra: {memoryStep: 1000}", "dra.memoryStep must be a whole number of MiB above 0"),
        (
            "dra: {memoryStep: 1Gi, maxMemory: 512Mi}",
            "dra: the largest GPU memory (512Mi) is less than one step",
        ),
        ("dra: {shareClass: ''}", "dra.shareClass must be a non-empty string"),
        ("dra: {classes: x}", "dra: unknown key(s) classes"),
        ("dra: [x]", "dra must be a mapping"),
    ],
)
def test_a_bad_dra_section_exits_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, words: str
) -> None:
    config = tmp_path / "webhook.yaml"
    config.write_text(text + "\n")
    assert check.main(["--config", str(config), str(CLAIMS)]) == report.UNREADABLE
    assert words in capsys.readouterr().err


def test_validate_endpoint_and_check_give_identical_messages_for_claims(
    capsys: pytest.CaptureFixture[str],
) -> None:
    documents = [d for d in manifests.read_paths([str(CLAIMS)]) if isinstance(d, manifests.Document)]
    _, out = _check(capsys)
    results = {r["name"]: r for r in out["results"]}
    app = admission_app.create_app(admission_settings.AdmissionSettings())

    async def validate_all() -> list[dict[str, Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            answers = []
            for i, doc in enumerate(documents):
                answer = await client.post("/validate", json=_review(dict(doc.obj), f"uid-{i}"))
                assert answer.status_code == 200
                answers.append(answer.json()["response"])
            return answers

    denied = 0
    for doc, response in zip(documents, asyncio.run(validate_all()), strict=True):
        mine = results.get(doc.obj["metadata"]["name"])
        if mine is None:
            assert response == {"uid": response["uid"], "allowed": True}
            continue
        assert response["allowed"] is mine["allowed"]
        assert response.get("warnings", []) == mine["warnings"]
        if not mine["allowed"]:
            denied += 1
            assert response["status"]["message"] == mine["message"]
    assert denied == 2
