"""`gpushare check`: the webhook's messages placed at file and line, exit codes, config, stdin, speed."""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from webhook.admission import app as admission_app
from webhook.admission import settings as admission_settings
from webhook.cli import check, manifests, report
from webhook.core.admission import verdict

DATA = Path(__file__).parent.parent / "data" / "check"
ROOT = Path(__file__).parent.parent.parent


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = check.main(["-o", "json", *args])
    return code, json.loads(capsys.readouterr().out)


def by_name(out: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in out["results"]}


@pytest.mark.parametrize(
    ("path", "exit_code", "denied"),
    [
        ("clean", 0, []),
        ("helm/rendered.yaml", 1, ["release-trainer-warmup"]),
        ("kustomize/build.yaml", 1, ["prod-nightly-eval"]),
        ("kubeflow/pytorchjob.yaml", 1, ["bert-finetune"]),
        ("mixed", 2, ["bad-request"]),
    ],
    ids=["clean", "helm", "kustomize", "kubeflow", "broken-and-mixed"],
)
def test_exit_code_and_denied_objects_per_input(
    capsys: pytest.CaptureFixture[str], path: str, exit_code: int, denied: list[str]
) -> None:
    code, out = run_json(capsys, str(DATA / path))
    assert code == exit_code == out["summary"]["exitCode"]
    assert [r["name"] for r in out["results"] if not r["allowed"]] == denied


def test_violation_is_placed_at_the_line_of_its_field_with_the_cores_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = DATA / "helm" / "rendered.yaml"
    _, out = run_json(capsys, str(path))
    job = by_name(out)["release-trainer-warmup"]
    assert (job["file"], job["line"], job["kind"], job["origin"]) == (
        str(path),
        80,
        "Job",
        "trainer/templates/job.yaml",
    )
    [finding] = job["violations"]
    assert finding["line"] == 97
    assert finding["path"] == "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]"
    assert (finding["container"], finding["value"]) == ("warmup", "0.5")
    # The strings are the core's own, not rewritten here.
    [doc] = [
        d for d in manifests.read_paths([str(path)]) if isinstance(d, manifests.Document) and d.line == 80
    ]
    decided = verdict.evaluate(doc.obj, verdict.Policy())
    assert finding["message"] == str(decided.violations[0])
    assert job["message"] == decided.message()


