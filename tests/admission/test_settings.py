"""AdmissionSettings from the YAML config file and overrides; every bad value is a clear ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.admission import samples
from webhook.admission import review, settings
from webhook.core import resources, verdict

MEM = "aliyun.com/gpu-mem"

FULL = """
host: 127.0.0.1
port: 9443
certDir: /etc/webhook/certs
serviceDns: [gpushare-webhook.gpushare.svc]
maxBodyBytes: 2048
logLevel: debug
logFormat: text
certReloadIntervalSeconds: 5
resources:
  wholeDevice: [nvidia.com/gpu, example.com/tpu]
  wholeDevicePrefixes: [nvidia.com/mig-, example.com/slice-]
  memory: example.com/gpu-mem
  count: example.com/gpu-count
isolation:
  labelKey: example.com/isolation
  annotationKey: example.com/isolation-choice
  envName: NO_ISOLATION
  default: true
excludedNamespaces: [kube-system, gpushare]
schedulerName: gpushare-scheduler
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_defaults_need_no_file():
    s = settings.build()
    assert (s.host, s.port, s.cert_dir, s.cert, s.key) == ("0.0.0.0", 8443, Path("certs"), None, None)
    assert s.policy == verdict.Policy()
    assert s.excluded_namespaces == frozenset()
    assert s.max_body_bytes == 3 * 1024 * 1024
    assert (s.log_level, s.log_format) == ("info", "json")


def test_every_config_key_is_read(tmp_path):
    s = settings.build(settings.load_config(write(tmp_path, FULL)))
    assert (s.host, s.port, s.cert_dir) == ("127.0.0.1", 9443, Path("/etc/webhook/certs"))
    assert s.service_dns == ("gpushare-webhook.gpushare.svc",)
    assert (s.max_body_bytes, s.log_level, s.log_format, s.cert_reload_interval_s) == (
        2048,
        "debug",
        "text",
        5.0,
    )
    assert s.policy == verdict.Policy(
        names=resources.GpuResourceNames(
            whole_device=frozenset({"nvidia.com/gpu", "example.com/tpu"}),
            whole_device_prefixes=("nvidia.com/mig-", "example.com/slice-"),
            memory="example.com/gpu-mem",
            count="example.com/gpu-count",
        ),
        isolation=verdict.IsolationPolicy(
            label_key="example.com/isolation",
            annotation_key="example.com/isolation-choice",
            env_name="NO_ISOLATION",
            default="true",
        ),
        scheduler_name="gpushare-scheduler",
    )
    assert s.excluded_namespaces == {"kube-system", "gpushare"}


def test_overrides_win_over_the_file_and_none_is_ignored(tmp_path):
    config = settings.load_config(write(tmp_path, "port: 9443\nlogLevel: debug\n"))
    s = settings.build(config, {"port": 10443, "log_level": None})
    assert (s.port, s.log_level) == (10443, "debug")


def test_an_empty_file_means_defaults(tmp_path):
    assert settings.build(settings.load_config(write(tmp_path, "# nothing\n"))) == settings.build()


def test_quoted_and_unquoted_isolation_default_agree(tmp_path):
    quoted = settings.policy_from_config({"isolation": {"default": "False"}})
    unquoted = settings.policy_from_config({"isolation": {"default": False}})
    assert quoted.isolation.default == unquoted.isolation.default == "false"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: [1\n", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("prot: 1\n", r"unknown key\(s\) prot"),
        ("port: '8443'\n", "port must be an integer"),
        ("port: 70000\n", "port must be 0-65535"),
        ("port: true\n", "port must be an integer"),
        ("maxBodyBytes: 10\n", "at least 1024"),
        ("logLevel: loud\n", "logLevel must be one of"),
        ("logFormat: xml\n", "logFormat must be one of"),
        ("certReloadIntervalSeconds: 0\n", "must be > 0"),
        ("cert: a.crt\n", "cert and key go together"),
        ("resources: [nvidia.com/gpu]\n", "resources must be a mapping"),
        ("resources: {gpu: x}\n", r"resources: unknown key\(s\) gpu"),
        ("resources: {wholeDevice: nvidia.com/gpu}\n", "must be a list of strings"),
        ("resources: {memory: ''}\n", "resources.memory must be a non-empty string"),
        ("isolation: {default: maybe}\n", "isolation.default must be true or false"),
        ("isolation: {labelKey: 3}\n", "isolation.labelKey must be a non-empty string"),
        ("excludedNamespaces: kube-system\n", "excludedNamespaces must be a list"),
        ("excludedNamespaces: [1]\n", r"excludedNamespaces\[0\]"),
        ("schedulerName: {}\n", "schedulerName must be a non-empty string"),
        ("serviceDns: a.svc\n", "serviceDns must be a list"),
        ("memoryUnit: GB\n", "memoryUnit: memory unit 'GB' is not GiB, MiB"),
        ("memoryUnit: 3\n", "memoryUnit must be a non-empty string"),
    ],
    ids=lambda v: v.strip().replace("\n", " ")[:40] if isinstance(v, str) else str(v),
)
def test_bad_config_is_a_clear_config_error(tmp_path, text, message):
    with pytest.raises(settings.ConfigError, match=message):
        settings.build(settings.load_config(write(tmp_path, text)))


def test_the_memory_unit_of_the_config_file_is_the_one_every_denial_names(tmp_path):
    policy = settings.build(settings.load_config(write(tmp_path, "memoryUnit: MiB\n"))).policy
    assert policy.memory_unit == "MiB"
    pod = {"kind": "Pod", "spec": {"containers": [{"name": "c", "resources": {"limits": {MEM: "3Gi"}}}]}}
    message = verdict.evaluate(pod, policy).message()
    assert message.endswith("fix: write 3072; the unit is MiB") and "GiB" not in message.replace("3Gi", "")
    assert settings.build().policy.memory_unit == "GiB"


def test_with_mib_a_size_the_api_server_wrote_as_4k_is_allowed_and_patched(tmp_path):
    # kubectl apply of `aliyun.com/gpu-mem: 4000` reaches the webhook as "4k" (canonical form).
    policy = settings.build(settings.load_config(write(tmp_path, "memoryUnit: MiB\n"))).policy
    body = samples.review(samples.pod(samples.pod_spec(samples.container(limits={MEM: "4k"}))))
    answer = review.review(body, "mutate", review.Policy(rules=policy))
    assert answer.outcome == "patched" and answer.review["response"]["allowed"] is True


def test_an_unreadable_config_file_is_a_config_error(tmp_path):
    with pytest.raises(settings.ConfigError, match="cannot read config file"):
        settings.load_config(tmp_path / "missing.yaml")
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(settings.ConfigError, match="cannot read config file"):
        settings.load_config(tmp_path / "binary.yaml")


def test_an_unknown_override_is_a_config_error():
    with pytest.raises(settings.ConfigError, match="unknown setting"):
        settings.build(overrides={"colour": "blue"})
