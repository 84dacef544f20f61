"""AdmissionSettings from the YAML config file and overrides; every bad value is a clear ConfigError."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.admission import samples
from webhook.admission import review, settings
from webhook.core.admission import claims, verdict
from webhook.core.wire import resources

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
minShareMiB: 768
dra: {shareClass: mem, wholeGpuClass: card, memoryStep: 512Mi, maxMemory: 141Gi}
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
        claims=claims.ClaimPolicy("mem", "card", 512 << 20, 141 << 30),
        min_share_mib=768,
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
        ("port: [1\n", "line 2, column 1: while parsing a flow sequence: expected ',' or ']'"),
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
        ("minShareMiB: -1\n", "minShareMiB must be a whole number of MiB, 0 or more"),
        ("minShareMiB: 0.5\n", "minShareMiB must be a whole number of MiB"),
        ("minShareMiB: '512'\n", "minShareMiB must be a whole number of MiB"),
        ("minShareMiB: true\n", "minShareMiB must be a whole number of MiB"),
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


def test_an_unreadable_config_file_is_a_config_error_naming_it_once(tmp_path):
    missing = tmp_path / "missing.yaml"
    with pytest.raises(settings.ConfigError) as exc:
        settings.load_config(missing)
    assert str(exc.value) == f"cannot read config file {missing}: No such file or directory"
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(settings.ConfigError, match=r"binary.yaml: not UTF-8 text \(byte 0\)$"):
        settings.load_config(tmp_path / "binary.yaml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 1\n bad: 2\n", "line 2, column 5: mapping values are not allowed here"),
        ("a: [\n", "line 2, column 1: while parsing a flow node: expected the node content, but found"),
        ("port: \x01\n", "line 1, column 7: unacceptable character #x0001: special characters are not"),
        ("port: " + "[" * 100_000 + "\n", "nested too deeply"),
        ("port: " + "9" * 5000 + "\n", "Exceeds the limit (4300 digits)"),
    ],
    ids=["mapping-in-scalar", "unclosed-flow", "control-character", "deep", "huge-integer"],
)
def test_a_file_yaml_cannot_read_is_one_line_naming_the_file_and_place(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(settings.ConfigError) as exc:
        settings.load_config(path)
    assert str(exc.value).startswith(f"config file {path}: {message}")
    assert "\n" not in str(exc.value) and "<unicode string>" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 70000\n", "port must be 0-65535, got 70000"),
        ("logLevel: loud\n", "logLevel must be one of debug, info, warning, error, got 'loud'"),
        ("cert: a.crt\n", "cert and key go together: give both or neither"),
        ("isolation: {default: maybe}\n", "isolation.default must be true or false, got 'maybe'"),
    ],
    ids=["port", "log-level", "cert-alone", "isolation-default"],
)
def test_a_bad_value_in_the_file_names_the_file(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(settings.ConfigError) as exc:
        settings.from_file(path)
    assert str(exc.value) == f"config file {path}: {message}"


def test_a_bad_flag_value_does_not_blame_the_file(tmp_path):
    path = write(tmp_path, "port: 70000\nlogLevel: debug\n")
    with pytest.raises(settings.ConfigError) as exc:
        settings.from_file(path, {"port": 70001})
    assert str(exc.value) == "port must be 0-65535, got 70001"
    with pytest.raises(settings.ConfigError) as exc:
        settings.from_file(write(tmp_path, "logLevel: debug\n"), {"cert": "a.crt"})
    assert str(exc.value) == "cert and key go together: give both or neither"
    # The file's half of a pair the flags complete is no mistake; a flag replacing a bad value mends it.
    s = settings.from_file(write(tmp_path, "cert: a.crt\nport: 70000\n"), {"key": "a.key", "port": 9443})
    assert (s.cert, s.key, s.port) == (Path("a.crt"), Path("a.key"), 9443)


def test_the_rules_check_reads_name_the_file_and_the_server_keys_go_unchecked(tmp_path):
    path = write(tmp_path, "port: 70000\nisolation: {default: maybe}\n")
    with pytest.raises(settings.ConfigError) as exc:
        settings.rules_from_file(path)
    assert str(exc.value) == f"config file {path}: isolation.default must be true or false, got 'maybe'"
    policy, excluded = settings.rules_from_file(write(tmp_path, "port: 70000\nexcludedNamespaces: [a]\n"))
    assert (policy, excluded) == (verdict.Policy(), frozenset({"a"}))
    assert settings.rules_from_file(None) == (verdict.Policy(), frozenset())


def test_an_unknown_override_is_a_config_error():
    with pytest.raises(settings.ConfigError, match="unknown setting"):
        settings.build(overrides={"colour": "blue"})


def test_small_shares_get_the_warning_of_the_config_files_least_share(tmp_path):
    pod = samples.pod(samples.pod_spec(samples.container(limits={MEM: "256"})))
    for text, warned in (("memoryUnit: MiB\n", True), ("memoryUnit: MiB\nminShareMiB: 0\n", False)):
        policy = settings.build(settings.load_config(write(tmp_path, text))).policy
        answer = review.review(samples.review(pod), "validate", review.Policy(rules=policy))
        response = answer.review["response"]
        assert response["allowed"] is True
        assert ("warnings" in response) is warned, response
    assert settings.build().policy.min_share_mib == 512