def test_node_selector_the_webhook_adds_is_shown_per_template(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run_json(capsys, str(DATA / "kubeflow"), str(DATA / "kustomize"))
    job = by_name(out)["bert-finetune"]
    assert [(a["path"], a["nodeSelector"]) for a in job["additions"]] == [
        ("spec.pytorchReplicaSpecs.Master.template", {"cgpu.disable.isolation": "false"}),
        ("spec.pytorchReplicaSpecs.Worker.template", {"cgpu.disable.isolation": "false"}),
    ]
    assert [a["line"] for a in job["additions"]] == [11, 28]
    # The annotation on the StatefulSet's template chooses the non-isolating pool.
    assert by_name(out)["prod-inference"]["additions"][0]["nodeSelector"] == {
        "cgpu.disable.isolation": "true"
    }


def test_broken_file_is_reported_and_every_other_file_is_still_checked(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out = run_json(capsys, str(DATA / "mixed"))
    assert code == report.UNREADABLE
    assert out["errors"] == [
        {
            "file": str(DATA / "mixed" / "broken.yaml"),
            "line": 18,
            "problem": out["errors"][0]["problem"],
        }
    ]
    assert out["errors"][0]["problem"].startswith("invalid YAML")
    # before the break in the broken file, and both items of the List in list.json
    assert set(by_name(out)) == {"before-the-break", "notebook", "bad-request"}
    assert by_name(out)["bad-request"]["violations"][0]["line"] == 25
    assert out["skipped"] == [
        {
            "file": str(DATA / "mixed" / "values.yaml"),
            "line": 2,
            "problem": "no kind: not a Kubernetes object",
        }
    ]
    assert out["summary"]["objects"] == 3


def test_text_output_puts_file_and_line_in_front_of_every_finding(capsys: pytest.CaptureFixture[str]) -> None:
    path = DATA / "helm" / "rendered.yaml"
    assert check.main([str(path)]) == report.VIOLATIONS
    lines = capsys.readouterr().out.splitlines()
    assert f"{path}:80: Job release-trainer-warmup (from trainer/templates/job.yaml): denied" in lines
    assert any(line.startswith(f"  {path}:97: error: spec.template.spec.containers[0]") for line in lines)
    assert '  adds nodeSelector cgpu.disable.isolation: "false" to spec.template' in lines
    assert lines[-1] == "checked 4 objects in 1 file, 1 denied (1 violation), 0 warnings"


def test_quiet_text_shows_only_denied_objects(capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(["-q", str(DATA / "helm"), str(DATA / "clean")]) == report.VIOLATIONS
    out = capsys.readouterr().out
    assert "release-trainer-warmup" in out
    assert "adds nodeSelector" not in out
    assert "Deployment release-trainer" not in out


def test_stdin_stream_is_read_for_dash(capsys: pytest.CaptureFixture[str]) -> None:
    text = (DATA / "helm" / "rendered.yaml").read_bytes()
    settings = check.CheckSettings(paths=("-",), output="json")
    out = io.StringIO()
    assert check.run(settings, stdin=io.BytesIO(text), out=out) == report.VIOLATIONS
    found = json.loads(out.getvalue())
    assert {r["file"] for r in found["results"]} == {"<stdin>"}
    assert found["summary"]["objects"] == 4


def test_config_file_is_the_webhooks_and_changes_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "webhook.yaml"
    config.write_text(
        "port: 9443\n"  # a server key: accepted and ignored by check
        "isolation:\n  default: true\n"
        "schedulerName: gpushare-scheduler\n"
        "excludedNamespaces: [ml-prod]\n"
    )
    code, out = run_json(capsys, "--config", str(config), str(DATA / "kustomize"), str(DATA / "clean"))
    assert code == report.CLEAN  # the only denied object lives in the excluded namespace
    assert [s["problem"] for s in out["skipped"]] == ["namespace ml-prod is excluded"] * 3
    [pod] = out["results"]
    assert pod["name"] == "share"
    # The pod already has the nodeSelector; only the schedulerName is added.
    assert pod["additions"] == [
        {"line": 1, "path": "", "nodeSelector": {}, "schedulerName": "gpushare-scheduler"}
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("isolation: {default: maybe}\n", "webhook.yaml: isolation.default must be true or false"),
        ("frobnicate: 1\n", "unknown key(s) frobnicate"),
        ("resources: [a]\n", "webhook.yaml: resources must be a mapping"),
        ("a: [\n", "webhook.yaml: line 2, column 1: while parsing a flow node: expected the node content"),
    ],
    ids=["bad-value", "unknown-key", "wrong-type", "broken-yaml"],
)
def test_bad_config_exits_2_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, needle: str
) -> None:
    config = tmp_path / "webhook.yaml"
    config.write_text(text)
    assert check.main(["--config", str(config), str(DATA / "clean")]) == report.UNREADABLE
    captured = capsys.readouterr()
    assert needle in captured.err and captured.err.count("\n") == 1
    assert captured.out == ""


def test_missing_config_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check.main(["--config", str(tmp_path / "nope.yaml"), str(DATA / "clean")]) == 2
    assert "cannot read config file" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["-o", "xml", "x.yaml"]], ids=["no-paths", "bad-output"])
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        check.main(argv)
    assert exit_.value.code == 2
    assert "usage: gpushare check" in capsys.readouterr().err


def test_missing_file_is_unreadable_but_the_rest_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run_json(capsys, str(tmp_path / "nope.yaml"), str(DATA / "kubeflow"))
    assert code == report.UNREADABLE
    assert out["errors"][0]["problem"] == "no such file or directory"
    assert "bert-finetune" in by_name(out)


