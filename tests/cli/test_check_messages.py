"""`gpushare check` on what a data scientist writes: units, typos, wrong types (exit 1, never an internal
error), the extender's words for the same mistake, the configured unit, and the progress line."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import yaml

from webhook.cli import check, report
from webhook.core.admission import verdict
from webhook.core.specs import demand
from webhook.core.specs.finding import Finding

MEM = "aliyun.com/gpu-mem"


def pod(*containers: Any, labels: Any = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "nb", "namespace": "ds"}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": list(containers)}}


def ctr(limits: dict[str, Any], name: str = "train") -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": limits}}


def check_objects(*objs: Any, policy: verdict.Policy | None = None) -> tuple[int, dict[str, Any]]:
    text = "\n---\n".join(yaml.safe_dump(o) for o in objs).encode()
    settings = check.CheckSettings(paths=("-",), output="json", policy=policy or verdict.Policy())
    out = io.StringIO()
    code = check.run(settings, stdin=io.BytesIO(text), out=out, err=io.StringIO())
    return code, json.loads(out.getvalue())


def messages(out: dict[str, Any]) -> list[str]:
    return [v["message"] for r in out["results"] for v in r["violations"]]


@pytest.mark.parametrize("value", ["3Gi", "3G", "3072Mi"], ids=["Gi", "G", "Mi"])
def test_gpu_mem_with_a_unit_suffix_is_denied_with_the_number_to_write(value):
    code, out = check_objects(pod(ctr({MEM: value})))
    assert code == report.VIOLATIONS
    (message,) = messages(out)
    assert message.startswith(f'spec.containers[0].resources.limits[{MEM}] (container "train"): "{value}": ')
    assert message.endswith("with no unit suffix; fix: write 3; the unit is GiB")


def test_the_configured_unit_is_the_one_every_message_names():
    policy = verdict.Policy(memory_unit="MiB")
    _, out = check_objects(pod(ctr({MEM: "3Gi"}), ctr({MEM: "0.5"}, "b")), policy=policy)
    first, second = messages(out)
    assert first.endswith("fix: write 3072; the unit is MiB")
    assert second.endswith(
        "counts whole MiB; a fraction of a MiB is not possible; fix: write 1; the unit is MiB"
    )
    assert "GiB" not in first + second


def test_the_memory_unit_flag_sets_the_unit():
    args = check.build_parser().parse_args(["--memory-unit", "128MiB", "-"])
    assert check.settings_from_args(args).policy.memory_unit == "128MiB"
    with pytest.raises(SystemExit):
        check.build_parser().parse_args(["--memory-unit", "GB", "-"])


@pytest.mark.parametrize(
    ("obj", "fragment"),
    [
        (
            {**pod(), "spec": {"containers": 3}},
            'spec.containers: "3": has the wrong type: expected a list of',
        ),
        ({**pod(), "spec": {"containers": ["x"]}}, 'spec.containers[0]: "x": has the wrong type'),
        (pod({"name": "c", "resources": {"limits": [MEM]}}), 'limits (container "c"): has the wrong type'),
        ({**pod(), "spec": 7}, "spec: has the wrong type"),
        ({**pod(), "metadata": {"name": "x", "labels": ["a"]}}, "metadata.labels: has the wrong type"),
        (
            {**pod(ctr({MEM: 4})), "metadata": {"name": "x", "annotations": ["a"]}},
            "metadata.annotations: has",
        ),
        ({**pod(), "spec": {"containers": True}}, 'spec.containers: "true": has the wrong type: expected a'),
        (
            {**pod(), "spec": {"containers": [ctr({MEM: 4})], "initContainers": 3}},
            'spec.initContainers: "3": has the wrong type: expected a list of containers, got a number',
        ),
        (
            {**pod(), "spec": {"containers": [ctr({MEM: 4})], "initContainers": True}},
            'spec.initContainers: "true": has the wrong type: expected a list of containers, got a boolean',
        ),
    ],
    ids=[
        "containers-number",
        "container-string",
        "limits-list",
        "spec-number",
        "labels-list",
        "annotations-list",
        "containers-true",
        "init-number-beside-gpu-mem",
        "init-true-beside-gpu-mem",
    ],
)
def test_wrong_typed_fields_are_violations_naming_the_field_not_internal_errors(obj, fragment):
    code, out = check_objects(obj)
    assert code == report.VIOLATIONS
    assert out["errors"] == []
    assert any(fragment in m for m in messages(out)), messages(out)


def check_text(text: bytes) -> tuple[int, dict[str, Any], str]:
    settings = check.CheckSettings(paths=("-",), output="json", policy=verdict.Policy())
    out, err = io.StringIO(), io.StringIO()
    code = check.run(settings, stdin=io.BytesIO(text), out=out, err=err)
    return code, json.loads(out.getvalue()), err.getvalue()


HUGE = "9" * 5000  # past Python's 4,300-digit limit on int(): read as the webhook reads it (infinity)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        (json.dumps(pod(ctr({MEM: "4"}))).replace('"4"', HUGE), report.VIOLATIONS),
        (json.dumps(pod(ctr({MEM: "4"}))).replace('"ds"', f'"ds", "x": {HUGE}'), report.CLEAN),
        (yaml.safe_dump(pod(ctr({MEM: "4"}))).replace("'4'", HUGE), report.VIOLATIONS),
        (yaml.safe_dump(pod(ctr({MEM: "4"}))).replace("ds", f"ds\n  x: -{HUGE}"), report.CLEAN),
    ],
    ids=["json-gpu-field", "json-elsewhere", "yaml-gpu-field", "yaml-elsewhere"],
)
def test_integers_past_4300_digits_are_read_not_an_internal_error(text, code):
    found, out, err = check_text(text.encode())
    assert (found, out["errors"], err) == (code, [], "")
    if code == report.VIOLATIONS:
        (message,) = messages(out)
        assert message.startswith(f'spec.containers[0].resources.limits[{MEM}] (container "train"): "inf": ')


def test_a_lone_surrogate_or_control_character_in_a_name_is_shown_escaped():
    text = json.dumps(pod(ctr({MEM: 0.5}))).replace('"nb"', '"\\ud800\\u001b[2J"').encode()
    settings = check.CheckSettings(paths=("-",), output="text", policy=verdict.Policy())
    out = io.StringIO()
    assert check.run(settings, stdin=io.BytesIO(text), out=out, err=io.StringIO()) == report.VIOLATIONS
    assert "Pod ds/\\ud800\\x1b[2J: denied" in out.getvalue()
    out.getvalue().encode("utf-8")  # writable to any UTF-8 stream


def test_the_extender_says_what_check_says():
    # The extender reads a pod through core.specs.demand; check through core.specs.podread: one text for
    # one mistake.
    for bad in (
        pod(ctr({MEM: "3Gi"})),
        pod(ctr({MEM: "1.5"})),
        pod(ctr({MEM: 4, "nvidia.com/gpu": 1})),
        pod(ctr({MEM: 4, "aliyun.com/gpu-count": 2})),
        pod(ctr({MEM: float("inf")})),
        pod(ctr({MEM: 4}), labels={"aliyun.com/gpu-count": "two"}),
        pod(ctr({MEM: 5}), labels={"aliyun.com/gpu-count": "2"}),
        pod(ctr({MEM: 4}), labels=3),
        {**pod(), "spec": {"containers": [ctr({MEM: 4})], "initContainers": 3}},
        {**pod(), "spec": {"containers": True}},
        {**pod(), "spec": {"containers": [ctr({MEM: 4}), "x"]}},
    ):
        _, out = check_objects(bad)
        with pytest.raises(Finding) as err:
            demand.pod_demand(bad)
        assert messages(out)[0] == str(err.value)


def test_gpu_count_in_limits_is_denied_with_the_label_as_fix():
    _, out = check_objects(pod(ctr({MEM: 8, "aliyun.com/gpu-count": 2})))
    (message,) = messages(out)
    assert 'fix: remove it from resources and set the pod label aliyun.com/gpu-count: "2"' in message


def test_misspelt_gpu_resources_warn_with_the_container_and_the_likely_name():
    code, out = check_objects(pod(ctr({"nvidia.com/gpus": 1}), ctr({"aliyun.com/gpu-memory": 4}, "b")))
    assert code == report.CLEAN
    assert out["results"][0]["warnings"] == [
        'container "train": limits[nvidia.com/gpus] is no GPU resource; did you mean nvidia.com/gpu?',
        'container "b": limits[aliyun.com/gpu-memory] is no GPU resource; did you mean aliyun.com/gpu-mem?',
    ]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _many(count: int) -> bytes:
    return "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n" for i in range(count)
    ).encode()


def test_a_terminal_sees_a_progress_line_on_large_input_and_it_is_erased():
    err, out = _Terminal(), io.StringIO()
    settings = check.CheckSettings(paths=("-",), quiet=True)
    assert check.run(settings, stdin=io.BytesIO(_many(check.PROGRESS_AFTER + 50)), out=out, err=err) == 0
    assert "checking: 1,000 objects" in err.getvalue()
    assert err.getvalue().endswith("\r\x1b[K")  # erased before the report
    assert "checking" not in out.getvalue()


@pytest.mark.parametrize("count", [check.PROGRESS_AFTER + 50, 10], ids=["piped", "small-on-a-terminal"])
def test_no_progress_line_when_piped_or_for_small_input(count):
    err = io.StringIO() if count > check.PROGRESS_AFTER else _Terminal()
    settings = check.CheckSettings(paths=("-",), quiet=True)
    check.run(settings, stdin=io.BytesIO(_many(count)), out=io.StringIO(), err=err)
    assert err.getvalue() == ""