def test_a_failure_inside_the_rules_is_reported_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = verdict.evaluate

    def flaky(obj: Any, policy: verdict.Policy) -> verdict.Verdict:
        if obj.get("kind") == "Deployment":
            raise RuntimeError("boom")
        return real(obj, policy)

    monkeypatch.setattr(verdict, "evaluate", flaky)
    code, out = run_json(capsys, str(DATA / "helm"))
    assert code == report.UNREADABLE
    assert out["errors"][0]["problem"] == "internal error checking this object: RuntimeError('boom')"
    assert out["errors"][0]["line"] == 34
    assert "release-trainer-warmup" in by_name(out)


def test_non_object_json_values_and_odd_metadata_do_not_crash(capsys: pytest.CaptureFixture[str]) -> None:
    text = b'[1, 2]\n{"kind": "Pod", "metadata": "oops", "spec": {"containers": "no"}}\n{"kind": "Pod"}\n'
    out = io.StringIO()
    code = check.run(check.CheckSettings(paths=("-",), output="json"), stdin=io.BytesIO(text), out=out)
    found = json.loads(out.getvalue())
    assert code == report.VIOLATIONS
    assert [r["name"] for r in found["results"]] == ["(no name)"]
    assert found["summary"]["skipped"] == 1


def test_huge_stream_of_manifests_is_checked_quickly(tmp_path: Path) -> None:
    doc = (DATA / "helm" / "rendered.yaml").read_text()
    assert doc.count("\n") == 97
    path = tmp_path / "huge.yaml"
    path.write_text(doc * 500)  # 2,000 objects, 1,000 of them with pod templates
    start = time.perf_counter()
    found = check.check_paths([str(path)], verdict.Policy())
    elapsed = time.perf_counter() - start
    assert found.objects == 2000
    assert found.denied == 500
    assert found.exit_code == report.VIOLATIONS
    assert found.results[-1].findings[0].line == 97 + 97 * 499  # lines keep counting across documents
    assert elapsed < 20  # about 1 s here; generous for a loaded CI machine


def test_check_starts_without_loading_server_frameworks() -> None:
    code = (
        "import sys; from webhook.cli import main; rc = main.main(['check', '-q', sys.argv[1]]); "
        "loaded = sorted(m for m in ('starlette', 'uvicorn', 'grpc', 'kubernetes', 'prometheus_client') "
        "if m in sys.modules); print(loaded); sys.exit(rc)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(DATA / "clean")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"


def _review(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    kind = obj["kind"]
    group, _, version = obj["apiVersion"].rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": kind.lower() + "s"},
            "name": obj["metadata"].get("name", ""),
            "namespace": obj["metadata"].get("namespace", "default"),
            "operation": "CREATE",
            "userInfo": {"username": "dev"},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def test_validate_endpoint_and_check_give_identical_messages(capsys: pytest.CaptureFixture[str]) -> None:
    """One rule set: every object of the sample inputs gets the same verdict, message and warnings."""
    paths = [str(DATA / p) for p in ("helm", "kustomize", "kubeflow", "mixed/list.json", "clean")]
    documents = [d for d in manifests.read_paths(paths) if isinstance(d, manifests.Document)]
    _, out = run_json(capsys, *paths)
    results = {(r["file"], r["name"]): r for r in out["results"]}
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

    compared = denied = warned = 0
    for doc, response in zip(documents, asyncio.run(validate_all()), strict=True):
        mine = results.get((doc.source, doc.obj["metadata"]["name"]))
        if mine is None:  # nothing to report: the webhook allows it silently too
            assert response["allowed"] is True
            assert "warnings" not in response
            continue
        compared += 1
        assert response["allowed"] is mine["allowed"]
        assert response.get("warnings", []) == mine["warnings"]
        warned += bool(mine["warnings"])
        if not mine["allowed"]:
            denied += 1
            assert response["status"]["message"] == mine["message"]
            for finding in mine["violations"]:
                assert finding["message"] in mine["message"].splitlines()
    assert (compared, denied, warned) == (10, 4, 1)


def test_check_and_the_webhook_cap_warnings_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """30 misspelt GPU names: both list MAX_WARNINGS warnings, the last saying how many more."""
    containers = [
        {"name": f"c{i}", "image": "x", "resources": {"limits": {"nvidia.com/gpus": "1"}}} for i in range(30)
    ]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "typos"},
        "spec": {"containers": containers},
    }
    manifest = tmp_path / "typos.json"
    manifest.write_text(json.dumps(pod))
    _, out = run_json(capsys, str(manifest))
    [mine] = out["results"]
    app = admission_app.create_app(admission_settings.AdmissionSettings())

    async def validate() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            answer = await client.post("/validate", json=_review(pod, "uid-typos"))
            assert answer.status_code == 200
            response: dict[str, Any] = answer.json()["response"]
            return response

    response = asyncio.run(validate())
    assert response["warnings"] == mine["warnings"]
    assert len(mine["warnings"]) == verdict.MAX_WARNINGS
    assert mine["warnings"][-1] == f"... and {30 - verdict.MAX_WARNINGS + 1} more warnings"


def test_pre_commit_hook_runs_gpushare_check_on_manifest_files() -> None:
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "gpushare-check"
    assert hook["entry"].split()[:2] == ["gpushare", "check"]
    assert hook["language"] == "python"
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])
    picked = [
        p
        for p in (
            "deploy/pod.yaml",
            "k8s/job.yml",
            "list.json",
            "README.md",
            "chart/values.yaml",
            "Chart.yaml",
        )
        if files.search(p) and not exclude.search(p)
    ]
    assert picked == ["deploy/pod.yaml", "k8s/job.yml", "list.json"]


def test_a_share_too_small_for_a_cuda_context_is_a_warning_as_the_webhook_gives_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = tmp_path / "tiny.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: tiny}\nspec:\n  containers:\n"
        "  - {name: train, image: x, resources: {limits: {aliyun.com/gpu-mem: 256}}}\n"
    )
    code, out = run_json(capsys, "--memory-unit", "MiB", str(manifest))
    assert code == report.CLEAN
    [result] = out["results"]
    assert result["warnings"] == [
        'container "train": 256 MiB of GPU memory may not hold a CUDA context; ask at least 512'
    ]
    config = tmp_path / "webhook.yaml"
    config.write_text("memoryUnit: MiB\nminShareMiB: 0\n")
    code, out = run_json(capsys, "--config", str(config), str(manifest))
    assert code == report.CLEAN and out["results"][0]["warnings"] == []


QUOTAS = """\
apiVersion: v1
kind: ResourceQuota
metadata: {name: gpu, namespace: team-a}
spec:
  hard:
    limits.aliyun.com/gpu-mem: "64"
    requests.nvidia.com/gpu: "2"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: team-a}
spec:
  resourceGroups:
  - coveredResources: [aliyun.com/gpumem]
    flavors:
    - name: gpu-share
      resources:
      - {name: aliyun.com/gpumem, nominalQuota: 16}
"""


def test_quota_objects_that_count_nothing_are_warned_at_their_line_with_the_spelling_that_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "quotas.yaml"
    path.write_text(QUOTAS)
    assert check.main([str(path)]) == 0  # warnings, not denials: the API server takes them as written
    lines = capsys.readouterr().out.splitlines()
    assert f"{path}:1: ResourceQuota team-a/gpu: allowed" in lines
    assert (
        "  warning: spec.hard[limits.aliyun.com/gpu-mem]: the API server counts aliyun.com/gpu-mem only as "
        "requests.aliyun.com/gpu-mem (an extended resource has no limits. quota), so this key limits "
        "nothing; write requests.aliyun.com/gpu-mem"
    ) in lines
    assert f"{path}:9: ClusterQueue team-a: allowed" in lines
    assert sum("did you mean aliyun.com/gpu-mem?" in line for line in lines) == 2
    assert lines[-1] == "checked 2 objects in 1 file, 0 denied (0 violations), 3 warnings"
